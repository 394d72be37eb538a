"""Lab 3, partitions and ordering: the checks of its six graded parts (five, and a prediction)."""

from __future__ import annotations

import functools
import json
from collections import defaultdict

from kafka.partitioner.default import murmur2

from . import CheckFailed, Context, check, expect, expect_equal, partitions_wrong, prediction, prediction_feedback
from .kafka_state import end_offsets, fill, graders_topic, read_all

CARRIER_TOPIC, CARRIER_PARTITIONS = "by-carrier", 6
ROUTED_TOPIC, HOT_KEY, MAX_SHARE = "routed", b"B6", 0.30
PLANE_TOPIC = "plane-events"


def java_partition(key: bytes, n: int) -> int:
    """The Java client's (and kafka-python's) default: murmur2, made positive, modulo n."""
    return (murmur2(key) & 0x7FFFFFFF) % n


@functools.cache  # the whole dataset is read once per grading, not once per key drawn
def carriers() -> tuple[str, ...]:
    from cluster.lab import load_flights

    return tuple(sorted({f["carrier"] for f in load_flights()}))


def jfk_departures() -> int:
    from cluster.lab import load_flights

    return len(load_flights(origin="JFK"))


def partition_cases(ctx: Context, cases: int = 8) -> list[tuple[bytes, int]]:
    """Seeded keys and partition counts, two of them keys whose murmur2 hash has the top bit set
    with a count that is not a power of two (there the sign bit changes the answer), so neither
    Python's hash() nor a forgotten `& 0x7fffffff` can pass by luck."""

    def key() -> bytes:
        return bytes(ctx.rng.randrange(256) for _ in range(ctx.rng.randrange(1, 12)))

    found: list = []
    while len(found) < 2:
        k = key()
        if murmur2(k) >= 2**31:
            found.append((k, ctx.rng.choice([5, 6, 7, 9, 10, 11, 12])))
    found += [(key(), ctx.rng.randrange(5, 13)) for _ in range(cases - 2)]
    ctx.rng.shuffle(found)
    return found


@check("lab3-q1")
def predicted_partitions(ctx: Context) -> None:
    """predict_partition(key, n) gives the partition the producer really picks"""
    for key, n in partition_cases(ctx):
        expect_equal(
            ctx.sub.value(f"predict_partition({key!r}, {n})"),
            java_partition(key, n),
            f"predict_partition({key!r}, {n})",
            hint="The producer hashes the key's bytes with murmur2 (the Java client's hash) and clears "
            "the sign bit before taking the remainder; Python's hash() is different, and random "
            "for bytes.",
        )
    records = read_all(ctx, CARRIER_TOPIC)
    expect(len(records) > 0, f"{ctx.topic(CARRIER_TOPIC)} is empty", hint="Run the cell that produces the flights.")
    for r in records:
        expect(
            r.key is not None,
            "a message on by-carrier has no key",
            hint="Every message needs its carrier code as the key, in bytes: without a key the producer "
            "picks a partition at random.",
        )
        expect_equal(
            r.partition,
            java_partition(r.key, CARRIER_PARTITIONS),
            f"the partition of the message with key {r.key!r} (offset {r.offset})",
        )


@check("lab3-q2")
def measured_skew(ctx: Context) -> None:
    """partition_loads(topic) counts what the broker holds"""
    # A topic of the grader's own, with counts the notebook cannot know: the function must ask.
    probe = graders_topic(ctx, "loads-probe", 3, protect=False)
    want = {p: ctx.rng.randrange(1, 40) for p in range(3)}
    fill(ctx, probe, want)
    got = ctx.sub.value(f"partition_loads({probe!r})")
    # The loads are the grader's, the answer itself: which partitions are wrong, with the notebook's values.
    expect(
        got == want,
        f"partition_loads({probe!r}) on a topic of the grader's, with 3 partitions"
        + partitions_wrong(want, got, "partitions it does not have"),
        expected="{partition: the number of messages the broker holds in it} for partitions 0, 1 and 2",
        found=got,
        hint="Ask the broker for each partition's end offset (a consumer's end_offsets); "
        "do not count the flights you sent.",
    )


@check("lab3-q2-prediction")
def predicted_skew(ctx: Context) -> str:
    """a prediction of the busiest partition of carrier_topic was written before the demo"""
    predicted = prediction(
        ctx,
        "predicted_busiest",
        lambda v: isinstance(v, int) and not isinstance(v, bool),
        "a partition number",
        "the partition of carrier_topic you expect to hold the most messages",
    )
    try:
        loads = end_offsets(ctx, CARRIER_TOPIC)
    except CheckFailed:
        loads = {}
    if sum(loads.values()) == 0:
        return "predicted_busiest: made; send the JFK departures (part 2) and run the demo to compare"
    busiest = max(loads, key=lambda p: loads[p])
    return prediction_feedback(
        "predicted_busiest",
        predicted,
        busiest,
        f"Partition {busiest} holds {loads[busiest]} of {sum(loads.values())}: the one the "
        "biggest carrier's key hashes to, plus whatever other carriers share it.",
    )


@check("lab3-q3")
def spread_hot_key(ctx: Context) -> None:
    """routed_topic keeps each carrier, and each B6 plane, in one partition, with no partition over 30%"""
    records = read_all(ctx, ROUTED_TOPIC)
    expect_equal(
        len(records),
        jfk_departures(),
        f"messages on {ctx.topic(ROUTED_TOPIC)}",
        hint="Run the cell that sends every JFK departure through your partitioner, once.",
    )
    partitions_of = defaultdict(set)  # carrier, or B6's plane -> partitions it landed in
    load: defaultdict[int, int] = defaultdict(int)
    for r in records:
        load[r.partition] += 1
        if r.key == HOT_KEY:
            try:
                tailnum = json.loads(r.value)["tailnum"]
            except (ValueError, KeyError, TypeError):
                raise CheckFailed("a B6 message on the routed topic is not a JSON flight", found=r.value[:60]) from None
            partitions_of[("B6 plane", tailnum)].add(r.partition)
        else:
            partitions_of[("carrier", (r.key or b"").decode(errors="replace"))].add(r.partition)
    split = sorted(name for (kind, name), parts in partitions_of.items() if kind == "carrier" and len(parts) > 1)
    expect(
        not split,
        "every carrier other than B6 keeps its messages in one partition",
        expected="1 partition each",
        found=f"{', '.join(split)} in several",
        hint="Only the hot key is spread; every other key is hashed as the default partitioner does, "
        "so its order survives.",
    )
    planes = sorted(name for (kind, name), parts in partitions_of.items() if kind == "B6 plane" and len(parts) > 1)
    expect(
        not planes,
        "each B6 plane (tailnum) keeps its messages in one partition",
        expected="1 partition per plane",
        found=f"{len(planes)} planes in several, e.g. {planes[:3]}",
        hint="Spread B6 by something that stays the same for a plane (its tailnum), not at random "
        "or in turn: a plane's flights must stay in order.",
    )
    share = max(load.values()) / len(records)
    expect(
        share <= MAX_SHARE,
        f"the busiest partition of {ctx.topic(ROUTED_TOPIC)} holds at most {MAX_SHARE:.0%} of the messages",
        expected=f"at most {MAX_SHARE:.0%}",
        found=f"{share:.1%} (partition loads {dict(sorted(load.items()))})",
        hint="A partition of its own still leaves B6 in one partition: spread B6's planes over several partitions.",
    )
    # busiest_share on a topic of the grader's own, with loads nobody could know in advance
    probe = graders_topic(ctx, "share-probe", 4)
    loads = {p: ctx.rng.randrange(1, 60) for p in range(4)}
    fill(ctx, probe, loads)
    want = max(loads.values()) / sum(loads.values())
    got = ctx.sub.value(f"busiest_share({probe!r})")
    number = isinstance(got, (int, float)) and not isinstance(got, bool)
    expect(
        number and abs(got - want) < 1e-9,
        f"busiest_share({probe!r}): the share (0 to 1) of a topic of the grader's in its busiest partition"
        + (f" ({'more' if got > want else 'less'} than it holds)" if number else ""),
        expected="the busiest partition's messages divided by the topic's, a fraction from 0 to 1",
        found=got,
        hint="Measure the topic's loads with partition_loads, and give the busiest partition's share as a "
        "fraction from 0 to 1, not a percentage or a count.",
    )


@check("lab3-q4")
def per_key_order(ctx: Context) -> None:
    """each plane's events sit in one partition, in the order the plane flew them"""
    from cluster.lab import load_flights

    flights = load_flights(day=1)
    want = defaultdict(list)
    for f in sorted((f for f in flights if f["tailnum"]), key=lambda f: (f["sched_dep_time"], f["flight"])):
        want[f["tailnum"]].append(f["flight"])
    records = read_all(ctx, PLANE_TOPIC)
    expect_equal(
        len(records),
        sum(map(len, want.values())),
        f"number of events on {ctx.topic(PLANE_TOPIC)}",
        hint="One event per flight that has a tailnum.",
    )
    got, where, keyed_otherwise = defaultdict(list), defaultdict(set), []
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        try:
            event = json.loads(r.value)
        except ValueError:
            raise CheckFailed("an event on plane-events is not JSON", found=r.value[:60]) from None
        got[event["tailnum"]].append(event["flight"])
        where[event["tailnum"]].add(r.partition)
        if r.key != str(event["tailnum"]).encode():
            keyed_otherwise.append((r.key, event["tailnum"]))
    # Keyed by anything coarser (the carrier, the origin) also keeps each plane in one partition
    # and in order: the part asks for the tail number, and says so.
    expect(
        not keyed_otherwise,
        "every event should be keyed by its plane's tail number",
        expected="key = tailnum as bytes",
        found=f"{len(keyed_otherwise)} events keyed otherwise, e.g. (key, tailnum) {keyed_otherwise[:2]}",
        hint='Send each event with key=f["tailnum"].encode().',
    )
    split = sorted(t for t, parts in where.items() if len(parts) > 1)
    expect(
        not split,
        "every plane's events should be in one partition",
        expected="1 partition per tailnum",
        found=f"{len(split)} planes spread out, e.g. {split[:3]}",
        hint="Use the tailnum as the key: the same key always goes to the same partition.",
    )
    wrong = [t for t in want if got.get(t) != want[t]]
    expect(
        not wrong,
        "each plane's flights should appear in the order it flew them (sched_dep_time)",
        expected={t: want[t] for t in wrong[:2]},
        found={t: got.get(t) for t in wrong[:2]},
        hint="Sort the flights by sched_dep_time before sending them.",
    )


@check("lab3-q5")
def remapping(ctx: Context) -> None:
    """remapped_share(keys, before, after) is the exact share of keys that move when a topic grows"""
    for _ in range(
        3
    ):  # keys and partition counts of the grader's own (a wrong hash matches all three by chance rarely)
        keys = [f"{ctx.rng.choice(carriers())}-{ctx.rng.randrange(10**5)}" for _ in range(ctx.rng.randrange(20, 40))]
        before = ctx.rng.randrange(2, 9)
        after = before + ctx.rng.randrange(1, 6)
        moved = [java_partition(k.encode(), before) != java_partition(k.encode(), after) for k in keys].count(
            True
        ) / len(keys)
        got = ctx.sub.value(f"remapped_share({keys!r}, {before}, {after})")
        number = isinstance(got, (int, float)) and not isinstance(got, bool)
        # The keys are not in the message, so neither is their answer: only whether it is too high or low.
        expect(
            number and abs(got - moved) < 1e-9,
            f"remapped_share(<{len(keys)} keys of the grader's>, {before}, {after}): the share (0 to 1) of "
            f"keys whose partition changes when a topic grows from {before} to {after} partitions"
            + (f" ({'more' if got > moved else 'less'} than the keys' own)" if number else ""),
            expected="the keys whose murmur2 partition differs between the two counts, as a fraction of all keys",
            found=got,
            hint="Count the keys that land in another partition with `after` partitions than with `before`, "
            "as a fraction of all keys; remember that keys are hashed as bytes.",
        )
