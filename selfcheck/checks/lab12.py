"""Lab 12, stateful streams the Kafka Streams way (quixstreams): a count per key whose state lives
in a store backed by a changelog topic, checked after the grader kills the app mid-stream and
starts it again in a folder without its files; a stream-table join whose table topic was
written with another partitioner, which only a repartitioned app joins in full; and hourly
windows on event time over late reports, whose grace period a stated requirement bounds from
both sides.

Every check runs the student's scripts on the grader's own topics: a seeded day of flights with a
made-up airline mixed in (lab 9's), planes whose seats the grader draws from the seed, and reports
late by seeded amounts at seeded hours, so an answer worked out from the public dataset cannot
match."""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from kafka.partitioner.default import murmur2

from cluster.clients import in_namespace
from cluster.safe_files import list_dir, remove
from cluster.waiting import wait_for

from . import CheckFailed, Context, LabPolicy, check, expect, prediction, prediction_feedback
from .kafka_state import end_offsets, graders_topic, read_all, short_name
from .flights import FAKE_CARRIER, graders_flights, iso, when
from .scripts import ScriptRun, ended_early, start, stop

COUNTS_SCRIPT = "carrier_counts.py"
JOIN_SCRIPT = "flights_with_planes.py"
HOURS_SCRIPT = "hourly_departures.py"
APP_START_S = 90  # from a script's start to its first output: a Python app, its topics and its group
RUN_DEADLINE_S = 90  # for a started app to finish what it was given
FEED_PER_S = 100  # the grader's flights arrive at this rate while the first run counts (a day: ~9 s)
POLICY = LabPolicy(
    # three scripts, the first started twice, and the waits for their groups (lab12-q3's: one, APP_START_S)
    checks_budget_s=3 * APP_START_S + 3 * RUN_DEADLINE_S,
    # the self-test grades two at a time: each grading runs a Python app of about 150 MB
    gradings_at_once=2,
    slowest_cell_s=120,  # the demos run apps in the kernel: seconds alone, far longer when loaded
)


# --- the grader's data -----------------------------------------------------------------------


def produce(ctx: Context, topic: str, records: list[tuple[str, dict]], per_s: float = 0) -> None:
    """Send (key, value) records with kafka-python (murmur2, as quixstreams and Java's clients
    partition); per_s: at that rate, else at once."""
    from kafka import KafkaProducer

    with KafkaProducer(**ctx.kafka, acks="all") as producer:
        for key, value in records:
            producer.send(topic, key=key.encode(), value=json.dumps(value).encode())
            if per_s:
                time.sleep(1 / per_s)
        producer.flush(30)


def new_files(ctx: Context, before: set[str], script: str) -> list[str]:
    """What appeared in the notebook's folder since `before`, but the script's logs (a self-check
    keeps them there)."""
    logs = script.removesuffix(".py") + "-"
    return sorted(
        n for n in set(list_dir(ctx.workdir) or ()) - before if not (n.startswith(logs) and n.endswith(".log"))
    )


def committed(ctx: Context, topic: str, isolation_level: str = "read_committed") -> list[dict]:
    """The values of a topic the student's app wrote, partition by partition in offset order;
    with read_committed, only what committed transactions (or no transaction) wrote."""
    values = []
    for r in read_all(ctx, short_name(topic), isolation_level=isolation_level):
        try:
            values.append(json.loads(r.value))
        except (TypeError, ValueError):
            values.append({"(not JSON)": repr(r.value[:80])})
    return values


def app_groups_at_end(ctx: Context, topic: str) -> list[str]:
    """The consumer groups of the namespace that have read `topic` to its end, and what the app
    wrote to itself from it (its repartition topics, which quixstreams names
    "<namespace>.repartition__<app>--<topic>--..."): an app with nothing of it left to do."""
    from kafka import KafkaConsumer, TopicPartition

    groups = [str(g["group_id"]) for g in ctx.admin.list_groups() if in_namespace(ctx.namespace, str(g["group_id"]))]
    mine = [t for t in ctx.admin.list_topics() if in_namespace(ctx.namespace, t)]
    done = []
    for gid in groups:
        committed_at = {tp: om.offset for tp, om in ctx.admin.list_group_offsets(gid).get(gid, {}).items()}
        if not any(tp.topic == topic for tp in committed_at):
            continue
        # the topic, and what the app wrote to itself from it (not other topics the group once read)
        app = gid[len(ctx.namespace) + 1 :]
        own = ctx.topic(f"repartition__{app}--")
        topics = {topic} | {t for t in mine if t.startswith(own) and short_name(topic) in t}
        with KafkaConsumer(**ctx.kafka) as consumer:
            parts = [
                TopicPartition(t, p) for t in sorted(topics) for p in sorted(consumer.partitions_for_topic(t) or ())
            ]
        # a partition the group never committed is read from its first offset
        if nothing_after(ctx, {tp: committed_at.get(tp, 0) for tp in parts}):
            done.append(gid)
    return done


def nothing_after(ctx: Context, offsets: dict) -> bool:
    """Whether no record lies between each partition's committed offset and its end. An offset at
    the end less one may still be all read: a transaction's commit marker takes an offset, and
    no consumer commits past it until the next record."""
    from kafka import KafkaConsumer

    with KafkaConsumer(**ctx.kafka, enable_auto_commit=False, isolation_level="read_committed") as consumer:
        ends = consumer.end_offsets(list(offsets))
        behind = {tp: offset for tp, offset in offsets.items() if offset < ends[tp]}
        if not behind:
            return True
        consumer.assign(list(behind))
        for tp, offset in behind.items():
            consumer.seek(tp, offset)
        deadline = time.monotonic() + 5
        while any(consumer.position(tp) < ends[tp] for tp in behind) and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                if any(r.offset < ends[tp] for r in records):
                    return False
        return all(consumer.position(tp) >= ends[tp] for tp in behind)


def first_output(ctx: Context, run: ScriptRun, topic: str, what: str) -> None:
    """Until the app has written something to `topic` (committed or not), or its deadline."""

    def written() -> int:
        return sum(end_offsets(ctx, short_name(topic)).values())

    seen = wait_for(written, timeout_s=APP_START_S, every_s=0.3, until=lambda n: n > 0, stop_if=run.ended)
    if not seen or not seen.last:
        hint = "Run it from the notebook on your own topics first; it must read its arguments, not names of its own."
        if run.ended():
            raise ended_early(run, f"before it wrote to {short_name(topic)}", hint)
        stop(run.proc)
        raise CheckFailed(f"{run.name} {what}: it wrote nothing to {short_name(topic)} in {APP_START_S} s", hint=hint)


# --- lab12-q1: a stateful count, killed and started again elsewhere ------------------------------


@check("lab12-q1")
def counts_survive_a_crash(ctx: Context) -> str:
    """the carrier counts, the app killed mid-stream and started again without its files: each count once, exact"""
    events = graders_flights(ctx)
    truth = Counter(e["carrier"] for e in events)
    flights = graders_topic(ctx, "flights", 3, retention_ms="-1")
    counts = graders_topic(ctx, "counts", 3, protect=False, retention_ms="-1")
    records = [(e["origin"], e) for e in events]
    head = len(records) // 10
    produce(ctx, flights, records[:head])
    before = set(list_dir(ctx.workdir) or ())
    state = f"state-{ctx.rng.randrange(10**6)}"  # a folder new to the notebook's (a self-check runs there)
    first = start(ctx, COUNTS_SCRIPT, flights, counts, state, tag="run 1")
    first_output(ctx, first, counts, "(run 1)")
    # The rest of the day arrives while it counts. Once a transaction of its counts has committed
    # (so a restart has state to restore), it is killed at a seeded moment, with records coming and
    # a transaction open: what it counted since its last commit is not committed.
    feeder = threading.Thread(target=produce, args=(ctx, flights, records[head:], FEED_PER_S), daemon=True)
    feeder.start()
    some = wait_for(
        lambda: len(committed(ctx, counts)),
        timeout_s=APP_START_S,
        every_s=0.2,
        until=lambda n: n > 0,
        stop_if=first.ended,
    )
    if not some and first.ended():
        raise ended_early(
            first, "before a transaction of its counts committed", "The app runs until it is stopped (app.run())."
        )
    expect(
        bool(some) and some.last > 0,
        f"{COUNTS_SCRIPT} (run 1) committed no count within {APP_START_S} s of its first one",
        found=first.output()[-600:],
        hint="Let quixstreams commit every few seconds (its commit_interval, 5 s by default).",
    )
    kill_after = ctx.rng.uniform(0.5, 2.0)
    time.sleep(kill_after)  # a moment in the middle of the feed, not a wait for something
    ended = first.proc.poll()
    stop(first.proc)
    # Another machine: a new empty folder, HOME and TMPDIR (start's elsewhere), and none of the
    # files run 1 wrote left in the notebook's folder either (its state folder, any file of its own).
    left = new_files(ctx, before, COUNTS_SCRIPT)
    for name in left:
        remove(ctx.workdir, name)
    second = start(ctx, COUNTS_SCRIPT, flights, counts, state, tag="run 2 (elsewhere)", elsewhere=True)
    feeder.join(60)
    found: dict[str, list] = {}

    def latest() -> dict:
        found.clear()
        for v in committed(ctx, counts):
            if isinstance(v, dict) and "carrier" in v:
                found.setdefault(str(v["carrier"]), []).append(v.get("count"))
        return {c: ns[-1] for c, ns in found.items()}

    # Until the counts are right, or the app has committed the end of all it reads (then what it
    # wrote is committed too, and waiting longer changes nothing).
    # (The groups first, the output after: what a group had committed when it was asked is then read.)
    done = wait_for(
        lambda: (bool(app_groups_at_end(ctx, flights)) and not feeder.is_alive(), latest()),
        timeout_s=RUN_DEADLINE_S,
        every_s=1,
        until=lambda seen: seen[1] == dict(truth) or seen[0],
    )
    still = not second.ended()
    stop(second.proc)
    story = (
        f"run 1 killed {kill_after:.1f} s after its first commit"
        + (f" (it had ended by itself, exit {ended})" if ended is not None else "")
        + f"; {', '.join(left) or 'nothing'} removed; run 2 started"
    )
    if not still:
        raise ended_early(
            second,
            f"by itself, after {story}",
            "The app runs until it is stopped (app.run()), as a service does; the grader stops it.",
        )
    repeated = {c: ns for c, ns in found.items() if ns != list(range(1, len(ns) + 1))}
    seen = {trouble(ns, truth[c]) for c, ns in repeated.items()}
    expect(
        not repeated,
        f"each carrier's counts in {short_name(counts)} should be 1, 2, 3, ... once each (committed records), "
        f"after {story}",
        found={c: shorten(ns) for c, ns in sorted(repeated.items())[:3]},
        hint=COUNT_HINTS[next((k for k in COUNT_HINTS if k in seen), "repeats")],
    )
    last = done.last[1] if done.last else {}
    # The counts are of the grader's flights: the carriers that are wrong, with the app's counts.
    wrong = sorted(c for c in set(truth) | set(last) if last.get(c) != truth.get(c))
    expect(
        done.last is not None and last == dict(truth),
        f"the last count of each carrier in {short_name(counts)} (committed records) after {story}: "
        f"{len(wrong)} of {len(truth)} carriers wrong or missing"
        + (
            f" ({sum(1 for c in wrong if isinstance(last.get(c), int) and last[c] > truth[c])} too high)"
            if wrong
            else ""
        ),
        expected="each carrier of the grader's flights with how many of them it has",
        found={c: last.get(c) for c in wrong[:4]},
        hint="Keep the count in the app's state (a stateful apply), where quixstreams backs it up in a changelog "
        "topic: a count kept in a Python dict or a file of your own is lost with the machine. Write each new count "
        'to COUNTS as {"carrier": ..., "count": ...}, keyed by the carrier.',
    )
    return story + f"; {sum(truth.values())} flights of {len(truth)} carriers (with {FAKE_CARRIER}), counted once each"


COUNT_HINTS = {  # what a carrier's counts show (trouble), and its cause; the first seen is said
    "format": 'Each count must be a whole number: write {"carrier": ..., "count": n} for each new count.',
    "skips": "A carrier's counts skip numbers (or start above 1): each is not the carrier's own count. A "
    "stateful function's state belongs to the record's key, and the flights come keyed by their airport, so "
    "the count is shared by the carriers of an airport. Re-key the flights by carrier first "
    '(sdf.group_by("carrier"), through a repartition topic), then count.',
    "lost": "A carrier's count started again from 1 after the restart, and ended short: the count did not come "
    "back with the app. Keep it in the app's state (a stateful apply: state.get, state.set), which quixstreams "
    "restores from its changelog topic on any machine; a dict, or a file of your own, is gone with the machine.",
    # back to a number it had written, not short at the end: the check cannot tell which of two causes
    "repeats": "A count went back: the restarted app did not go on from where the first one had committed. Either "
    "its count was kept outside the app's state (a dict, a file of its own: gone with the machine), or its "
    "flights since the last commit were counted again after the restart (at-least-once, the default). Keep "
    'the count in the app\'s state and run it with processing_guarantee="exactly-once": its output, its '
    "state's changelog and its offsets then commit together, in one transaction.",
}


def trouble(ns: list, truth: int) -> str:
    """What is wrong with a carrier's counts, not 1, 2, 3, ...: "skips" (a number left out, or a
    first count above 1: not the carrier's own count), "lost" (back to 1 and short of the truth at
    the end: the count was gone after the restart, the flights before it not counted again),
    "format" (a count that is no whole number), else "repeats" (back to a number already written:
    an at-least-once app that had not committed yet starts again from 1 too, and ends right)."""
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in ns):
        return "format"
    if ns[0] != 1 or any(b > a + 1 for a, b in zip(ns, ns[1:])):
        return "skips"
    if any(b == 1 for b in ns[1:]) and ns[-1] < truth:
        return "lost"
    return "repeats"


def shorten(ns: list) -> str:
    """Where a run of counts goes wrong, as text: the first repeat or gap with what comes around it."""
    for i, n in enumerate(ns):
        if n != i + 1:
            return f"{ns[max(0, i - 3) : i + 3]} at position {i + 1} (of {len(ns)})"
    return str(ns[:6])


# --- lab12-q2: a stream-table join, the table written with another partitioner ----------------------


def crc32_partition(key: bytes, partitions: int) -> int:
    """Where librdkafka's default partitioner ("consistent_random") puts a key: CRC32 of it."""
    return zlib.crc32(key) % partitions


def murmur2_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def graders_planes(ctx: Context, tailnums: list[str]) -> dict[str, dict]:
    """The grader's table of planes: most of the flights' planes, each with a seeded number of
    seats (not the dataset's), some left out (their flights join nothing)."""
    known = sorted(tailnums)
    ctx.rng.shuffle(known)
    kept = known[: int(len(known) * 0.9)]
    return {t: {"tailnum": t, "seats": ctx.rng.randrange(20, 450)} for t in sorted(kept)}


def write_with_librdkafka(ctx: Context, topic: str, planes: dict[str, dict]) -> None:
    """The planes, as another team's service writes them: confluent-kafka with librdkafka's default
    partitioner (CRC32 of the key, where kafka-python and quixstreams use murmur2)."""
    from confluent_kafka import Producer

    k = ctx.kafka  # the grader's login (or, in a self-check, the student's), as librdkafka spells it
    servers = k["bootstrap_servers"]
    settings = {
        "bootstrap.servers": servers if isinstance(servers, str) else ",".join(servers),
        "security.protocol": k["security_protocol"],
        "sasl.mechanism": k["sasl_mechanism"],
        "sasl.username": k["sasl_plain_username"],
        "sasl.password": k["sasl_plain_password"],
        "acks": "all",
    }
    producer = Producer(settings)
    for tail, plane in planes.items():
        producer.produce(topic, key=tail.encode(), value=json.dumps(plane).encode())
    left = producer.flush(30)
    expect(
        left == 0,
        f"the grader could not write its planes ({left} left unsent)",
        hint="A problem of the grader's cluster.",
    )


@check("lab12-q2")
def join_finds_every_plane(ctx: Context) -> str:
    """each flight with its plane's seats, the planes' topic partitioned otherwise: every flight once, its seats right"""
    events = [e for e in graders_flights(ctx) if e["tailnum"]]
    planes = graders_planes(ctx, list({e["tailnum"] for e in events}))
    flights_t = graders_topic(ctx, "flights", 3, retention_ms="-1")
    planes_t = graders_topic(ctx, "planes", 3, retention_ms="-1")
    output = graders_topic(ctx, "with-seats", 3, protect=False, retention_ms="-1")
    write_with_librdkafka(ctx, planes_t, planes)
    run = start(ctx, JOIN_SCRIPT, flights_t, planes_t, output, f"state-{ctx.rng.randrange(10**6)}", tag="join")
    # The table first: flights are sent once the app has read every plane (and whatever it wrote
    # to itself from them), as a service that runs all day has long read its table.
    loaded = wait_for(
        lambda: app_groups_at_end(ctx, planes_t),
        timeout_s=APP_START_S,
        every_s=0.5,
        until=bool,
        stop_if=run.ended,
    )
    if not loaded or not loaded.last:
        hint = "The app reads both topics from their first record (lab.streams_app does) and runs until stopped."
        if run.ended():
            raise ended_early(run, "before it had read the planes' topic", hint)
        stop(run.proc)
        raise CheckFailed(
            f"{JOIN_SCRIPT} did not read the planes' topic to its end within {APP_START_S} s",
            found=run.output()[-800:] or "(it printed nothing)",
            hint=hint,
        )
    produce(ctx, flights_t, [(e["origin"], e) for e in events])
    ids = {e["id"] for e in events}
    # Every flight there, or the app ended, or it had read all it reads when asked (the groups
    # first, the output after: what it had committed by then is read).
    found = wait_for(
        lambda: (bool(app_groups_at_end(ctx, flights_t)) or run.proc.poll() is not None, committed(ctx, output)),
        timeout_s=RUN_DEADLINE_S,
        every_s=1,
        until=lambda seen: seen[0] or len(seen[1]) >= len(ids),
    )
    got = found.last[1] if found.last else []
    if run.ended() and len(got) < len(ids):  # it ended by itself before it had written every flight
        raise ended_early(run, "before it had written every flight", "The app runs until it is stopped (app.run()).")
    stop(run.proc)
    by_id: dict[str, list] = {}
    for v in got:
        if isinstance(v, dict) and "id" in v:
            by_id.setdefault(str(v["id"]), []).append(v.get("seats"))
    truth = {e["id"]: planes.get(e["tailnum"], {}).get("seats") for e in events}
    expect(
        set(by_id) == ids and all(len(s) == 1 for s in by_id.values()),
        f"the flights in {short_name(output)}: each of the grader's flights once",
        expected="every flight of the flights' topic, once each",
        found=f"{len(by_id)} flights ({len(ids - set(by_id))} missing, "
        f"{sum(len(s) > 1 for s in by_id.values())} more than once), {len(got)} records",
        hint="Write every flight to OUTPUT, with seats None when its plane is not in the table (a left join).",
    )
    wrong = {i: (by_id[i][0], truth[i]) for i in sorted(ids) if by_id[i][0] != truth[i]}
    missed = sum(1 for i, (s, t) in wrong.items() if s is None and t is not None)
    expect(
        not wrong,
        f"the seats of each flight's plane in {short_name(output)}: {len(wrong)} of {len(ids)} wrong",
        found="; ".join(f"{i}: {s} seats" for i, (s, _) in list(wrong.items())[:3]),  # not the grader's number
        hint=(
            f"{missed} flights found no plane although the table has it: the planes' topic was written with "
            "librdkafka's default partitioner (CRC32 of the key) and the flights keyed by their airport, so a plane's "
            "record and its flights are in partitions of different numbers. Repartition both sides by the tailnum "
            "(group_by) before the join: then both have the same key bytes and one partitioner."
            if missed == len(wrong)
            else f"{len(wrong) - missed} flights have seats other than their plane's: take the seats from the plane's "
            "record on the planes' topic as the grader wrote it (its numbers are its own), not from the dataset."
        ),
    )
    return f"{len(ids)} flights, {len(planes)} planes (written with CRC32), every seat right"


DEMO_FLIGHTS = 60  # the flights of section 4's demo
DEMO_JOINED = 16  # of them, those that find their plane joined as they are (CRC32 and murmur2 agree)


@check("lab12-q2-prediction")
def join_prediction(ctx: Context) -> str:
    """a prediction of how many of 60 flights find their plane without a repartition was written before the demo"""
    predicted = prediction(
        ctx,
        "predicted_joined",
        lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= DEMO_FLIGHTS,
        f"a whole number from 0 to {DEMO_FLIGHTS}",
        f"how many of the demo's {DEMO_FLIGHTS} flights find their plane, joined as the topics are",
    )
    return prediction_feedback(
        "predicted_joined",
        predicted,
        DEMO_JOINED,
        "Without a repartition a flight finds its plane only where both partitioners happen to pick the same "
        "partition: about one in three, with three partitions.",
    )


# --- lab12-q3: departures per airport and hour, on event time, from late reports -----------------

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
# The requirement the notebook states: a report this many minutes late (or less) counts, so the
# grace is at least this; and an hour is final this many minutes after its end, in its airport's
# event time, so the grace is at most that. Any grace between passes; a minute outside fails.
LATE_OK_MIN = 10
FINAL_BY_MIN = 20
LATE_HOURS = 2  # per airport, seeded hours with a report late by LATE_OK_MIN and one after the hour is final
LATE_REAL = 3  # per airport, real departures reported 1 to LATE_OK_MIN minutes late
CLOSING_MIN = 90  # each airport's last report: this long after its last hour, so every hour closes
REPORT_DELAY_S = 120  # a report's Kafka timestamp: up to this long after the latest departure of its airport
SETTLE_S = 12  # for an app whose last hours are there but not all the others: two of quixstreams' commits and more


@dataclass(eq=False)
class Report:
    """One departure as its airport's system reports it: the record the grader sends."""

    departure: dict
    left_ms: int  # its event time: dep_time, in milliseconds
    reported_ms: int = 0  # the record's Kafka timestamp: when it was reported
    airport_at_ms: int = 0  # the latest dep_time of its airport reported by then, its own included

    @property
    def airport(self) -> str:
        return str(self.departure["origin"])

    @property
    def hour(self) -> int:
        return self.left_ms - self.left_ms % HOUR_MS

    @property
    def counts(self) -> bool | None:
        """What the requirement says of it: True, it counts (reported at most LATE_OK_MIN late);
        False, it does not (its hour was final: its airport had reached FINAL_BY_MIN past the
        hour's end); None, the requirement does not say (the grader sends none of these)."""
        if self.airport_at_ms - self.left_ms <= LATE_OK_MIN * MINUTE_MS:
            return True
        if self.airport_at_ms >= self.hour + HOUR_MS + FINAL_BY_MIN * MINUTE_MS:
            return False
        return None


def ms_of(departure: dict) -> int:
    return int(when(departure).replace(tzinfo=UTC).timestamp() * 1000)


def late_reports(ctx: Context) -> list[Report]:
    """The grader's day of departures (graders_flights) as the airports report them, in the order
    sent. Each airport's come in the order they left, but for:
    - LATE_HOURS seeded hours h: a made-up departure of h's last minute, reported right after a
      made-up one LATE_OK_MIN - 1 minutes past h's end (LATE_OK_MIN late: it counts, and a grace a
      minute shorter drops it); and one of h's departures reported right after a made-up one
      FINAL_BY_MIN past h's end (after h is final: it does not count, a grace a minute longer
      counts it);
    - LATE_REAL seeded departures reported 1 to LATE_OK_MIN minutes late;
    - a last made-up departure CLOSING_MIN after the airport's last hour, which closes them all.
    A report's Kafka timestamp is when it was reported: up to REPORT_DELAY_S after the latest
    departure of its airport so far, so a window on the records' timestamps counts other hours."""
    events = graders_flights(ctx)
    day = events[0]["id"][:10]
    numbers = iter(ctx.rng.sample(range(100, 1000), 8 * len({e["origin"] for e in events})))  # not graders_flights'

    def made_up(airport: str, at_ms: int) -> Report:
        departure = {
            "id": f"{day} {FAKE_CARRIER}{next(numbers)} {airport}",
            "carrier": FAKE_CARRIER,
            "origin": airport,
            "dest": ctx.rng.choice(["ATL", "BOS", "MIA", "ORD"]),
            "tailnum": None,
            "dep_delay": ctx.rng.randrange(-10, 60),
            "dep_time": iso(datetime.fromtimestamp(at_ms / 1000, UTC)),
        }
        return Report(departure, at_ms)

    sent: list[Report] = []
    for airport in sorted({e["origin"] for e in events}):
        stream = [Report(e, ms_of(e)) for e in events if e["origin"] == airport]
        hours = sorted({r.hour for r in stream})
        after: dict[int, Report] = {}  # id(anchor) -> the late report sent right after it
        anchors = []
        for h in sorted(ctx.rng.sample(hours, min(LATE_HOURS, len(hours)))):
            end = h + HOUR_MS
            anchor = made_up(airport, end + (LATE_OK_MIN - 1) * MINUTE_MS)
            after[id(anchor)] = made_up(airport, end - MINUTE_MS)
            anchors.append(anchor)
            anchor = made_up(airport, end + FINAL_BY_MIN * MINUTE_MS)
            after[id(anchor)] = ctx.rng.choice([r for r in stream if r.hour == h])
            anchors.append(anchor)
        moved = {id(r) for r in after.values()}
        order: list[Report] = []
        # in the order they left (an anchor after the departures of its minute), each late one after its anchor
        for r in sorted([r for r in stream if id(r) not in moved] + anchors, key=lambda r: r.left_ms):
            order += [r, after[id(r)]] if id(r) in after else [r]
        real = [r for r in order if r.departure["carrier"] != FAKE_CARRIER and id(r) not in moved]
        for r in ctx.rng.sample(real, min(LATE_REAL, len(real))):
            order.remove(r)
            latest = r.left_ms + ctx.rng.randint(1, LATE_OK_MIN) * MINUTE_MS
            at = top = 0
            for i, other in enumerate(order):  # after the last report of its airport up to `latest`
                top = max(top, other.left_ms)
                if top > latest:
                    break
                at = i + 1
            order.insert(at, r)
        order.append(made_up(airport, max(r.hour for r in order) + HOUR_MS + CLOSING_MIN * MINUTE_MS))
        top = reported = 0
        for r in order:
            top = max(top, r.left_ms)
            r.airport_at_ms = top
            reported = max(reported, top + ctx.rng.randrange(REPORT_DELAY_S + 1) * 1000)
            r.reported_ms = reported
        sent += order
    return sorted(sent, key=lambda r: r.reported_ms)  # stable: each airport's order is kept


def closed_hours(records: list[tuple[str, int]], grace_ms: int) -> dict[tuple[str, int], int]:
    """(key, hour start) -> count: what quixstreams' tumbling_window(1 hour, grace_ms).count()
    .final() writes for (key, time in ms) records in this order. Per key, an hour closes once a
    record at or past its end + grace_ms comes; a record of a closed hour is dropped."""
    latest: dict[str, int] = {}
    open_: dict[str, dict[int, int]] = {}
    out: dict[tuple[str, int], int] = {}
    for key, t in records:
        now = latest[key] = max(latest.get(key, t), t)
        hours = open_.setdefault(key, {})
        start = t - t % HOUR_MS
        if start + HOUR_MS > now - grace_ms:
            hours[start] = hours.get(start, 0) + 1
        for s in sorted(s for s in hours if s + HOUR_MS <= now - grace_ms):
            out[key, s] = hours.pop(s)
    return out


def required_hours(reports: list[Report]) -> dict[tuple[str, int], int]:
    """(airport, hour start) -> the departures that count, of every hour its airport's last
    report closes; checked against closed_hours at both ends of the grace the requirement allows
    (the grader's own data must not leave the answer open)."""
    last: dict[str, int] = {}
    for r in reports:
        last[r.airport] = max(last.get(r.airport, 0), r.airport_at_ms)
    counted = Counter((r.airport, r.hour) for r in reports if r.counts)
    truth = {k: n for k, n in counted.items() if k[1] + HOUR_MS + FINAL_BY_MIN * MINUTE_MS <= last[k[0]]}
    by_event = [(r.airport, r.left_ms) for r in reports]
    unsaid = [r.departure["id"] for r in reports if r.counts is None]
    if unsaid or any(closed_hours(by_event, g * MINUTE_MS) != truth for g in (LATE_OK_MIN, FINAL_BY_MIN)):
        raise RuntimeError(f"the grader's late reports leave the grace open (a bug of the grader's): {unsaid[:3]}")
    return truth


def produce_reports(ctx: Context, topic: str, reports: list[Report]) -> None:
    """Each report keyed by its airport, its value the departure, its timestamp when it was reported."""
    from kafka import KafkaProducer

    with KafkaProducer(**ctx.kafka, acks="all") as producer:
        for r in reports:
            producer.send(
                topic, key=r.airport.encode(), value=json.dumps(r.departure).encode(), timestamp_ms=r.reported_ms
            )
        producer.flush(30)


def hours_written(ctx: Context, topic: str) -> tuple[dict[tuple[str, int], list], list[str]]:
    """What the app wrote to `topic` (committed records): (airport, hour start) -> its counts in
    the order written, the airport from the key (plain text, or a JSON string), the hour and its
    count from the value's "start" and "value"; and the records not like that."""
    found: dict[tuple[str, int], list] = {}
    unreadable = []
    for r in read_all(ctx, short_name(topic), isolation_level="read_committed"):
        airport = (r.key or b"").decode(errors="replace")
        if airport.startswith('"'):
            try:
                airport = str(json.loads(airport))
            except ValueError:
                pass
        try:
            value = json.loads(r.value)
        except (TypeError, ValueError):
            value = None
        numbers = isinstance(value, dict) and all(
            isinstance(value.get(k), int) and not isinstance(value.get(k), bool) for k in ("start", "value")
        )
        if not numbers or not airport:
            unreadable.append(f"key {r.key!r}, value {(r.value or b'')[:100]!r}")
            continue
        found.setdefault((airport, value["start"]), []).append(value["value"])
    return found, unreadable


def hour_name(key: tuple[str, int]) -> str:
    return f"{key[0]} {datetime.fromtimestamp(key[1] / 1000, UTC):%Y-%m-%d %H:%M}"


HOURS_HINTS = {  # the cause the counts look like (closest_cause), and what to do
    "record time": "The hours look counted on the records' Kafka timestamps, when each departure was reported: "
    "a late report then counts in the hour it was reported, and is never late. Take each departure's time from "
    "its dep_time, in milliseconds (a timestamp_extractor on the input topic, as in section 5's demo).",
    "too short": f"Reports up to {LATE_OK_MIN} minutes late were dropped: the grace is too short. A departure of "
    f"07:59 reported after one of 08:{LATE_OK_MIN - 1:02d} must still find its hour open.",
    "too long": f"Reports that came after their hour was final were counted: the grace is too long. Once a departure "
    f"{FINAL_BY_MIN} minutes or more past an hour's end has come, the hour is written, and a later report of it "
    "is dropped.",
    "other": "Count each airport's departures per hour of their dep_time (tumbling windows on event time), with a "
    "grace that meets both requirements, and write each hour once, as .final() gives it.",
}


def closest_cause(found: dict, truth: dict, reports: list[Report]) -> str:
    """Which known mistake the app's hours are closest to (by the hours they differ in), of the
    grader's simulations of them on its own reports: windows on the records' timestamps, graces
    too short or too long; "other" when none is closer than the right answer."""
    by_event = [(r.airport, r.left_ms) for r in reports]
    by_record = [(r.airport, r.reported_ms) for r in reports]
    candidates = [("record time", closed_hours(by_record, g * MINUTE_MS)) for g in (0, LATE_OK_MIN, FINAL_BY_MIN, 30)]
    candidates += [("too short", closed_hours(by_event, g * MINUTE_MS)) for g in (0, 1, 5, LATE_OK_MIN - 1)]
    candidates += [("too long", closed_hours(by_event, g * MINUTE_MS)) for g in (FINAL_BY_MIN + 1, 30, 45, 60)]

    def apart(a: dict, b: dict) -> int:
        return sum(a.get(k) != b.get(k) for k in set(a) | set(b))

    cause, hours = min(candidates, key=lambda c: apart(found, c[1]))
    return cause if apart(found, hours) < apart(found, truth) else "other"


@check("lab12-q3")
def hours_on_event_time(ctx: Context) -> str:
    """departures per airport and hour on event time, from reports late and too late: each hour once, final, its count right"""
    reports = late_reports(ctx)
    truth = required_hours(reports)
    # One partition each (and so one for the app's changelog): each airport's reports are in order in
    # any partition, and the lab's cells and self-checks come close to a namespace's 100 partitions.
    departures = graders_topic(ctx, "departures", 1, retention_ms="-1")  # timestamps of 2013: kept for ever
    output = graders_topic(ctx, "hours", 1, protect=False, retention_ms="-1")
    produce_reports(ctx, departures, reports)
    run = start(ctx, HOURS_SCRIPT, departures, output, f"state-{ctx.rng.randrange(10**6)}", tag="hours")
    once = {k: [n] for k, n in truth.items()}
    # each airport's last hour: only its last report, which comes after every other of the airport, closes it
    last_hours = {max(k for k in truth if k[0] == airport) for airport, _ in truth}

    def seen() -> tuple[bool, tuple[dict, list]]:
        # the groups first, the output after: what the app had committed by then is read
        return bool(app_groups_at_end(ctx, departures)), hours_written(ctx, output)

    # Until the app has read all the reports and committed what it wrote of them, or each airport's
    # last hour is there (an app that writes each hour once, when it closes, has then written all it
    # will); then, if the hours are not right, until they are or the app is at the end, SETTLE_S more
    # (a commit or two: what a group that commits has left to write; an app without one is not waited for).
    done = wait_for(
        seen, timeout_s=APP_START_S, every_s=1, until=lambda s: s[0] or last_hours <= set(s[1][0]), stop_if=run.ended
    )
    if done and not done.last[0] and done.last[1][0] != once:
        done = wait_for(seen, timeout_s=SETTLE_S, every_s=1, until=lambda s: s[0] or s[1][0] == once, stop_if=run.ended)
    at_end, (found, unreadable) = done.last if done.last else (False, ({}, []))
    if run.ended() and found != once:
        raise ended_early(
            run, "before it had written every hour", "The app runs until it is stopped (app.run()), as a service does."
        )
    stop(run.proc)
    hint_format = (
        'Write each hour with to_topic(app.topic(HOURS, key_serializer="str")) after .final(): keyed by the airport, '
        '{"start": ..., "end": ..., "value": <departures>} as .final() gives it.'
    )
    expect(
        bool(found) or bool(unreadable),
        f"{HOURS_SCRIPT} wrote no hour to {short_name(output)} "
        + ("after reading every report" if at_end else f"within {APP_START_S} s (it had not read every report)"),
        found=run.output()[-600:] or "(it printed nothing)",
        hint=hint_format + " An hour is written when it closes, on the time the window is given.",
    )
    expect(
        not unreadable,
        f"{len(unreadable)} of the records in {short_name(output)} are not an airport's hour",
        expected='keyed by the airport, a value like {"start": <ms>, "end": <ms>, "value": <departures>}',
        found=unreadable[:2],
        hint=hint_format,
    )
    twice = {k: ns for k, ns in found.items() if len(ns) > 1}
    expect(
        not twice,
        f"{len(twice)} of the {len(found)} airport-hours in {short_name(output)} were written more than once",
        found={hour_name(k): ns[:5] for k, ns in sorted(twice.items())[:3]},
        hint="Each update of a window was written. Write each hour once, when it is final: .final(), not .current().",
    )
    last = {k: ns[-1] for k, ns in found.items()}
    wrong = sorted(k for k in set(truth) | set(last) if last.get(k) != truth.get(k))
    expect(
        not wrong,
        f"the departures of each airport-hour in {short_name(output)}: {len(wrong)} of {len(truth)} wrong or "
        f"missing ({sum(k not in truth for k in wrong)} hours written that have none)",
        expected="each hour of the grader's departures with those that count",
        found={hour_name(k): last.get(k, "missing") for k in wrong[:4]},  # the app's numbers, not the grader's
        hint=HOURS_HINTS[closest_cause(last, truth, reports)],
    )
    late = sum(1 for r in reports if r.counts and r.airport_at_ms > r.left_ms)
    too_late = sum(1 for r in reports if r.counts is False)
    return (
        f"{len(reports)} reports of {len({r.airport for r in reports})} airports, timestamped when reported: "
        f"{late} late by up to {LATE_OK_MIN} minutes counted, {too_late} after their hour was final left out; "
        f"{len(truth)} airport-hours, each once and right"
    )
