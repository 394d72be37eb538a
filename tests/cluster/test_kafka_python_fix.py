"""The course's fix for kafka-python 3.0.12's join race (cluster/kafka_python_fix.py): a consumer
that polls with a very short timeout gets its partitions every time, on the real brokers.

Without the fix, a fresh group polled with `timeout_ms=1` was given its partitions 2 times in 8
on this cluster: the member stayed in the group without heartbeats and never read a record."""

from __future__ import annotations

import time
import uuid

from kafka import KafkaConsumer, TopicPartition

from cluster import connection, group_name, kafka_python_fix, settings
from cluster.waiting import wait_for

ATTEMPTS = 8
DEADLINE_S = 6.0  # a fresh group forms in ~0.2 s here; a stuck member never does


def test_the_fix_is_applied_to_the_pinned_kafka_python():
    assert settings.python_pins()["kafka-python"] == kafka_python_fix.PATCHED_VERSION, (
        "kafka-python's pin moved: check whether the join race is still there (this module's experiment "
        "without the fix), then move PATCHED_VERSION or remove the fix"
    )
    assert kafka_python_fix.APPLIED


def test_short_polls_get_their_partitions_every_time(cluster, admin):
    topic = f"test.join-race-{uuid.uuid4().hex[:6]}"
    admin.create_topics({topic: {"num_partitions": 4, "replication_factor": 3}})
    admin.wait_for_topics([topic])
    missed = []
    try:
        for attempt in range(ATTEMPTS):
            with KafkaConsumer(
                topic,
                **connection(),
                group_id=group_name(f"join-race-{uuid.uuid4().hex[:6]}"),
                session_timeout_ms=6000,
                heartbeat_interval_ms=500,
            ) as consumer:
                deadline = time.monotonic() + DEADLINE_S
                while len(consumer.assignment()) < 4 and time.monotonic() < deadline:
                    consumer.poll(timeout_ms=1)
                if len(consumer.assignment()) < 4:
                    missed.append((attempt, sorted(tp.partition for tp in consumer.assignment())))
    finally:
        admin.delete_topics([topic])
    assert not missed, f"(attempt, partitions) of members left without their partitions after {DEADLINE_S} s: {missed}"


def test_an_admin_client_outlives_its_controller(healthy):
    """The admin client asked broker N for topic creations; N restarts (a new connection, a new
    registration): the next creation must still work, asked of whoever is the controller now.
    Without the fix: UnknownBrokerIdError or a refused connection, for as long as the client lives."""
    client = healthy.admin()
    names = [f"test.controller-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
    try:
        client.create_topics({names[0]: {"num_partitions": 1, "replication_factor": 2}})
        asked = client._controller_id
        assert asked in settings.NODE_IDS
        healthy.stop_broker(asked)
        client.create_topics({names[1]: {"num_partitions": 1, "replication_factor": 2}})
        # created: the controller said so; the broker list_topics asks learns of it a moment later
        deadline = time.monotonic() + 15
        while names[1] not in client.list_topics() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert names[1] in client.list_topics()
    finally:
        healthy.start_broker(asked)
        client.delete_topics([n for n in names if n in client.list_topics()])
        client.close()


def consume_through_a_coordinator_kill(cluster, admin, records: int = 400) -> list[str]:
    """A consumer in a group reads a topic while the broker coordinating its group is killed and
    started again; what poll() raised on the way (nothing, with the fix). Asserts it read every record."""
    from kafka import KafkaProducer

    topic = f"test.coordinator-kill-{uuid.uuid4().hex[:6]}"
    admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 3}})
    admin.wait_for_topics([topic])
    producer = KafkaProducer(**connection(), acks="all")
    for i in range(records):
        producer.send(topic, b"%d" % i)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(
        topic,
        **connection(),
        group_id=group_name(f"coordinator-kill-{uuid.uuid4().hex[:6]}"),
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    raised, read, victim, killed_at = [], set(), None, None
    try:
        deadline = time.monotonic() + 90
        while len(read) < records and time.monotonic() < deadline:
            try:
                polled = consumer.poll(timeout_ms=200, max_records=20)
            except Exception as e:  # what a student's loop would die of
                raised.append(f"{type(e).__name__}: {e}")
                continue
            read.update(int(r.value) for rs in polled.values() for r in rs)
            if victim is None and read:
                victim = int(str(consumer._coordinator.coordinator_id).split("-")[-1])  # 'coordinator-3'
                cluster.kill_broker(victim)
                killed_at = time.monotonic()
            elif victim is not None and killed_at and time.monotonic() - killed_at > 10:
                cluster.start_broker(victim)
                killed_at = None
    finally:
        consumer.close()
        if victim is not None and killed_at:
            cluster.start_broker(victim)
    assert len(read) == records, f"read {len(read)} of {records} records through the kill (raised: {raised[:3]})"
    return raised


def test_a_consumer_polls_through_its_coordinators_death(healthy, admin):
    """The consumer rides through its coordinator's death. The race the fix closes (the lookup's
    metadata refresh sent to the dead broker, then KafkaConnectionError 111 ECONNREFUSED from
    poll()) was seen under the class load bench's load; on a quiet machine this test passed 5 of
    5 runs without the fix too, so it guards the ride-through, not the race itself."""
    raised = consume_through_a_coordinator_kill(healthy, admin)
    assert raised == [], f"poll() raised while a broker was down: {raised[:3]}"


def test_a_waited_for_topic_is_ready_on_every_broker(cluster, admin):
    """After `wait_for_topics`, each broker, asked alone, lists every partition with a leader.
    Without the fix the wait asks one broker, and a description sent next to another one found
    the topic with no partitions (seen once in CI under load); on a quiet machine the lag is rare,
    so this test guards the promise more than it reproduces the race."""
    names = [f"test.everywhere-{uuid.uuid4().hex[:6]}-{i}" for i in range(6)]
    behind = []
    try:
        for name in names:
            admin.create_topics({name: {"num_partitions": 3, "replication_factor": 3}})
            admin.wait_for_topics([name])
            for node_id in settings.NODE_IDS:
                parts = kafka_python_fix.topics_on_broker(admin, node_id, [name])[name]["partitions"]
                if len(parts) != 3 or any(p["leader_id"] < 0 for p in parts):
                    behind.append((name, node_id, len(parts)))
    finally:
        admin.delete_topics(names)
    assert not behind, f"(topic, broker, partitions it listed) right after the wait: {behind}"


def test_metadata_is_fetched_from_a_live_broker_while_one_is_down(healthy, admin):
    """Fresh consumers ask for a topic's partitions while broker 3 is killed. Without the fix a
    consumer whose metadata refresh picked broker 3 raised KafkaConnectionError (111
    ECONNREFUSED): 5 of 20 here; with it, each one is answered by a live broker."""
    topic = f"test.one-down-{uuid.uuid4().hex[:6]}"
    admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 3}})
    admin.wait_for_topics([topic])
    raised, login = [], connection()  # the login made (and its rights on every broker) first
    try:
        with healthy.stopped(broker=3, kill=True):
            for _ in range(20):
                try:
                    with KafkaConsumer(**login, enable_auto_commit=False) as consumer:
                        partitions = consumer.partitions_for_topic(topic)
                except Exception as e:  # the fault under test: counted, and the loop goes on
                    raised.append(f"{type(e).__name__}: {e}")
                    continue
                assert partitions == {0, 1, 2}
    finally:
        admin.delete_topics([topic])
    assert raised == [], f"{len(raised)} of 20 consumers' metadata requests failed with one broker down: {raised[:3]}"


def test_end_offsets_of_a_known_and_a_new_topic_at_once(admin):
    """One consumer asks for the end offsets of a topic it has read the metadata of and of one it
    has not met. Without the fix kafka-python raised KeyError for the second (it left out the
    partitions whose leader it did not know yet); with it, both are answered."""
    known, new = (f"test.ends-{w}-{uuid.uuid4().hex[:6]}" for w in ("known", "new"))
    admin.create_topics(
        {known: {"num_partitions": 2, "replication_factor": 3}, new: {"num_partitions": 2, "replication_factor": 3}}
    )
    admin.wait_for_topics([known, new])
    try:
        with KafkaConsumer(**connection(), enable_auto_commit=False) as consumer:
            assert consumer.partitions_for_topic(known) == {0, 1}  # known, and only it
            wanted = [TopicPartition(t, p) for t in (known, new) for p in (0, 1)]
            assert consumer.end_offsets(wanted) == dict.fromkeys(wanted, 0)
    finally:
        admin.delete_topics([known, new])


def test_the_groups_of_a_broker_that_was_away_are_listed(healthy):
    """An admin client that refreshed its metadata while broker 2 was down, asked for every group
    once the broker is back. Without the fix the groups broker 2 coordinates were missing (10 of
    12 listed on an own cluster); with it, every group the brokers hold."""
    from kafka.errors import NoError
    from kafka.structs import OffsetAndMetadata

    client, writer = healthy.admin(), healthy.admin()
    topic = f"test.away-{uuid.uuid4().hex[:6]}"
    groups = {f"{topic}-{i}" for i in range(12)}
    try:
        client.create_topics({topic: {"num_partitions": 1, "replication_factor": 3}})
        healthy.stop_broker(2)
        client.list_topics()  # its metadata, refreshed while broker 2 is away
        healthy.start_broker(2)
        for g in sorted(groups):  # committed once broker 2 coordinates again (some of them on it)
            committed = wait_for(
                lambda g=g: writer.alter_group_offsets(g, {TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)}),
                timeout_s=30,
                until=lambda answer: all(e is NoError for e in answer.values()),
                retry_on=(Exception,),
            )
            assert committed, f"{g}'s offset not committed in 30 s: {committed.last}"
        listed = {g["group_id"] for g in client.list_groups()}
        assert groups <= listed, f"{len(groups - listed)} of {len(groups)} groups not listed"
    finally:
        client.delete_groups([g for g in groups])
        client.delete_topics([topic])
        client.close()
        writer.close()
