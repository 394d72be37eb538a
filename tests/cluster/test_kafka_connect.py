"""Kafka Connect in standalone mode, from the pinned jars, as a namespace's own user: the
FileStream source puts every line of a file on a topic and, restarted after more lines were
appended, goes on from its stored offset (no line twice); the FileStream sink writes a topic to a
file, in a consumer group of the namespace; a sink in a group outside the namespace is refused
by the brokers and the worker says so."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaProducer
from kafka.admin import NewTopic

from cluster import connection, group_name, topic_name
from cluster.errors import ClusterError
from cluster.kafka_connect import ConnectWorker

pytestmark = pytest.mark.heavy  # Connect workers: the `heavy` layer (make test-heavy)

SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"


def values(topic: str) -> list[str]:
    """Every value on the topic, in offset order (one partition)."""
    from cluster import bootstrap_servers, namespace
    from cluster.lab import Lab

    return [r.value.decode() for r in Lab("test", bootstrap_servers(), namespace(), connection()).read(topic)]


def wait_for(what, check, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.5)


@pytest.fixture
def topic(cluster):
    from kafka import KafkaAdminClient

    name = topic_name(f"connect-{uuid.uuid4().hex[:6]}")
    admin = KafkaAdminClient(**connection())
    admin.create_topics([NewTopic(name, 1, 3)])
    admin.wait_for_topics([name])
    admin.close()
    return name


def test_a_file_source_resumes_from_its_offsets_after_a_restart(topic, tmp_path):
    lines = [f"2013-01-01,UA,{1000 + i},EWR" for i in range(40)]
    (tmp_path / "flights.csv").write_text("\n".join(lines) + "\n")
    source = {
        "name": "csv-in",
        "connector.class": SOURCE,
        "tasks.max": "1",
        "file": str(tmp_path / "flights.csv"),
        "topic": topic,
    }
    with ConnectWorker(tmp_path / "worker", [source]) as worker:
        assert worker.status()["csv-in"]["tasks"] == ["RUNNING"]
        wait_for("40 lines on the topic", lambda: len(values(topic)) >= 40)
    more = [f"2013-01-02,B6,{2000 + i},JFK" for i in range(10)]
    with open(tmp_path / "flights.csv", "a") as f:
        f.write("\n".join(more) + "\n")
    with ConnectWorker(tmp_path / "worker", [source]):
        wait_for("50 lines on the topic", lambda: len(values(topic)) >= 50)
        time.sleep(2)  # a source that re-read the file would add lines now
    assert values(topic) == lines + more


def test_a_file_sink_writes_a_topic_in_a_group_of_the_namespace(topic, tmp_path):
    producer = KafkaProducer(**connection())
    sent = [f"record {i}" for i in range(25)]
    for v in sent:
        producer.send(topic, v.encode())
    producer.flush()
    producer.close()
    out = tmp_path / "out.txt"
    sink = {
        "name": "file-out",
        "connector.class": SINK,
        "tasks.max": "1",
        "topics": topic,
        "file": str(out),
        "consumer.override.group.id": group_name("file-out"),
        "consumer.override.auto.offset.reset": "earliest",
    }
    with ConnectWorker(tmp_path / "worker", [sink]):
        wait_for("25 lines in the file", lambda: out.exists() and len(out.read_text().splitlines()) >= 25)
    assert out.read_text().splitlines() == sent


def test_a_sink_in_a_group_outside_the_namespace_is_refused(topic, tmp_path):
    sink = {
        "name": "file-out",
        "connector.class": SINK,
        "tasks.max": "1",
        "topics": topic,
        "file": str(tmp_path / "out.txt"),
    }  # the default group, connect-file-out, is nobody's
    worker = ConnectWorker(tmp_path / "worker", [sink])
    try:
        worker.start(timeout_s=60)
    except ClusterError as e:  # the task failed before the worker reported it running
        assert "authoriz" in str(e).lower(), e
        return
    # A sink's task is RUNNING before its consumer first asks to join the group: the refusal
    # comes a moment later.
    try:
        wait_for("the sink's task to fail", lambda: "FAILED" in worker.status()["file-out"]["tasks"])
        assert "authoriz" in worker.status()["file-out"].get("trace", "").lower(), worker.status()
    finally:
        worker.stop()
