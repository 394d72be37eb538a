"""A topic the grader makes for a check is new and its own, even when its seeded name is taken.

CI once failed a check with TopicAlreadyExistsError on the grader's own, seeded topic name: a
creation the brokers carried out but whose answer the client lost (the connection broke) is
sent again and refused. graders_topic then takes another number; it never adopts a topic of that
name, which someone else (the student's code, in the grading's namespace) could have made."""

from __future__ import annotations

import random
import uuid

from selfcheck.checks import Context
from selfcheck.checks.kafka_state import graders_topic


def test_a_taken_name_gets_another_number_and_the_taken_topic_is_left_alone(cluster):
    ctx = Context("lab10", "lab10-q2", None, f"taken-{uuid.uuid4().hex[:8]}", cluster.admin_connection(), seed=7)
    try:
        # the name graders_topic draws first, from the same seeded source as the check's
        taken = ctx.topic(f"flights-{random.Random(f'{ctx.seed}:{ctx.label}').randrange(10**6)}")
        ctx.admin.create_topics({taken: {"num_partitions": 2, "replication_factor": 3}})
        ctx.admin.wait_for_topics([taken])

        topic = graders_topic(ctx, "flights", 1, protect=False)

        assert topic != taken and topic.startswith(ctx.topic("flights-"))
        described = {t["name"]: len(t["partitions"]) for t in ctx.admin.describe_topics([taken, topic])}
        assert described == {taken: 2, topic: 1}
    finally:
        ctx.admin.delete_topics([t for t in ctx.admin.list_topics() if t.startswith(ctx.topic(""))])
        ctx.close()
