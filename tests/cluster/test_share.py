"""A share group's member from Python (cluster.share.ShareConsumer, Kafka's Java share consumer in
a child JVM, which lab 4 uses): records one at a time, each acknowledged, a released one delivered
again with its count one higher, a dead member's record handed to another member; and the share
groups' tools (kafka_cli) as the student's login."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaProducer
from kafka.admin import NewTopic

from cluster import connection, group_name, topic_name
from cluster.errors import ClusterError
from cluster.share import ShareConsumer
from cluster.tools import kafka_cli


@pytest.fixture
def queue(cluster):
    """A new one-partition topic holding three records, and a share group reset to its start."""
    from kafka import KafkaAdminClient

    name = topic_name(f"share-{uuid.uuid4().hex[:6]}")
    group = group_name(f"share-{uuid.uuid4().hex[:6]}")
    admin = KafkaAdminClient(**connection())
    admin.create_topics([NewTopic(name, 1, 3)])
    admin.wait_for_topics([name])
    with KafkaProducer(**connection(), acks="all") as producer:
        for i in range(3):
            producer.send(name, key=f"k{i}".encode(), value=f"job {i}".encode())
        producer.flush()
    kafka_cli(
        "share-groups", "--reset-offsets", "--to-earliest", "--execute", "--topic", name, "--group", group, echo=False
    )
    yield name, group
    admin.delete_groups([group])  # before its topic: Kafka 4.3 never deletes a share group whose topic is gone
    admin.delete_topics([name])
    admin.close()


def first_record(member: ShareConsumer, group: str, deadline_s: float = 60):
    """The member's first record, waited for up to deadline_s (a new member waits for its
    assignment and the share partition's state: longer on a loaded machine or just after a broker
    restart); if none comes, the group as the brokers describe it, to say why."""
    record = next(member.records(idle_s=deadline_s), None)
    if record is not None:
        return record
    described = [
        kafka_cli("share-groups", "--describe", what, "--group", group, echo=False)
        for what in ("--offsets", "--members")
    ]
    pytest.fail(f"no record within {deadline_s:.0f} s; the group:\n" + "\n".join(described))


def test_records_one_at_a_time_acknowledged_and_released(queue):
    topic, group = queue
    with ShareConsumer(topic, group) as member:
        first = first_record(member, group)
        assert first.value == b"job 0" and first.key == b"k0" and first.delivery_count == 1
        with pytest.raises(ClusterError, match="acknowledge the record you hold"):
            member.poll()
        member.acknowledge(first, "release")  # given back: the same record comes again, counted
        again = member.poll(timeout_s=20)
        assert again is not None and (again.offset, again.delivery_count) == (first.offset, 2)
        member.acknowledge(again)
        for value in (b"job 1", b"job 2"):
            record = member.poll(timeout_s=20)
            assert record is not None and record.value == value
            member.acknowledge(record)
    out = kafka_cli("share-groups", "--describe", "--offsets", "--group", group, echo=False)
    line = next(ln for ln in out.splitlines() if topic in ln)
    assert line.split()[-1] == "0", out  # LAG: every record acknowledged


def test_a_dead_members_record_goes_to_another(queue):
    topic, group = queue
    holder = ShareConsumer(topic, group, client_id="holder")
    held = first_record(holder, group)
    holder._proc.kill()  # as a crash: no acknowledgement, no goodbye
    holder._proc.wait(10)
    with ShareConsumer(topic, group, client_id="other") as other:
        seen = {}
        for record in other.records(idle_s=20):
            seen[record.offset] = record.delivery_count
            other.acknowledge(record)
            if len(seen) == 3:
                break
    assert seen.get(held.offset) == 2, seen


def test_an_idle_share_group_is_deleted_before_its_topic(queue):
    """start_lab and `cluster clean` delete a namespace's idle share groups before its topics:
    Kafka 4.3 never answers the deletion of a share group whose topic is already gone."""
    from cluster import bootstrap_servers, namespace
    from cluster.lab import Lab

    topic, group = queue  # the reset made the group; it has no member
    lab = Lab("test", bootstrap_servers(), namespace(), connection())
    try:
        assert group in lab.delete_idle_share_groups()
        assert group not in [g["group_id"] for g in lab.admin.list_groups(types_filter=["share"])]
    finally:
        lab.admin.close()
