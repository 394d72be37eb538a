"""The brokers bound the settings of a namespace's topics (cluster/policy/TopicLimits.java,
cluster/settings.py TOPIC_LIMITS): every setting that costs the brokers resources, out of its
range, is refused with its name, at creation and on a change, with kafka-python and with
librdkafka (confluent-kafka); the course's own topics are not limited."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from cluster import connection, namespace, settings


# A value just outside each bound of TOPIC_LIMITS, on a side Kafka's own validation accepts (so
# that the refusal is the course's policy, not Kafka's: segment.bytes below 1 MiB, say, Kafka
# refuses by itself).
OUT_OF_RANGE = {
    "segment.ms": str(settings.HOUR_MS - 1),
    "segment.jitter.ms": str(settings.HOUR_MS // 2 + 1),
    "segment.bytes": str(2**30 + 1),
    "segment.index.bytes": str(2**20 - 1),
    "index.interval.bytes": "1",
    "max.message.bytes": str(8 * 2**20 + 1),
    "flush.messages": "1",
    "flush.ms": "1",
    "preallocate": "true",
    "file.delete.delay.ms": str(60_000 + 1),
    "min.cleanable.dirty.ratio": "0.001",
    "max.compaction.lag.ms": "60000",
    "compression.zstd.level": "22",
    "compression.lz4.level": "17",
    "message.timestamp.after.max.ms": str(settings.HOUR_MS + 1),
    "internal.segment.bytes": "1",  # not in the table: every internal.* setting is refused
}


def in_range(rule: tuple) -> str:
    if isinstance(rule[0], str):
        return rule[0]
    low, high = rule
    return str(low if low is not None else high)


def test_every_bound_is_tried():
    assert set(settings.TOPIC_LIMITS) <= set(OUT_OF_RANGE)


CASES = sorted(OUT_OF_RANGE.items())


@pytest.fixture(scope="module")
def mine(cluster):
    a = KafkaAdminClient(**connection(), client_id="student-admin")
    yield a
    a.close()


def refusal(call) -> str:
    try:
        result = call()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    errors = [str(r) for r in getattr(result, "topic_errors", []) if r[1] != 0]
    return " ".join(errors) or f"not refused: {result!r}"


@pytest.mark.parametrize("name,bad", CASES, ids=[n for n, _ in CASES])
def test_a_costly_setting_out_of_range_is_refused_with_its_name(mine, name, bad):
    topic = f"{namespace()}.limits-{uuid.uuid4().hex[:6]}"
    text = refusal(lambda: mine.create_topics([NewTopic(topic, 1, 3, topic_configs={name: bad})]))
    assert "Polic" in text and name in text, text
    assert topic not in mine.list_topics()


@pytest.fixture(scope="module")
def librdkafka(cluster):
    """A second client, without kafka-python's client-side checks of setting names."""
    from confluent_kafka.admin import AdminClient

    from cluster.clients import librdkafka_connection

    return AdminClient(librdkafka_connection())


@pytest.mark.parametrize("name,bad", CASES, ids=[n for n, _ in CASES])
def test_changing_a_topic_out_of_range_is_refused(mine, librdkafka, name, bad):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource as CResource

    topic = f"{namespace()}.limits-{uuid.uuid4().hex[:6]}"
    rule = settings.TOPIC_LIMITS.get(name)
    within = {name: in_range(rule)} if rule else {}
    mine.create_topics([NewTopic(topic, 1, 3, topic_configs=within)])  # within the bounds: allowed
    try:
        change = CResource(
            "TOPIC", topic, incremental_configs=[ConfigEntry(name, bad, incremental_operation=AlterConfigOpType.SET)]
        )
        for future in librdkafka.incremental_alter_configs([change]).values():
            with pytest.raises(KafkaException, match="POLICY_VIOLATION|[Pp]olicy") as refused:
                future.result(30)
            assert name in str(refused.value), refused.value
    finally:
        mine.delete_topics([topic])


def test_the_message_says_what_is_allowed(mine):
    topic = f"{namespace()}.limits-{uuid.uuid4().hex[:6]}"
    text = refusal(lambda: mine.create_topics([NewTopic(topic, 1, 3, topic_configs={"segment.ms": "1"})]))
    assert "segment.ms=1 is not allowed" in text and f"at least {settings.HOUR_MS}" in text, text


def test_the_courses_own_topics_are_not_limited(cluster):
    admin = cluster.admin()
    topic = f"course-limits-{uuid.uuid4().hex[:6]}"  # no namespace: the course's own
    try:
        admin.create_topics([NewTopic(topic, 1, 3, topic_configs={"segment.ms": "1000"})])
        admin.wait_for_topics([topic])
    finally:
        admin.delete_topics([topic])
        admin.close()


def test_librdkafka_meets_the_same_bounds(librdkafka):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource as CResource
    from confluent_kafka.admin import NewTopic as CNewTopic

    admin = librdkafka
    topic = f"{namespace()}.limits-{uuid.uuid4().hex[:6]}"
    for future in admin.create_topics([CNewTopic(topic, 1, 3, config={"segment.ms": "1"})]).values():
        with pytest.raises(KafkaException, match="segment.ms"):
            future.result(30)
    for future in admin.create_topics([CNewTopic(topic, 1, 3)]).values():
        future.result(30)
    try:
        change = CResource(
            "TOPIC",
            topic,
            incremental_configs=[ConfigEntry("segment.ms", "1", incremental_operation=AlterConfigOpType.SET)],
        )
        for future in admin.incremental_alter_configs([change]).values():
            with pytest.raises(KafkaException, match="segment.ms"):
                future.result(30)
    finally:
        for future in admin.delete_topics([topic], operation_timeout=10).values():
            future.result(30)


def test_brokers_refuse_to_start_with_too_few_open_files(tmp_path):
    """Where the system's hard limit is below what a broker needs, the start stops with what to
    do, before any JVM runs; where it allows more, the limit is raised."""
    import subprocess
    import sys

    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[1])))\n"
        "from cluster.errors import ClusterError\n"
        "from cluster.process import raise_open_files\n"
        "try:\n    print('limit', raise_open_files(least=2000, wanted=4000))\n"
        "except ClusterError as e:\n    print('refused', e, e.hint)\n"
    )
    low = subprocess.run([sys.executable, "-c", script, "1000"], capture_output=True, text=True, cwd=settings.ROOT)
    assert "refused" in low.stdout and "1,000 files" in low.stdout and "ulimit -n" in low.stdout, low
    high = subprocess.run([sys.executable, "-c", script, "3000"], capture_output=True, text=True, cwd=settings.ROOT)
    assert "limit 3000" in high.stdout, high  # hard 3000 < wanted: raised to the hard limit
