"""Lab 7's clusters of one's own (cluster/own.py): free ports that two gradings never share, no
broker left behind when a start fails half-way, and a grading's login that sees its namespace only."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    NewTopic,
    ResourcePatternFilter,
    ResourceType,
)

from cluster import own, settings, tools
from refusals import refused


def test_two_clusters_starting_at_once_get_different_ports():
    first, fd1 = own._lock_free_port_base()
    try:
        second, fd2 = own._lock_free_port_base()
        os.close(fd2)
    finally:
        os.close(fd1)
    assert first != second
    assert {first, second} <= set(settings.OWN_PORT_BASES)


def test_a_start_that_fails_half_way_leaves_no_broker(tmp_path, monkeypatch, cluster):
    started = []

    def fail_after_the_brokers_started(c, namespace, view):
        started.extend(node.process() for node in c.nodes.values())
        raise RuntimeError("the user could not be made")

    monkeypatch.setattr(own, "_with_user", fail_after_the_brokers_started)
    with pytest.raises(RuntimeError, match="could not be made"):
        own.start(tmp_path / "own", "test-own")
    assert len(started) == 3 and all(started), "the brokers had started"
    assert not any(p.is_running() and p.status() != "zombie" for p in started), "a broker outlived the failed start"
    assert not (tmp_path / "own").exists()


def acls(admin, principal: str | None):
    """Every ACL (of this principal: None, anyone's) that the admin client's login may see."""
    anything = ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)
    return admin.describe_acls(ACLFilter(principal, None, ACLOperation.ANY, ACLPermissionType.ANY, anything))[0]


@pytest.mark.cluster
def test_a_gradings_login_lists_no_users_and_no_acls(tmp_path, monkeypatch):
    """Issue 41: on a grading's own cluster (labs 7 and 15) the grading's login has its namespace
    and nothing cluster-wide (Kafka's cluster DESCRIBE would also list every user and ACL); what
    the labs' graded cells and scripts do with it still works."""
    ns = f"own-{uuid.uuid4().hex[:6]}"
    grading = own.start(tmp_path / "own", ns, echo=lambda _: None)  # as autograder.pipeline starts it
    mine = grading.admin()
    try:
        refusals = {
            "the users": lambda: mine.describe_user_scram_credentials(users=[]),
            "every ACL": lambda: acls(mine, None),
            "its own ACLs": lambda: acls(mine, f"User:{ns}"),
            "the quorum": mine.describe_metadata_quorum,
            "reassignments": mine.list_partition_reassignments,
        }
        for what, call in refusals.items():
            try:
                refused(call)
            except AssertionError as e:
                raise AssertionError(f"{what}: {e}") from None
        # refused with an empty answer (kafka-python drops DescribeLogDirs' error code)
        assert [a["log_dirs"] for a in mine.describe_log_dirs(brokers=[1, 2, 3])] == [[], [], []]
        # Asked with no list of users (null) rather than an empty one, Kafka 4.1's brokers (and later) refuse
        # too, and then fail to answer (a NullPointerException in the refusal): no list either way.
        impatient = grading.admin(request_timeout_ms=3_000)
        try:
            with pytest.raises(Exception, match="AuthorizationFailed|[Aa]uthorization failed|RequestTimedOut"):
                impatient.describe_user_scram_credentials()
        finally:
            impatient.close()
        # an operator's tool, as the student's login: kafka-configs.sh --describe --entity-type users
        monkeypatch.setattr(tools, "account", lambda: grading.account)
        monkeypatch.setattr(tools, "bootstrap_servers", lambda: grading.bootstrap_servers)
        refused(lambda: tools.kafka_cli("configs", "--describe", "--entity-type", "users", echo=False))

        # What the labs do with this login: their topics (a replica assignment and settings, lab 7),
        # the cluster's brokers and each partition's leader and ISR, acks="all" writes, a group
        # that reads and commits, a transactional producer.
        assert {b["broker_id"] for b in mine.describe_cluster()["brokers"]} == {1, 2, 3}
        topic, placed, group = f"{ns}.events", f"{ns}.placed", f"{ns}.readers"
        mine.create_topics(
            [
                NewTopic(topic, 3, 3, topic_configs={"min.insync.replicas": "2", "retention.ms": str(7 * 86_400_000)}),
                NewTopic(placed, -1, -1, replica_assignments={0: [1, 2]}, topic_configs={"min.insync.replicas": "1"}),
            ]
        )
        mine.wait_for_topics([topic, placed])
        deadline = time.monotonic() + 30
        while not all(p["leader_id"] >= 0 for p in mine.describe_topics([topic])[0]["partitions"]):
            assert time.monotonic() < deadline, "no leaders"
            time.sleep(0.2)
        assert sorted(mine.describe_topics([placed])[0]["partitions"][0]["replica_nodes"]) == [1, 2]
        producer = KafkaProducer(**grading.connection, acks="all", enable_idempotence=True)
        for i in range(3):
            producer.send(topic, f"r{i}".encode(), key=b"k").get(30)
        producer.close()
        consumer = KafkaConsumer(
            topic, **grading.connection, group_id=group, auto_offset_reset="earliest", consumer_timeout_ms=15_000
        )
        assert sorted(m.value for m in consumer) == [b"r0", b"r1", b"r2"]
        consumer.commit()
        consumer.close()
        assert sum(o.offset for o in mine.list_group_offsets(group)[group].values()) == 3
        transactional = KafkaProducer(**grading.connection, transactional_id=f"{ns}.tx")
        transactional.init_transactions()
        transactional.begin_transaction()
        transactional.send(topic, b"in a transaction")
        transactional.commit_transaction()
        transactional.close()
        # ... and the checks ask as the cluster's admin what the login may not (lab 15's storage)
        with grading.cluster.admin() as root:
            assert all(a["log_dirs"] for a in root.describe_log_dirs(brokers=[1, 2, 3]))
            assert TopicPartition(topic, 0) not in root.list_partition_reassignments()

        # A cluster the student runs: lab 7's demonstrations read the quorum with this login, and
        # the same cluster DESCRIBE lists the users and ACLs (why a grading's login has none).
        own._with_user(grading.cluster, ns, view=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                assert mine.describe_metadata_quorum()["topics"][0]["partitions"][0]["leader_id"] in {1, 2, 3}
                assert ns in mine.describe_user_scram_credentials()
                assert acls(mine, None)
                break
            except Exception:  # the brokers learn the new ACL a moment after the controller
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        mine.close()
        grading.down()
