"""Kafka's own producer perf test (cluster/perf.py), from the pinned kafka-tools jars, against
the live cluster with a student's login: lab 8's reference client."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, TopicPartition

from cluster.clients import connection
from cluster.errors import ClusterError
from cluster.lab import start_lab
from cluster.perf import java_producer_perf

pytestmark = pytest.mark.cluster


def test_the_java_perf_test_writes_what_it_reports(cluster):
    lab = start_lab("perf-test")
    topic = lab.fresh_topic("java-perf", 3)
    run = java_producer_perf(topic, records=5_000, record_size=100, acks="all", linger_ms="5")
    assert run["records"] == 5_000 and run["records_per_s"] > 0 and run["p50_ms"] <= run["p99_ms"]
    with KafkaConsumer(**connection()) as consumer:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(3)])
    assert sum(ends.values()) == 5_000


def test_a_topic_outside_the_namespace_is_a_clear_error(cluster):
    with pytest.raises(ClusterError, match="perf test failed"):
        java_producer_perf("someone-else.topic", records=10, timeout_s=60, max_block_ms="5000")
