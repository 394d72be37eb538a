"""Lab 14's machinery on a cluster of one's own (cluster/own.py), against real brokers: each broker's
metrics page (the Prometheus JMX exporter's agent) as own.metrics() reads it, a fourth broker added
and removed, partitions moved onto it with Kafka's own tools as the student's login, and those
tools run from a script inside the grading sandbox.

One cluster for the module (a start is the dearest part). Measured on the 2-core machine with
other sessions' work on it (load 14), three runs: the module in 38-47 s and 34-37 CPU s (the
cluster's start 10-14 s, metrics 4-9 s, scaling 20-23 s with its six tool JVMs and two broker
starts, the sandbox 1-4 s)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from cluster import own, settings
from cluster.errors import ClusterError
from cluster.tools import kafka_cli
from cluster.waiting import wait_for

DEADLINE_S = 60


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """A cluster of one's own as a grading starts it (no cluster-wide rights for its login)."""
    ns = f"ops-{uuid.uuid4().hex[:6]}"
    started = own.start(tmp_path_factory.mktemp("ops") / "own", ns, echo=lambda _: None)
    yield started
    started.down()


def topic_on(ours, name: str, assignment: dict[int, list[int]]) -> str:
    topic = f"{ours.account.username}.{name}"
    with ours.admin() as admin:
        admin.create_topics([NewTopic(topic, -1, -1, replica_assignments=assignment)])
        waited = wait_for(
            lambda: admin.describe_topics([topic])[0]["partitions"],
            timeout_s=DEADLINE_S,
            until=lambda parts: len(parts) == len(assignment) and all(p["leader_id"] >= 0 for p in parts),
        )
    assert waited, f"{topic} has no leaders after {DEADLINE_S} s: {waited.last}"
    return topic


def partition(ours, topic: str, p: int = 0) -> dict:
    with ours.admin() as admin:
        return next(x for x in admin.describe_topics([topic])[0]["partitions"] if x["partition_index"] == p)


@pytest.mark.cluster
def test_metrics_follow_what_clients_and_faults_do(ours):
    """Bytes in rise on the leader's broker as records are written; a stopped broker leaves the
    others' under-replicated count above 0 (and is absent from the scrape), and its start brings
    it back to 0. Measured: 4-9 s (a clean stop and a start of one broker)."""
    topic = topic_on(ours, "metered", {0: [1, 2, 3]})
    leader = partition(ours, topic)["leader_id"]
    before = ours.metrics()
    assert before.brokers == [1, 2, 3], before
    assert before.by_broker("kafka_active_controller") in (
        {1: 1.0, 2: 0.0, 3: 0.0},
        {1: 0.0, 2: 1.0, 3: 0.0},
        {1: 0.0, 2: 0.0, 3: 1.0},
    )

    producer = KafkaProducer(**ours.connection, acks="all")
    for _ in range(50):
        producer.send(topic, b"x" * 1000)
    producer.flush()
    producer.close()
    grew = wait_for(
        lambda: (
            ours.metrics().value("kafka_broker_bytes_in_total", broker=leader)
            - before.value("kafka_broker_bytes_in_total", broker=leader)
        ),
        timeout_s=DEADLINE_S,
        until=lambda grown: grown >= 50_000,
    )
    assert grew, f"bytes in on leader {leader} grew by {grew.last} only"
    consumer = KafkaConsumer(**ours.connection, auto_offset_reset="earliest", consumer_timeout_ms=15_000)
    consumer.assign([TopicPartition(topic, 0)])
    assert sum(1 for _, _ in zip(range(50), consumer)) == 50
    consumer.close()
    read = wait_for(
        lambda: ours.metrics().value("kafka_topic_bytes_out_total", broker=leader, topic=topic),
        timeout_s=DEADLINE_S,
        until=lambda sent: sent >= 50_000,
    )
    assert read, f"bytes out of {topic} on leader {leader}: {read.last}"
    after = ours.metrics()
    assert set(own.METRIC_NAMES) <= set(after.names()), set(own.METRIC_NAMES) - set(after.names())
    assert {s.labels["request"] for s in after.samples if s.name == "kafka_request_total_time_ms"} == {
        "Produce",
        "FetchConsumer",
        "FetchFollower",
    }
    assert after.value("kafka_topic_messages_in_total", broker=leader, topic=topic) == 50
    followers = [b for b in (1, 2, 3) if b != leader]
    for b in followers:  # replication is not a client's bytes in
        assert after.value("kafka_topic_bytes_in_total", broker=b, topic=topic) == 0
    assert (leader, "0.99") in {
        (s.broker, s.labels.get("quantile")) for s in after.samples if s.name == "kafka_request_total_time_ms"
    }

    stopped = followers[0]
    ours.stop_broker(stopped)
    try:
        seen = wait_for(
            ours.metrics, timeout_s=DEADLINE_S, until=lambda m: m.value("kafka_under_replicated_partitions") > 0
        )
        assert seen, (
            f"no under-replicated partition seen with broker {stopped} stopped: {seen.last.by_broker('kafka_under_replicated_partitions')}"
        )
        assert stopped not in seen.last.brokers
        with pytest.raises(ClusterError, match=f"Broker {stopped}'s metrics page .* did not answer"):
            ours.metrics_text(stopped)
    finally:
        ours.start_broker(stopped)
    healed = wait_for(
        ours.metrics,
        timeout_s=DEADLINE_S,
        until=lambda m: m.brokers == [1, 2, 3] and m.value("kafka_under_replicated_partitions") == 0,
    )
    assert healed, (
        f"still under-replicated after broker {stopped} came back: {healed.last.by_broker('kafka_under_replicated_partitions')}"
    )


def reassign(ours, plan: Path, *args: str) -> str:
    return kafka_cli(
        "reassign-partitions", *args, "--reassignment-json-file", str(plan), connection=ours.connection, echo=False
    )


def broker_1_configs(ours) -> str:
    """What kafka-configs.sh shows of broker 1's dynamic settings (the throttle rates among them)."""
    return kafka_cli(
        "configs",
        "--describe",
        "--entity-type",
        "brokers",
        "--entity-name",
        "1",
        connection=ours.connection,
        echo=False,
    )


@pytest.mark.cluster
def test_a_fourth_broker_takes_a_partition_moved_with_a_throttle_by_the_students_login(ours, tmp_path, capsys):
    """Broker 4 added (a broker only), a replica moved onto it with kafka-reassign-partitions as
    the student's login with a throttle, --verify until complete (it also lifts the throttle), a
    preferred leader election makes it the leader; moved off again and removed, the cluster lists
    three brokers. The login may do none of it before allow_operations(). Measured: 20-23 s."""
    plan = tmp_path / "plan.json"
    topic = topic_on(ours, "moved", {0: [1, 2, 3], 1: [2, 3, 1]})
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [4, 1, 2]}]}))
    with pytest.raises(ClusterError, match="[Aa]uthoriz"):  # a grading's login, as started
        kafka_cli(
            "leader-election",
            "--election-type",
            "preferred",
            "--all-topic-partitions",
            connection=ours.connection,
            echo=False,
        )
    ours.allow_operations()
    before = ours.admin()  # made before broker 4 exists: kafka-python fix 8 finds it when asked
    before.list_topics()

    assert ours.add_broker() == settings.ADDED_BROKER
    with ours.admin() as admin:
        assert {b["broker_id"] for b in admin.describe_cluster()["brokers"]} == {1, 2, 3, 4}
    from kafka.admin import ConfigResource, ConfigResourceType

    # broker 4's own settings, asked of it by a client that had not met it (without the fix: UnknownBrokerIdError)
    assert "broker" in before.describe_configs([ConfigResource(ConfigResourceType.BROKER, "4")])
    before.close()
    assert ours.metrics().by_broker("kafka_partitions").get(4) == 0  # it holds nothing yet
    ours.show()
    row = next(line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("4 "))
    assert row[1] == "alive" and row[5] == "-" and row[6] == "-", row  # no controller port, not in the quorum
    ours.kill_broker(4)  # the verbs that break brokers break this one too
    assert {r.id: r.state for r in ours.status()}[4] == "dead"
    ours.start_broker(4)

    out = reassign(ours, plan, "--execute", "--throttle", "1000000")
    assert "Successfully started partition reassignment" in out, out
    throttled = broker_1_configs(ours)
    assert "leader.replication.throttled.rate=1000000" in throttled, throttled
    verified = wait_for(
        lambda: reassign(ours, plan, "--verify"),
        timeout_s=DEADLINE_S,
        every_s=2,
        until=lambda text: "still in progress" not in text,
    )
    assert verified and f"Reassignment of partition {topic}-0 is completed" in verified.last, verified.last
    assert "Clearing broker-level throttles" in verified.last, verified.last
    lifted = broker_1_configs(ours)
    assert "throttled.rate" not in lifted, lifted

    kafka_cli(
        "leader-election",
        "--election-type",
        "preferred",
        "--topic",
        topic,
        "--partition",
        "0",
        connection=ours.connection,
        echo=False,
    )
    moved = partition(ours, topic)
    assert moved["replica_nodes"] == [4, 1, 2] and moved["leader_id"] == 4, moved
    described = kafka_cli("topics", "--describe", "--topic", topic, connection=ours.connection, echo=False)
    assert "Leader: 4\tReplicas: 4,1,2" in described, described

    with pytest.raises(ClusterError, match=f"still holds replicas of 1 partition \\({topic}-0\\)"):
        ours.remove_broker(4)
    with ours.admin() as admin:  # moved off again, as the student's login (the admin client's way)
        admin.alter_partition_reassignments({TopicPartition(topic, 0): [1, 2, 3]})
        back = wait_for(
            lambda: partition(ours, topic),
            timeout_s=DEADLINE_S,
            until=lambda p: p["replica_nodes"] == [1, 2, 3] and len(p["isr_nodes"]) == 3,
        )
        assert back, back.last
    ours.remove_broker(4)
    with ours.admin() as admin:
        assert {b["broker_id"] for b in admin.describe_cluster()["brokers"]} == {1, 2, 3}
    assert [r.id for r in ours.status()] == [1, 2, 3]
    assert not (ours.cluster.cfg.home / "node-4").exists()
    with pytest.raises(ClusterError, match="There is no broker 4"):
        ours.start_broker(4)


SANDBOXED = """
from cluster.own import own_cluster
from cluster.tools import kafka_cli
own = own_cluster()  # the grader's, from COURSE_OWN_CLUSTER
print("brokers", own.metrics().brokers)
print(kafka_cli("topics", "--list", connection=own.connection, echo=False))
"""


@pytest.mark.cluster
def test_the_tools_and_metrics_work_from_a_script_in_the_grading_sandbox(ours, tmp_path):
    """A student's script in the sandbox (the jars cache read-only: jgo cannot open the tools'
    bundle there, jars.locked_jars names them) runs Kafka's tools on the grading's own cluster and
    reads its metrics. Measured: 1-4 s."""
    from autograder.sandbox import Sandbox, available

    if available() is not None:
        pytest.skip(f"no sandbox here: {available()}")
    topic = topic_on(ours, "listed", {0: [1, 2, 3]})
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "PYTHONPATH": str(settings.ROOT),
        "HOME": str(work),
        "TMPDIR": str(work),
        "COURSE_JARS_CACHE": str(settings.jars_cache()),
        "LAB_NAMESPACE": ours.account.username,
        own.ENV: json.dumps(
            {
                "bootstrap_servers": ours.bootstrap_servers,
                "username": ours.account.username,
                "password": ours.account.password,
                "metrics": ours.metrics_urls,
            }
        ),
    }
    run = Sandbox(work).popen(
        [sys.executable, "-c", SANDBOXED], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out = run.communicate(timeout=120)[0].decode()
    assert run.returncode == 0, out
    assert "brokers [1, 2, 3]" in out and topic in out.split(), out
