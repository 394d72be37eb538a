"""Read the cluster's state from outside the student's kernel: topics, records, offsets."""

from __future__ import annotations

import time

from kafka import KafkaConsumer, TopicPartition

from cluster.clients import in_namespace
from cluster.waiting import wait_for

from . import CheckFailed, Context, expect
from .bounded_reads import bounded_poll, decompression_bound

READ_DEADLINE_S = 30
DESCRIBE_WAIT_S = 10  # for a listed topic's metadata to reach the broker that answers
LIST_ASKS = 5  # answers that must all leave a topic out before it is called missing
MAX_READ_BYTES = 128 * 2**20  # of keys, values and headers read from one topic (a lab's hold a few MB)


def describe_topic(ctx: Context, name: str, hint: str = "") -> dict:
    """The topic's metadata; a CheckFailed naming the topic if it does not exist."""
    topic = ctx.topic(name)

    def described() -> list:
        return [t for t in ctx.admin.describe_topics([topic]) if t.get("error_code", 0) == 0 and t["partitions"]]

    # Each metadata request goes to one broker, and a broker may not have the controller's latest
    # metadata yet (seen in CI under load: one broker described a topic as unknown, and listed it
    # neither, while another listed it). So a topic any answer lists gets a few seconds to appear
    # everywhere, and a missing one is asked about a few times, likely of other brokers, first.
    found, listed, asked = described(), False, 0
    deadline = time.monotonic() + DESCRIBE_WAIT_S
    while not found and time.monotonic() < deadline and (listed or asked < LIST_ASKS):
        listed = listed or topic in ctx.admin.list_topics()
        asked += 1
        time.sleep(0.2)
        found = described()
    expect(
        bool(found),
        f"topic {topic!r} does not exist",
        expected=topic,
        found=sorted(t for t in ctx.admin.list_topics() if in_namespace(ctx.namespace, t)),
        hint=hint or f"Create it with lab.topic({name!r}) as its name.",
    )
    return found[0]


def graders_topic(ctx: Context, name: str, partitions: int, protect: bool = True, **configs: str) -> str:
    """A new topic of the grader's own in the grading's namespace, "<name>-<seeded number>", three
    replicas, topic settings given with _ for . (cleanup_policy="compact"); its full name once it
    exists. protect: the student's code may only read it (ctx.protect), so it cannot change the
    check's truth; False for a topic the student's code is to write to."""
    from kafka.errors import TopicAlreadyExistsError

    spec = {
        "num_partitions": partitions,
        "replication_factor": 3,
        "configs": {k.replace("_", "."): v for k, v in configs.items()},
    }
    for _ in range(3):
        topic = ctx.topic(f"{name}-{ctx.rng.randrange(10**6)}")
        try:
            ctx.admin.create_topics({topic: spec})
            break
        except TopicAlreadyExistsError:
            # The name is taken, maybe by this very request: a connection that broke after the
            # broker made the topic, and the client asked again (seen once in CI). Another number,
            # so that the grader never takes for its own a topic that someone else could have made.
            continue
    else:
        raise RuntimeError(f"three new names for the grader's topic {name!r} all exist in {ctx.namespace}")
    ctx.admin.wait_for_topics([topic])
    if protect:
        ctx.protect(topics=[topic])
    return topic


def fill(ctx: Context, topic: str, counts: dict[int, int], key: bytes | None = None, value: bytes = b"x") -> None:
    """counts[p] records of the grader's in each partition p of the topic (a full name), all sent."""
    from kafka import KafkaProducer

    with KafkaProducer(**ctx.kafka) as producer:
        for p, n in counts.items():
            for _ in range(n):
                producer.send(topic, key=key, value=value, partition=p)
        producer.flush()


def short_name(topic: str) -> str:
    """A full topic name without its namespace: what ctx.topic() and this module's readers take."""
    return topic.split(".", 1)[1]


def topic_configs(ctx: Context, name: str) -> dict[str, str]:
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = ctx.topic(name)
    res = ctx.admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    return {k: v["value"] for k, v in res["topic"][topic].items()}


def record_bytes(record) -> int:
    """What a record holds: its key, its value and its headers (a header can carry megabytes)."""
    return (
        len(record.key or b"")
        + len(record.value or b"")
        + sum(len(k or "") + len(v or b"") for k, v in record.headers or ())
    )


def read_all(ctx: Context, name: str, limit: int = 300_000, isolation_level: str = "read_uncommitted"):
    """Every record of the topic, partition by partition, from the first offset to the end
    offset as it is now (with read_committed: the records of committed transactions, up to the
    last stable offset). Reads with no consumer group, so it changes nothing."""
    meta = describe_topic(ctx, name)
    topic = ctx.topic(name)
    # Small fetches, and bounded_poll stops any batch that decompresses past its bound (a
    # compression bomb), before the size check below could.
    with KafkaConsumer(
        **ctx.kafka,
        enable_auto_commit=False,
        client_id=f"grader-{ctx.namespace}",
        max_partition_fetch_bytes=2**20,
        fetch_max_bytes=4 * 2**20,
        isolation_level=isolation_level,
    ) as consumer:
        tps = [TopicPartition(topic, p["partition_index"]) for p in meta["partitions"]]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        records: list = []
        size = 0
        deadline = time.monotonic() + READ_DEADLINE_S
        # The whole read's bound on what its batches decompress to, besides each poll's: a poll
        # holds at most a few hundred records, and polls add up.
        with decompression_bound(MAX_READ_BYTES):
            while any(consumer.position(tp) < end[tp] for tp in tps):
                if time.monotonic() > deadline:
                    raise CheckFailed(
                        f"could not read {topic} within {READ_DEADLINE_S} s",
                        hint="This is a problem with the grader's cluster, not your code.",
                    )
                for batch in bounded_poll(consumer, topic, timeout_ms=500).values():
                    records.extend(r for r in batch if r.offset < end[TopicPartition(r.topic, r.partition)])
                    size += sum(record_bytes(r) for r in batch)
                expect(
                    size <= MAX_READ_BYTES,
                    f"{topic} holds more than {MAX_READ_BYTES / 2**20:g} MiB",
                    hint="A lab's topics hold a few megabytes; send only what the question asks for.",
                )
                if len(records) > limit:
                    break
        return records


def end_offsets(ctx: Context, name: str) -> dict[int, int]:
    """partition -> the offset the next record will get."""
    return _offsets(ctx, name, "end_offsets")


def log_start_offsets(ctx: Context, name: str) -> dict[int, int]:
    """partition -> the oldest offset still kept (retention and delete_records move it up)."""
    return _offsets(ctx, name, "beginning_offsets")


def _offsets(ctx: Context, name: str, which: str) -> dict[int, int]:
    meta = describe_topic(ctx, name)
    with KafkaConsumer(**ctx.kafka) as consumer:
        tps = [TopicPartition(ctx.topic(name), p["partition_index"]) for p in meta["partitions"]]
        return {tp.partition: off for tp, off in getattr(consumer, which)(tps).items()}


def committed_offsets(ctx: Context, group: str, name: str) -> dict[int, int]:
    """partition -> committed offset of the group on the topic (only partitions it committed)."""
    from kafka.errors import CoordinatorLoadInProgressError, CoordinatorNotAvailableError, NotCoordinatorError

    # The group's coordinator can move between the lookup and the fetch (a broker restarted, its
    # leaders handed back): the Java client asks again, kafka-python raises (CI: NotCoordinatorError).
    moved = (NotCoordinatorError, CoordinatorLoadInProgressError, CoordinatorNotAvailableError)
    fetched = wait_for(
        lambda: ctx.admin.list_group_offsets(ctx.group(group)),
        timeout_s=30,
        until=lambda _: True,
        every_s=0.5,
        retry_on=moved,
    )
    if not fetched:
        raise fetched.last
    offsets = fetched.last.get(ctx.group(group), {})
    return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == ctx.topic(name)}
