"""Lab 2, topics, producers and consumers: the checks of its five graded parts."""

from __future__ import annotations

from collections import Counter

from .. import protos
from . import CheckFailed, Context, check, expect, expect_equal
from .kafka_state import committed_offsets, describe_topic, end_offsets, read_all, topic_configs

TOPIC = "flights"
PARTITIONS, REPLICAS, RETENTION_MS = 4, 3, "604800000"
SCHEMA_HEADER = ("schema", b"flights.Flight")


def Flight():
    return protos.messages("lab2", "flight.proto")["Flight"]


def day_one():
    from cluster.lab import load_flights

    return load_flights(day=1)


def identity(carrier, flight, origin, dest, sched_dep_time) -> tuple:
    return (carrier, flight, origin, dest, sched_dep_time)


def mean_delays() -> dict[str, float]:
    """The truth for lab2-q4: mean dep_delay per origin over the flights that have one."""
    sums, counts = Counter(), Counter()
    for f in day_one():
        if f["dep_delay"] is not None:
            sums[f["origin"]] += f["dep_delay"]
            counts[f["origin"]] += 1
    return {origin: round(total / counts[origin], 2) for origin, total in sums.items()}


def same_delays(got, truth) -> bool:
    # Rounded by Python, numpy or pandas, the last digit may differ: within half a cent is right.
    return (isinstance(got, dict) and set(got) == set(truth)
            and all(isinstance(got[o], (int, float)) and abs(got[o] - truth[o]) <= 0.0051 for o in truth))


@check("lab2-q1")
def flights_topic(ctx: Context) -> None:
    """the flights topic has 4 partitions, 3 replicas each, and one week of retention"""
    meta = describe_topic(ctx, TOPIC)
    parts = meta["partitions"]
    expect_equal(len(parts), PARTITIONS, f"number of partitions of {ctx.topic(TOPIC)}",
                 hint="The number of partitions is fixed when a topic is created: give create_topics the partition "
                      "count and replication factor the text asks for, then re-run the cell to recreate the topic.")
    replicas = sorted({len(p["replica_nodes"]) for p in parts})
    expect_equal(replicas, [REPLICAS], "replicas per partition")
    retention = topic_configs(ctx, TOPIC).get("retention.ms")
    expect_equal(retention, RETENTION_MS, "the topic's retention.ms",
                 hint="retention.ms is a topic setting given when the topic is created; it counts milliseconds, "
                      "so check you converted a whole week (not a day, not seconds) and passed it as a string.")


@check("lab2-q2")
def flights_on_the_topic(ctx: Context) -> None:
    """every flight of 1 January is on the topic once: carrier key, protobuf value, schema header"""
    truth = day_one()
    records = read_all(ctx, TOPIC)
    expect_equal(len(records), len(truth), f"number of messages on {ctx.topic(TOPIC)}",
                 hint="Send each flight exactly once and flush before you check; re-run the notebook from the "
                      "top if you sent some twice.")
    seen = Counter()
    for r in records:
        try:
            f = Flight().FromString(r.value)
        except Exception:
            raise CheckFailed(f"the message at partition {r.partition} offset {r.offset} is not a flights.Flight",
                              found=r.value[:60],
                              hint="The value must be the flight's protobuf bytes (a serialized Flight), "
                                   "not JSON or the dict's text.") from None
        expect_equal(r.key, f.carrier.encode(), f"the key of the message at partition {r.partition} offset {r.offset}",
                     hint="Each message's key should be its own flight's carrier code, as bytes: check you did not key "
                          "by another field or leave the key out.")
        headers = [(k, bytes(v)) for k, v in (r.headers or [])]
        expect(SCHEMA_HEADER in headers, f"the headers of the message at partition {r.partition} offset {r.offset}",
               expected=[SCHEMA_HEADER], found=headers,
               hint="Each message needs the schema header the text gives: headers are a list of "
                    "(name, value) pairs, with the name a string and the value bytes.")
        seen[identity(f.carrier, f.flight, f.origin, f.dest, f.sched_dep_time)] += 1
    want = Counter(identity(t["carrier"], t["flight"], t["origin"], t["dest"], t["sched_dep_time"]) for t in truth)
    expect(seen == want, "the flights on the topic should be exactly the flights of 1 January",
           expected=f"{len(want)} flights", found=f"{len(seen - want)} unexpected, {len(want - seen)} missing",
           hint="Send every flight in `flights`, each once.")


@check("lab2-q3")
def first_record_metadata(ctx: Context) -> None:
    """first_sent is the (partition, offset) where the first flight landed"""
    got = ctx.sub.value("first_sent")
    expect(isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(x, int) for x in got),
           "first_sent should be a (partition, offset) pair", found=got,
           hint="send() returns a future; once the first flight's future completes, its record metadata "
                "says which partition and offset the broker gave it.")
    partition, offset = got
    first = day_one()[0]
    match = [r for r in read_all(ctx, TOPIC) if r.partition == partition and r.offset == offset]
    expect(bool(match), f"no message at partition {partition}, offset {offset}", expected="the first flight")
    f = Flight().FromString(match[0].value)
    expect_equal(identity(f.carrier, f.flight, f.origin, f.dest, f.sched_dep_time),
                 identity(first["carrier"], first["flight"], first["origin"], first["dest"], first["sched_dep_time"]),
                 f"the flight at partition {partition}, offset {offset}",
                 hint="The pair must come from the future of the very first flight you sent, not the last "
                      "one, nor the first callback to fire.")


@check("lab2-q4")
def delays_by_origin(ctx: Context) -> None:
    """delays holds the mean departure delay per airport, and the group committed to the end"""
    truth = mean_delays()
    got = ctx.sub.value("delays")
    committed, ends = committed_offsets(ctx, "delays", TOPIC), end_offsets(ctx, TOPIC)
    if got == {} and committed == ends:
        raise CheckFailed("delays is empty, and the group had already committed the end of every partition "
                          "when your function ran", expected=truth, found=got,
                          hint="A group that committed starts where it stopped: run the cell again (it begins "
                               "with lab.fresh_group(\"delays\")), or use a new group id.")
    expect(same_delays(got, truth), "delays: mean dep_delay per origin, rounded to 2 decimals", truth, got,
           hint="Leave cancelled flights (no dep_delay) out of the mean instead of counting them as 0, and read "
                "from the earliest offset until three polls in a row come back empty.")
    expect_equal(committed, ends, f"offsets committed by group {ctx.group('delays')}",
                 hint="The group's offsets reach the broker only when you commit: commit once everything is "
                      "processed, before you close the consumer.")


@check("lab2-q5")
def earliest_and_latest(ctx: Context) -> None:
    """the second read was predicted, and new groups read every message with 'earliest' and none with 'latest'"""
    ends = end_offsets(ctx, TOPIC)
    # The text's premise: the group read everything and committed (lab2-q4 checks that it did).
    predicted = ctx.sub.value("predicted_again")
    expect(predicted == {}, "predicted_again: what a second average_delay_by_origin() with the same "
           "group returns", expected={}, found=predicted,
           hint="The group committed the end of every partition; the same group carries on from there.")
    total = sum(ends.values())
    for group, reset, count, want_count in (("from-the-start", "earliest", "earliest_count", total),
                                            ("from-now-on", "latest", "latest_count", 0)):
        expect_equal(ctx.sub.value(count), want_count, f"{count} (a new group, auto_offset_reset={reset!r})",
                     hint=f"A new group with {reset!r} starts at the " + ("first offset of every partition."
                          if reset == "earliest" else "end: only messages produced after the consumer joined."))
        # The counts must come from consuming: a group that read the topic leaves its position there.
        expect_equal(committed_offsets(ctx, group, TOPIC), ends, f"offsets committed by group {ctx.group(group)}",
                     hint="count_messages should consume in lab.group(group) and close the consumer (which "
                          "commits its position, kafka-python's default); counts written down without reading "
                          "leave no group behind.")
