"""Lab 2, topics, producers and consumers: the checks of its six graded parts (a prediction among them)."""

from __future__ import annotations

from collections import Counter

from .. import protos
from . import CheckFailed, Context, LabPolicy, check, expect, expect_equal, prediction, prediction_feedback
from .kafka_state import (
    committed_offsets,
    describe_topic,
    end_offsets,
    fill,
    graders_topic,
    read_all,
    short_name,
    topic_configs,
)

# A grading mostly waits (its consumers' empty polls): its solution alone kept 0.10 cores busy in
# its own processes and about 0.07 in the brokers (November 2026, 2 cores), so a class's gradings
# run a dozen at a time (autograder/pool.py).
POLICY = LabPolicy(grading_cores=0.17)

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


def mean_delays(flights) -> dict[str, float]:
    """Mean dep_delay per origin over the flights that have one, unrounded (see same_delays)."""
    sums: Counter = Counter()
    counts: Counter = Counter()
    for f in flights:
        if f["dep_delay"] is not None:
            sums[f["origin"]] += f["dep_delay"]
            counts[f["origin"]] += 1
    return {origin: total / counts[origin] for origin, total in sums.items()}


def shown(means: dict[str, float]) -> dict[str, float]:
    return {origin: round(mean, 2) for origin, mean in means.items()}


def wrong_means(got, exact) -> list:
    """The origins whose mean in `got` is not `exact`'s (as same_delays judges), that `got` lacks,
    or that it has and `exact` does not: which keys differ, never the grader's means."""
    if not isinstance(got, dict):
        return sorted(exact)
    bad = [o for o in exact if not (isinstance(got.get(o), (int, float)) and abs(got[o] - exact[o]) <= 0.005 + 1e-6)]
    return sorted(bad) + sorted((o for o in got if o not in exact), key=str)


def short_of_the_end(committed: dict, ends: dict) -> str:
    """A group's committed offsets, and which partitions fall short of (or past) their end: the
    group's own values, not the grader's ends (those count the grader's records)."""
    off = sorted(p for p in ends if committed.get(p) != ends[p])
    return f"{committed}: partitions {off} not at their end" if off else str(committed)


def same_delays(got, exact) -> bool:
    # Compared with the unrounded mean: a mean such as 119.475 rounds to .47 in Python (its float is
    # 119.47499...) and to .48 after pandas sums in another order; both are within half a cent of it.
    return (
        isinstance(got, dict)
        and set(got) == set(exact)
        and all(isinstance(got[o], (int, float)) and abs(got[o] - exact[o]) <= 0.005 + 1e-6 for o in exact)
    )


@check("lab2-q1")
def flights_topic(ctx: Context) -> None:
    """the flights topic has 4 partitions, 3 replicas each, and one week of retention"""
    meta = describe_topic(ctx, TOPIC)
    parts = meta["partitions"]
    expect_equal(
        len(parts),
        PARTITIONS,
        f"number of partitions of {ctx.topic(TOPIC)}",
        hint="The number of partitions is fixed when a topic is created: give create_topics the partition "
        "count and replication factor the text asks for, then re-run the cell to recreate the topic.",
    )
    replicas = sorted({len(p["replica_nodes"]) for p in parts})
    expect_equal(replicas, [REPLICAS], "replicas per partition")
    retention = topic_configs(ctx, TOPIC).get("retention.ms")
    expect_equal(
        retention,
        RETENTION_MS,
        "the topic's retention.ms",
        hint="retention.ms is a topic setting given when the topic is created; it counts milliseconds, "
        "so check you converted a whole week (not a day, not seconds) and passed it as a string.",
    )


@check("lab2-q2")
def flights_on_the_topic(ctx: Context) -> None:
    """every flight of 1 January is on the topic once: carrier key, protobuf value, schema header"""
    truth = day_one()
    records = read_all(ctx, TOPIC)
    expect_equal(
        len(records),
        len(truth),
        f"number of messages on {ctx.topic(TOPIC)}",
        hint="Send each flight exactly once and flush before you check; re-run the notebook from the "
        "top if you sent some twice.",
    )
    seen: Counter = Counter()
    for r in records:
        try:
            f = Flight().FromString(r.value)
        except Exception:
            raise CheckFailed(
                f"the message at partition {r.partition} offset {r.offset} is not a flights.Flight",
                found=r.value[:60],
                hint="The value must be the flight's protobuf bytes (a serialized Flight), "
                "not JSON or the dict's text.",
            ) from None
        expect_equal(
            r.key,
            f.carrier.encode(),
            f"the key of the message at partition {r.partition} offset {r.offset}",
            hint="Each message's key should be its own flight's carrier code, as bytes: check you did not key "
            "by another field or leave the key out.",
        )
        headers = [(k, bytes(v)) for k, v in (r.headers or [])]
        expect(
            SCHEMA_HEADER in headers,
            f"the headers of the message at partition {r.partition} offset {r.offset}",
            expected=[SCHEMA_HEADER],
            found=headers,
            hint="Each message needs the schema header the text gives: headers are a list of "
            "(name, value) pairs, with the name a string and the value bytes.",
        )
        seen[identity(f.carrier, f.flight, f.origin, f.dest, f.sched_dep_time)] += 1
    want = Counter(identity(t["carrier"], t["flight"], t["origin"], t["dest"], t["sched_dep_time"]) for t in truth)
    expect(
        seen == want,
        "the flights on the topic should be exactly the flights of 1 January",
        expected=f"{len(want)} flights",
        found=f"{len(seen - want)} unexpected, {len(want - seen)} missing",
        hint="Send every flight in `flights`, each once.",
    )


def graders_flights(ctx: Context, n: int) -> list[dict]:
    """n flights nobody could know in advance: rows of 1 January with seeded flight numbers,
    airports and delays (about one in ten cancelled, without a dep_delay)."""
    rows = ctx.rng.sample(day_one(), n)
    numbers = ctx.rng.sample(range(6000, 9999), n)
    return [
        {
            **row,
            "flight": number,
            "origin": ctx.rng.choice(["EWR", "JFK", "LGA"]),
            "dep_delay": None if ctx.rng.random() < 0.1 else ctx.rng.randrange(-15, 240),
        }
        for row, number in zip(rows, numbers)
    ]


def as_message(flight: dict) -> bytes:
    F = Flight()
    return F(
        **{f.name: flight[f.name] for f in F.DESCRIPTOR.fields if flight.get(f.name) is not None}
    ).SerializeToString()


def send_flights(ctx: Context, topic: str, flights: list[dict]) -> None:
    """As part 2 asks: carrier key, protobuf value, schema header."""
    from kafka import KafkaProducer

    producer = KafkaProducer(**ctx.kafka)
    for f in flights:
        producer.send(topic, key=f["carrier"].encode(), value=as_message(f), headers=[SCHEMA_HEADER])
    producer.flush()
    producer.close()


@check("lab2-q3")
def located(ctx: Context) -> None:
    """locate(topic, flight) returns the (partition, offset) the broker gave the flight, on a topic of the
    grader's own that already holds messages"""
    topic = graders_topic(ctx, "locate-check", PARTITIONS, protect=False)  # locate writes to it
    # so no offset can be guessed: a seeded number already in each partition
    fill(ctx, topic, {p: ctx.rng.randrange(0, 12) for p in range(PARTITIONS)}, key=b"filler", value=b"filler")
    for flight in graders_flights(ctx, 3):
        got = ctx.sub.value(f"locate({topic!r}, {flight!r})")
        expect(
            isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(x, int) for x in got),
            f"locate(topic, <flight {flight['carrier']}{flight['flight']}>) should return a (partition, offset) pair",
            found=got,
            hint="send() returns a future; its get() returns the RecordMetadata, whose partition and offset "
            "say where the broker put the message.",
        )
        partition, offset = got
        match = [r for r in read_all(ctx, short_name(topic)) if r.partition == partition and r.offset == offset]
        expect(
            bool(match),
            f"no message at partition {partition}, offset {offset} of the grader's topic",
            expected="the flight locate() just sent",
            hint="Return the metadata of the message locate() sends, from its own future.",
        )
        try:
            f = Flight().FromString(match[0].value)
        except Exception:
            raise CheckFailed(
                f"the message at partition {partition}, offset {offset} is not a flights.Flight",
                found=match[0].value[:60],
                hint="Send the flight as in part 2: to_protobuf(flight).",
            ) from None
        expect_equal(
            identity(f.carrier, f.flight, f.origin, f.dest, f.sched_dep_time),
            identity(flight["carrier"], flight["flight"], flight["origin"], flight["dest"], flight["sched_dep_time"]),
            f"the flight at partition {partition}, offset {offset} (where locate() said it went)",
            hint="Return the metadata of the message locate() sends, not of another send.",
        )
        expect_equal(
            match[0].key,
            flight["carrier"].encode(),
            f"the key at partition {partition}, offset {offset}",
            hint="Key the flight by its carrier code, as in part 2.",
        )


@check("lab2-q4")
def delays_by_origin(ctx: Context) -> None:
    """average_delay_by_origin gives the mean departure delay per airport and commits to the end, on
    flights_topic and on a topic of the grader's own"""
    exact = mean_delays(day_one())
    truth = shown(exact)
    got = ctx.sub.value("delays")
    committed, ends = committed_offsets(ctx, "delays", TOPIC), end_offsets(ctx, TOPIC)
    if got == {} and committed == ends:
        raise CheckFailed(
            "delays is empty, and the group had already committed the end of every partition when your function ran",
            expected=truth,
            found=got,
            hint="A group that committed starts where it stopped: run the cell again (it begins "
            'with lab.fresh_group("delays")), or use a new group id.',
        )
    expect(
        same_delays(got, exact),
        "delays: mean dep_delay per origin, rounded to 2 decimals",
        truth,
        got,
        hint="Leave cancelled flights (no dep_delay) out of the mean instead of counting them as 0, and read "
        "from the earliest offset until three polls in a row come back empty.",
    )
    expect_equal(
        committed,
        ends,
        f"offsets committed by group {ctx.group('delays')}",
        hint="The group's offsets reach the broker only when you commit: commit once everything is "
        "processed, before you close the consumer.",
    )
    # The truth above is the public dataset's, which the notebook also has: the same function on
    # the grader's own flights, whose delays nobody could know in advance.
    topic = graders_topic(ctx, "delays-check", PARTITIONS)
    flights = graders_flights(ctx, 150)
    send_flights(ctx, topic, flights)
    group = f"delays-check-{ctx.rng.randrange(10**6)}"
    exact = mean_delays(flights)
    got = ctx.sub.value(f"average_delay_by_origin({topic!r}, {group!r})")
    # The grader's means are the truth of flights nobody could know: the message names the origins
    # that differ and the notebook's own values, never the means (a result must not hand the next
    # submission its answer).
    wrong = wrong_means(got, exact)
    expect(
        not wrong,
        f"average_delay_by_origin({topic!r}, {group!r}) on the grader's own flights: "
        f"{len(wrong)} origin(s) wrong, missing or not among its flights: {wrong}",
        expected="the mean dep_delay per origin of the flights on that topic (cancelled ones left out), "
        "rounded to 2 decimals",
        found=got,
        hint="Compute the means from the records you read from the topic you are given "
        "(decode each value with flight_pb2.Flight.FromString).",
    )
    committed, ends = committed_offsets(ctx, group, short_name(topic)), end_offsets(ctx, short_name(topic))
    expect(
        committed == ends,
        f"offsets committed by group {ctx.group(group)} on the grader's topic",
        expected="the end offset of every partition",
        found=short_of_the_end(committed, ends),
        hint="Consume in lab.group(group), the group you are given, and commit before you close.",
    )


@check("lab2-q5-prediction")
def predicted_the_second_read(ctx: Context) -> str:
    """a prediction of what the same group's second read returns was written before the demo"""
    # The text's premise: the group read everything and committed (lab2-q4 checks that it did).
    predicted = prediction(
        ctx,
        "predicted_again",
        lambda v: True,
        "a value",
        'what a second average_delay_by_origin(flights_topic, "delays") returns',
    )
    return prediction_feedback(
        "predicted_again",
        predicted,
        {},
        "The group committed the end of every partition; the same group carries on from there.",
    )


@check("lab2-q5")
def earliest_and_latest(ctx: Context) -> None:
    """new groups read every message with 'earliest' and none with 'latest'"""
    ends = end_offsets(ctx, TOPIC)
    total = sum(ends.values())
    for group, reset, count, want_count in (
        ("from-the-start", "earliest", "earliest_count", total),
        ("from-now-on", "latest", "latest_count", 0),
    ):
        expect_equal(
            ctx.sub.value(count),
            want_count,
            f"{count} (a new group, auto_offset_reset={reset!r})",
            hint=f"A new group with {reset!r} starts at the "
            + (
                "first offset of every partition."
                if reset == "earliest"
                else "end: only messages produced after the consumer joined."
            ),
        )
        # The counts must come from consuming: a group that read the topic leaves its position there.
        expect_equal(
            committed_offsets(ctx, group, TOPIC),
            ends,
            f"offsets committed by group {ctx.group(group)}",
            hint="count_messages should consume in lab.group(group) and close the consumer (which "
            "commits its position, kafka-python's default); counts written down without reading "
            "leave no group behind.",
        )
    # Counts of the notebook's own topic never vary: count_messages must also count a topic of the
    # grader's own, with a seeded number of messages, leaving its groups' bookmarks at the end.
    topic = graders_topic(ctx, "count-check", PARTITIONS)
    send_flights(ctx, topic, graders_flights(ctx, ctx.rng.randrange(20, 90)))
    theirs = end_offsets(ctx, short_name(topic))
    # How many messages the grader's topic holds is this part's answer: never in the message.
    for reset, want_count, rule in (
        ("earliest", sum(theirs.values()), "every message on the topic"),
        ("latest", 0, "0: a new group with 'latest' reads only what comes after it joined"),
    ):
        group = f"count-check-{reset}-{ctx.rng.randrange(10**6)}"
        got = ctx.sub.value(f"count_messages({topic!r}, {group!r}, {reset!r})")
        expect(
            got == want_count,
            f"count_messages({topic!r}, {group!r}, {reset!r}) on a topic of the grader's, a new group, "
            f"auto_offset_reset={reset!r}"
            + (
                f" ({'more' if got > want_count else 'fewer'} than the topic holds)"
                if reset == "earliest" and isinstance(got, int)
                else ""
            ),
            expected=rule,
            found=got,
            hint="Count what a consumer of the topic you are given reads, in lab.group(group).",
        )
        committed = committed_offsets(ctx, group, short_name(topic))
        expect(
            committed == theirs,
            f"offsets committed by group {ctx.group(group)} on the grader's topic",
            expected="the end offset of every partition",
            found=short_of_the_end(committed, theirs),
            hint="Close the consumer: kafka-python commits its position when it closes.",
        )
