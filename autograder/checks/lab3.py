"""Lab 3, partitions and ordering: the checks of its four graded parts."""

from __future__ import annotations

import json
from collections import defaultdict

from kafka.partitioner.default import murmur2

from . import CheckFailed, Context, check, expect, expect_equal
from .kafka_state import describe_topic, end_offsets, read_all

CARRIER_TOPIC, CARRIER_PARTITIONS = "by-carrier", 6
ROUTED_TOPIC, ROUTED_PARTITIONS, HUB_KEY = "routed", 4, b"UA"
PLANE_TOPIC = "plane-events"


def java_partition(key: bytes, n: int) -> int:
    """The Java client's (and kafka-python's) default: murmur2, made positive, modulo n."""
    return (murmur2(key) & 0x7FFFFFFF) % n


def routed_partition(key: bytes, n: int) -> int:
    return 0 if key == HUB_KEY else 1 + java_partition(key, n - 1)


def carriers() -> list[str]:
    from cluster.lab import load_flights

    return sorted({f["carrier"] for f in load_flights()})


@check("lab3-q1")
def predicted_partitions(ctx: Context) -> None:
    """predict_partition(key, n) gives the partition the producer really picks"""
    for _ in range(5):
        key = bytes(ctx.rng.randrange(256) for _ in range(ctx.rng.randrange(1, 12)))
        n = ctx.rng.randrange(2, 13)
        expect_equal(ctx.sub.value(f"predict_partition({key!r}, {n})"), java_partition(key, n),
                     f"predict_partition({key!r}, {n})",
                     hint="Use murmur2 (the Java client's hash), keep it positive with & 0x7fffffff, then % n. "
                          "Python's hash() is different, and random for bytes in every new process.")
    records = read_all(ctx, CARRIER_TOPIC)
    expect(len(records) > 0, f"{ctx.topic(CARRIER_TOPIC)} is empty", hint="Run the cell that produces the flights.")
    for r in records:
        expect(r.key is not None, "a message on by-carrier has no key", hint="Send with key=carrier.encode().")
        expect_equal(r.partition, java_partition(r.key, CARRIER_PARTITIONS),
                     f"the partition of the message with key {r.key!r} (offset {r.offset})")


@check("lab3-q2")
def custom_partitioner(ctx: Context) -> None:
    """the routed topic has UA alone in partition 0 and every other carrier hashed over 1..3"""
    meta = describe_topic(ctx, ROUTED_TOPIC)
    expect_equal(len(meta["partitions"]), ROUTED_PARTITIONS, f"partitions of {ctx.topic(ROUTED_TOPIC)}")
    records = read_all(ctx, ROUTED_TOPIC)
    expect(len(records) > 0, f"{ctx.topic(ROUTED_TOPIC)} is empty", hint="Produce the flights with your partitioner.")
    expect(any(r.key == HUB_KEY for r in records), "no UA flight on the routed topic", found="none")
    for r in records:
        expect_equal(r.partition, routed_partition(r.key, ROUTED_PARTITIONS),
                     f"the partition of the message with key {r.key!r} (offset {r.offset})",
                     hint="UA goes to partition 0; any other key to 1 + (murmur2(key) & 0x7fffffff) % 3, "
                          "so that no other carrier shares UA's partition.")


@check("lab3-q3")
def per_key_order(ctx: Context) -> None:
    """each plane's events sit in one partition, in the order the plane flew them"""
    from cluster.lab import load_flights

    flights = load_flights(day=1)
    want = defaultdict(list)
    for f in sorted((f for f in flights if f["tailnum"]), key=lambda f: (f["sched_dep_time"], f["flight"])):
        want[f["tailnum"]].append(f["flight"])
    records = read_all(ctx, PLANE_TOPIC)
    expect_equal(len(records), sum(map(len, want.values())), f"number of events on {ctx.topic(PLANE_TOPIC)}",
                 hint="One event per flight that has a tailnum.")
    got, where = defaultdict(list), defaultdict(set)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        try:
            event = json.loads(r.value)
        except ValueError:
            raise CheckFailed("an event on plane-events is not JSON", found=r.value[:60]) from None
        got[event["tailnum"]].append(event["flight"])
        where[event["tailnum"]].add(r.partition)
    split = sorted(t for t, parts in where.items() if len(parts) > 1)
    expect(not split, "every plane's events should be in one partition",
           expected="1 partition per tailnum", found=f"{len(split)} planes spread out, e.g. {split[:3]}",
           hint="Use the tailnum as the key: the same key always goes to the same partition.")
    wrong = [t for t in want if got.get(t) != want[t]]
    expect(not wrong, "each plane's flights should appear in the order it flew them (sched_dep_time)",
           expected={t: want[t] for t in wrong[:2]}, found={t: got.get(t) for t in wrong[:2]},
           hint="Sort the flights by sched_dep_time before sending them.")


@check("lab3-q4")
def skew_and_remapping(ctx: Context) -> None:
    """messages_per_partition matches the broker, and remapped_share is exact"""
    expect_equal(ctx.sub.value("messages_per_partition"), end_offsets(ctx, CARRIER_TOPIC),
                 f"messages_per_partition of {ctx.topic(CARRIER_TOPIC)}",
                 hint="Ask the broker: a consumer's end_offsets for each TopicPartition (offsets start at 0 here).")
    keys = [c.encode() for c in carriers()]
    moved = sum(java_partition(k, 6) != java_partition(k, 8) for k in keys) / len(keys)
    got = ctx.sub.value("remapped_share")
    expect(isinstance(got, float) and abs(got - moved) < 1e-9, "remapped_share: the share of carriers whose "
           "partition changes when the topic grows from 6 to 8 partitions", expected=moved, found=got,
           hint="Compare predict_partition(key, 6) and predict_partition(key, 8) for every carrier in `carriers`.")
