"""Kafka's own command-line tools run from the kit's jars as the student (cluster.tools.kafka_cli,
which labs 2, 4 and 6 show beside the admin client): they see and change what the student's
login may, say what they did, and a refusal or a mistake is a clear error."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from cluster import connection, group_name, topic_name
from cluster.errors import ClusterError
from cluster.tools import kafka_cli


@pytest.fixture(scope="module")
def topic(cluster):
    from kafka import KafkaAdminClient

    name = topic_name(f"cli-{uuid.uuid4().hex[:6]}")
    admin = KafkaAdminClient(**connection())
    admin.create_topics([NewTopic(name, 3, 3, topic_configs={"retention.ms": "604800000"})])
    admin.wait_for_topics([name])
    producer = KafkaProducer(**connection(), acks="all")
    for i in range(30):
        producer.send(name, value=b"x", partition=i % 3)
    producer.flush()
    producer.close()
    yield name
    admin.delete_topics([name])
    admin.close()


def test_topics_describe_shows_what_the_admin_client_sees(topic, capsys):
    out = kafka_cli("topics", "--describe", "--topic", topic)
    assert f"$ kafka-topics.sh --describe --topic {topic}" in capsys.readouterr().out
    assert "PartitionCount: 3" in out and "ReplicationFactor: 3" in out and "retention.ms=604800000" in out
    assert sum(f"Partition: {p}\t" in out for p in range(3)) == 3, out
    listed = kafka_cli("topics", "--list", echo=False).split()
    assert topic in listed and not [t for t in listed if not t.startswith(topic.split(".")[0] + ".")], (
        "the student's login lists its own namespace's topics only"
    )


def test_configs_alter_then_describe(topic):
    kafka_cli(
        "configs",
        "--alter",
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--add-config",
        "retention.ms=86400000",
        echo=False,
    )
    out = kafka_cli("configs", "--describe", "--entity-type", "topics", "--entity-name", topic, echo=False)
    assert "retention.ms=86400000" in out, out


def test_consumer_groups_describe_gives_the_lag(topic):
    group = group_name(f"cli-{uuid.uuid4().hex[:6]}")
    consumer = KafkaConsumer(**connection(), group_id=group, enable_auto_commit=False)
    consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(4, "", -1) for p in range(3)})
    consumer.close()
    out = kafka_cli("consumer-groups", "--describe", "--group", group, echo=False)
    rows = [line.split() for line in out.splitlines() if line.startswith(group)]
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    assert sorted((int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows) == [(p, 4, 10, 6) for p in range(3)], out


def test_another_namespaces_topic_is_refused_and_a_mistake_says_what_to_try(cluster):
    with pytest.raises(ClusterError) as refused:
        kafka_cli(
            "configs",
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            "someone-else.flights",
            "--add-config",
            "retention.ms=1000",
            echo=False,
        )
    assert "failed (exit code" in str(refused.value) and "Authorization" in str(refused.value), str(refused.value)
    with pytest.raises(ValueError, match="no tool 'producer-perf'"):
        kafka_cli("producer-perf")
