"""Lab 6, retention and compaction: what a slow group missed, a prediction of time retention,
a prediction of compaction checked on a real cleaned log, and a table rebuilt from a compacted
topic. Three of the four run the student's functions on topics the grader filled with seeded
data, so answers worked out from the lab's own topics or the public dataset do not carry over."""

from __future__ import annotations

import time

from cluster.waiting import wait_for

from . import CheckFailed, Context, check, expect, expect_equal, partitions_wrong, prediction, prediction_feedback
from .kafka_state import end_offsets, graders_topic, log_start_offsets, read_all, short_name

FLIGHTS_OF_THE_DAY = 842  # flights of 1 January 2013 in the dataset
RETENTION_LESSON = {"week": 0, "append-time": FLIGHTS_OF_THE_DAY, "forever": FLIGHTS_OF_THE_DAY, "week-plus-now": 1}
RETENTION_WAIT_S = 30  # the brokers check retention every 2 s (cluster/settings.py)
CLEANER_WAIT_S = 45  # the cleaner looks for work every second; a loaded machine is slower
SEGMENT_MS = 3600 * 1000  # the least the cluster allows a namespace's topic (TOPIC_LIMITS)
KEYS = "ABCDEFG"


@check("lab6-q1")
def missed_by_a_slow_group(ctx: Context) -> None:
    """missed(topic, group) counts, per partition, the records deleted before the group read them"""
    from kafka import KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    topic = graders_topic(ctx, "missed-check", 3)
    name = short_name(topic)
    group = ctx.group(name)
    ctx.protect(groups=[group])
    producer = KafkaProducer(**ctx.kafka)
    for p in range(3):
        for i in range(ctx.rng.randrange(40, 80)):
            producer.send(topic, value=b"%d" % i, partition=p)
    producer.flush()
    producer.close()
    ends = end_offsets(ctx, name)
    # Partition 0: the group is behind the deletion; 1: ahead of it; 2: never committed.
    committed = {0: ctx.rng.randrange(1, 15), 1: ctx.rng.randrange(25, ends[1])}
    deleted_to = {0: ctx.rng.randrange(20, 35), 1: ctx.rng.randrange(5, 20), 2: ctx.rng.randrange(5, 35)}
    ctx.admin.alter_group_offsets(
        group, {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in committed.items()}
    )
    ctx.admin.delete_records({TopicPartition(topic, p): o for p, o in deleted_to.items()})
    starts = log_start_offsets(ctx, name)
    expect(
        starts == deleted_to,
        "the grader's deletion of records did not move the log start offsets of partitions "
        f"{sorted(p for p in deleted_to if starts.get(p) != deleted_to[p])} where it asked",
        hint="This is a problem with the grader's cluster, not your code.",
    )
    truth = {p: max(0, starts[p] - committed.get(p, 0)) for p in starts}
    got = ctx.sub.value(f"missed({topic!r}, {group!r})")
    # The group's offsets and the log start offsets are the grader's, what missed() must find out:
    # the message names the partitions that are wrong, with the notebook's values, not theirs.
    expect(
        got == truth,
        f"missed({topic!r}, {group!r}) per partition" + partitions_wrong(truth, got),
        expected="{partition: how many records were deleted before the group read them} for every partition: "
        "one behind the deletion, one ahead of it, one never committed",
        found=got,
        hint="Compare the group's committed offset with each partition's log start offset "
        "(beginning_offsets), not with 0: deleted records keep their offsets. A partition the group "
        "never committed counts from 0, and a group ahead of the deletion missed nothing.",
    )


def wait_for_retention(ctx: Context) -> dict[str, int]:
    """Records left in each of the demo's topics, once the week topics have been checked (bounded)."""
    return wait_for(
        lambda: {name: len(read_all(ctx, name, limit=10 * FLIGHTS_OF_THE_DAY)) for name in RETENTION_LESSON},
        timeout_s=RETENTION_WAIT_S,
        until=lambda kept: kept == RETENTION_LESSON,
        every_s=1,
    ).last


@check("lab6-q2")
def predicted_time_retention(ctx: Context) -> str:
    """a prediction of what time retention keeps was made, and the demo's four topics show it"""
    from .kafka_state import describe_topic

    for name in RETENTION_LESSON:
        describe_topic(ctx, name, hint="Run the cell after your prediction: it makes the four topics.")
    kept = wait_for_retention(ctx)
    expect_equal(
        kept,
        RETENTION_LESSON,
        "records kept in the demo's topics after the brokers checked retention",
        hint="The demo did not show what it should: run its cell again as given (it makes its topics anew).",
    )
    predicted = prediction(
        ctx,
        "predicted_kept",
        lambda v: (
            isinstance(v, dict)
            and all(isinstance(v.get(n), int) and not isinstance(v.get(n), bool) for n in RETENTION_LESSON)
        ),
        {n: "a number" for n in RETENTION_LESSON},
        "a whole number of records for each topic",
    )
    return prediction_feedback(
        "predicted_kept",
        {n: predicted[n] for n in RETENTION_LESSON},
        kept,
        "Retention compares each closed segment's newest timestamp with retention.ms, and "
        "the timestamps are the producer's unless the topic says LogAppendTime. Think also "
        "about which segment a record sent now lands in.",
    )


def compaction_case(ctx: Context) -> tuple[list, list]:
    """A seeded sequence of writes: closed ones (some tombstones, keys written again) and a few
    active ones, one of which repeats a closed key."""
    closed = []
    for i in range(ctx.rng.randrange(12, 20)):
        key = ctx.rng.choice(KEYS)
        closed.append((key, None if i and ctx.rng.random() < 0.2 else f"v{i}"))
    # Every case tests each rule, whatever the seed: a key whose newest write is a tombstone (so
    # leaving tombstones out shows) and a key written more than once (so keeping the first shows).
    keys = sorted({k for k, _ in closed})
    if None not in dict(closed).values():
        closed.append((ctx.rng.choice(keys), None))
    if len(keys) == len(closed):
        closed.append((closed[0][0], f"v{len(closed)}"))
    active = [(ctx.rng.choice(keys), f"a{i}") for i in range(ctx.rng.randrange(2, 5))]
    return closed, active


def write_and_clean(ctx: Context, closed: list, active: list) -> list[int]:
    """Write the case to a compacted topic, roll it between closed and active, and wait until
    the cleaner has cleaned the closed part. The offsets the topic then holds."""
    from kafka import KafkaProducer

    topic = graders_topic(
        ctx,
        "compaction-check",
        1,
        cleanup_policy="compact",
        segment_ms=str(SEGMENT_MS),
        min_cleanable_dirty_ratio="0.01",
    )
    with KafkaProducer(**ctx.kafka) as producer:
        # A segment rolls at an append whose timestamp is more than segment.ms after the segment's
        # first record's: the closed writes are stamped two segment.ms back, the active ones now,
        # so the first active write rolls the segment, and nothing else does.
        back = int(time.time() * 1000) - 2 * SEGMENT_MS
        for key, value in closed:
            producer.send(topic, key=key.encode(), value=value and value.encode(), timestamp_ms=back).get(timeout=10)
        for key, value in active:  # the first of these rolls the segment
            producer.send(topic, key=key.encode(), value=value.encode()).get(timeout=10)
    name = short_name(topic)

    def cleaned(records: list) -> bool:  # no key twice among the closed segment's records
        closed_keys = [r.key for r in records if r.offset < len(closed)]
        return len(closed_keys) == len(set(closed_keys))

    waited = wait_for(lambda: read_all(ctx, name), timeout_s=CLEANER_WAIT_S, until=cleaned, every_s=0.5)
    if not waited:
        raise CheckFailed(
            f"the log cleaner did not clean {topic} within {CLEANER_WAIT_S} s",
            hint="This is a problem with the grader's cluster, not your code: ask for a regrade.",
        )
    offsets = sorted(r.offset for r in waited.last)
    expect(
        offsets[-len(active) :] == list(range(len(closed), len(closed) + len(active))),
        f"{topic} should have kept all {len(active)} writes of its active segment",
        found=offsets,
        hint="This is a problem with the grader's cluster, not your code: ask for a regrade.",
    )
    return offsets


@check("lab6-q3")
def predicted_compaction(ctx: Context) -> None:
    """survivors(closed, active) names the offsets a real compacted topic keeps"""
    closed, active = compaction_case(ctx)
    # The answer before the truth exists: once the grader's topic is cleaned, the student's login
    # could read what it kept (survivors would then need no rule of compaction).
    got = ctx.sub.value(f"survivors({closed!r}, {active!r})")
    found = write_and_clean(ctx, closed, active)
    if isinstance(got, (list, tuple, set, frozenset)) and all(isinstance(o, int) for o in got):
        got = sorted(got)
    expect_equal(
        got,
        found,
        f"survivors(closed, active) for closed={closed}, active={active}",
        hint="Compaction keeps the newest record of each key in the closed segments, and a tombstone is "
        "such a record (it stays for delete.retention.ms). The active segment is not cleaned at all, "
        "and no record changes its offset.",
    )


def table_case(ctx: Context) -> tuple[list[tuple[str, dict | None]], dict]:
    """Seeded plane statuses with updates and tombstones, and the table they leave."""
    planes = sorted({f"N{ctx.rng.randrange(100, 999)}{ctx.rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ')}" for _ in range(60)})
    airports = ["EWR", "JFK", "LGA", "ORD", "ATL", "LAX", "SFO", "BOS", "MIA", "DEN"]
    writes: list[tuple[str, dict | None]] = []
    table: dict[str, dict] = {}
    for i in range(ctx.rng.randrange(250, 350)):
        plane = ctx.rng.choice(planes)
        if plane in table and ctx.rng.random() < 0.12:
            writes.append((plane, None))
            del table[plane]
        else:
            status = {
                "tailnum": plane,
                "last_origin": ctx.rng.choice(airports[:3]),
                "last_dest": ctx.rng.choice(airports[3:]),
                "departed": ctx.rng.randrange(500, 2359),
                "seq": i,
            }
            writes.append((plane, status))
            table[plane] = status
    if not any(status is None and plane not in table for plane, status in writes):
        # a 12 % draw leaves no key deleted about once in 650 seeds: then a rebuild that keeps
        # tombstones as None passes blind, so one key always ends deleted
        plane = ctx.rng.choice(sorted(table))
        writes.append((plane, None))
        del table[plane]
    return writes, table


@check("lab6-q4")
def rebuilds_the_table(ctx: Context) -> None:
    """rebuild(topic) returns the table a compacted topic holds: newest value per key, tombstones applied"""
    import json

    from kafka import KafkaProducer

    writes, table = table_case(ctx)
    topic = graders_topic(ctx, "table-check", 3, cleanup_policy="compact")
    with KafkaProducer(**ctx.kafka) as producer:
        for key, value in writes:
            producer.send(topic, key=key.encode(), value=None if value is None else json.dumps(value).encode())
        producer.flush()
    got = ctx.sub.value(f"rebuild({topic!r})")
    expect(
        isinstance(got, dict),
        f"rebuild({topic!r}) should return a dict",
        expected="{key: value}",
        found=type(got).__name__,
    )
    missing = sorted(set(table) - set(got))
    extra = sorted(set(got) - set(table))
    stale = sorted(k for k in set(table) & set(got) if got[k] != table[k])
    tombstoned = sorted(k for k, v in writes if v is None and k not in table)
    expect(
        not (missing or extra or stale),
        f"rebuild({topic!r}): {len(got)} keys, {len(missing)} missing, {len(extra)} that should not be there, "
        f"{len(stale)} with an old or wrong value",
        expected="every key the topic still holds, with its newest value",
        found={"missing": missing[:3], "extra": extra[:3], "stale": {k: got[k] for k in stale[:2]}},
        hint=("A tombstone (value None) removes its key from the table. " if set(extra) & set(tombstoned) else "")
        + "Read every partition from its log start offset to its end offset (not until one empty poll), "
        "apply each partition's records in offset order, keys as str and values parsed from JSON.",
    )
