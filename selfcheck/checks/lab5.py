"""Lab 5, seek and delivery guarantees: replay by time, a prediction of what a retry leaves,
a consumer that survives being killed, and a transactional read-process-write job (the grader
kills the last two, at seeded moments)."""

from __future__ import annotations

import json
from collections import Counter

from cluster.safe_files import list_dir, remove

from . import CheckFailed, Context, check, expect, expect_equal, prediction, prediction_feedback
from .kafka_state import committed_offsets, end_offsets, graders_topic, read_all, short_name
from .scripts import CRASHED, ended_early, read_student_file, start, wait

DEPARTURES = "departures"
STATS_SCRIPT, CHECKPOINT, STATS_SOURCE = "stats_consumer.py", "checkpoint.json", "stats-source"
IDLE_S = "6"  # a generous quiet time: a loaded machine can take seconds to a first record
CRASH_RUNS = 4  # runs that are killed on purpose before the last, clean one
RETRIES, PRODUCERS = "retries", ("plain", "idempotent")
RETRY_LESSON = {"plain": 2, "idempotent": 1}  # what one lost answer leaves on the topic
ALERTS_SCRIPT, ALERT_DELAY = "alerts_job.py", 60


def stats_of(records) -> dict:
    """Per departure airport, the distinct flights on the topic and the sum of their delays (a
    cancelled flight, without dep_delay, counts as 0): what the consumer of lab5-q3 must end with.
    From the topic as the grader found it, its own flights included, not from the dataset."""
    flights: dict = {}
    for r in records:
        try:
            f = json.loads(r.value)
        except (TypeError, ValueError, RecursionError):
            continue
        if isinstance(f, dict) and isinstance(f.get("id"), str):
            flights.setdefault(f["id"], f)
    origins = sorted({f.get("origin") for f in flights.values()}, key=str)
    return {
        o: {
            "flights": sum(1 for f in flights.values() if f.get("origin") == o),
            "delay_sum": sum(f.get("dep_delay") or 0 for f in flights.values() if f.get("origin") == o),
        }
        for o in origins
    }


def short_of_the_end(committed: dict, ends: dict) -> str:
    """A group's committed offsets, and which partitions fall short of (or past) their end: the
    group's own values, not the grader's ends (those count the grader's records)."""
    off = sorted(p for p in ends if committed.get(p) != ends[p])
    return f"{committed}: partitions {off} not at their end" if off else str(committed)


@check("lab5-q1")
def replay_by_time(ctx: Context) -> None:
    """replay(topic, start_ms, end_ms) returns exactly the events whose timestamps fall in the window, on a
    topic of the grader's own (events and times nobody could know in advance)"""
    topic, events = graders_departures(ctx)
    stamps = sorted({ts for _, ts, _ in events})
    on_topic = {fid for _, _, fid in events}
    last_of_2 = max(ts for p, ts, _ in events if p == 2)
    # One window whose ends are timestamps records carry (the start is in, the end is out), and one
    # that starts after partition 2's last record (offsets_for_times answers None) and ends after
    # every record (each partition stops at its end).
    middle = [ts for ts in stamps if ts > last_of_2]
    i = ctx.rng.randrange(0, len(middle) // 3)
    windows = [
        (middle[i], middle[i + ctx.rng.randrange(len(middle) // 4, len(middle) // 2)]),
        (ctx.rng.choice(middle[len(middle) // 2 :]), stamps[-1] + 60_000),
    ]
    for start_ms, end_ms in windows:
        want = sorted(fid for _, ts, fid in events if start_ms <= ts < end_ms)
        got = ctx.sub.value(f"sorted(replay({topic!r}, {start_ms}, {end_ms}))")
        strangers = sorted(set(got) - on_topic, key=str) if isinstance(got, list) else []
        # The window's ids are the grader's events, the answer itself: the message counts what is
        # missing and shows only ids the notebook returned that do not belong.
        listed = isinstance(got, list) and all(isinstance(i, str) for i in got)
        missing = len(set(want) - set(got)) if listed else len(want)
        extra = sorted(set(got) - set(want)) if listed else []
        twice = len(got) - len(set(got)) if listed else 0
        expect(
            got == want,
            f"the ids replay({topic!r}, {start_ms}, {end_ms}) returned: {missing} of the window's missing, "
            f"{len(extra)} not in it, {twice} twice",
            expected="the id of every event whose timestamp is in [start_ms, end_ms), each once",
            found=f"{len(got)} ids" + (f"; not in the window, e.g. {extra[:3]}" if extra else "") if listed else got,
            hint=(
                f"{len(strangers)} of them are not on the topic replay was given (e.g. {strangers[0]!r}): "
                "read the events from the topic passed as its first argument."
                if strangers
                else "Start each partition at its first record at or after start_ms (offsets_for_times; it "
                "answers None for a partition with no record that late), and stop at its first record "
                "at or after end_ms or at its end: end_ms is not in the window."
            ),
        )


def graders_departures(ctx: Context) -> tuple[str, list[tuple[int, int, str]]]:
    """A protected topic of three partitions with seeded departure events, timestamps in order
    within each partition (several records share some); partition 2 holds only early ones.
    (its name, [(partition, timestamp, id)])."""
    from kafka import KafkaProducer

    topic = graders_topic(ctx, "replay-check", 3, retention_ms="-1")
    base = 1357016400000 + ctx.rng.randrange(0, 300) * 86_400_000  # a seeded day of 2013
    numbers = ctx.rng.sample(range(1000, 10000), 230)
    events, now = [], {0: base, 1: base, 2: base}
    for n, number in enumerate(numbers):
        p = 2 if n < 30 else n % 2
        now[p] += ctx.rng.choice([0, 60_000, 60_000, 120_000, 300_000])
        events.append(
            (p, now[p], f"2013-{ctx.rng.randrange(1, 13):02d}-01 ZZ{number} {ctx.rng.choice(['EWR', 'JFK', 'LGA'])}")
        )
    producer = KafkaProducer(**ctx.kafka)
    for p, ts, fid in events:
        event = {"id": fid, "carrier": "ZZ", "origin": fid[-3:], "dest": "ORD", "dep_delay": ctx.rng.randrange(-10, 90)}
        producer.send(topic, key=fid.encode(), value=json.dumps(event).encode(), partition=p, timestamp_ms=ts)
    producer.flush()
    producer.close()
    return topic, events


@check("lab5-q2")
def predicted_the_retry(ctx: Context) -> str:
    """a prediction of what a retry leaves was made, and the demo left on the topic what it should"""
    copies = Counter((r.key or b"").decode(errors="replace") for r in read_all(ctx, RETRIES) if r.key)
    found = {name: copies.get(name, 0) for name in PRODUCERS}
    expect(
        all(found.values()),
        f"{ctx.topic(RETRIES)} should hold the demo's records, keyed by producer",
        expected={name: "at least 1" for name in PRODUCERS},
        found=dict(copies),
        hint="Run the demo cell (after your prediction) and leave it as it is.",
    )
    expect_equal(
        found,
        RETRY_LESSON,
        f"copies of each record after one lost answer, on {ctx.topic(RETRIES)}",
        hint="The demo did not show what it should: run it as given, with a fresh topic (its first line).",
    )
    predicted = prediction(
        ctx,
        "predicted_copies",
        lambda v: (
            isinstance(v, dict) and all(isinstance(v.get(n), int) and not isinstance(v.get(n), bool) for n in PRODUCERS)
        ),
        {n: "a number" for n in PRODUCERS},
        "a whole number of copies for each producer",
    )
    return prediction_feedback(
        "predicted_copies",
        {n: predicted[n] for n in PRODUCERS},
        found,
        "Think about what the broker has already written when the answer is lost, and "
        "what a producer id and sequence number let it recognise.",
    )


def read_checkpoint(ctx: Context) -> dict:
    text = read_student_file(ctx.workdir, CHECKPOINT)
    expect(text is not None, f"{STATS_SCRIPT} left no {CHECKPOINT}", hint="Save the checkpoint after every batch.")
    assert text is not None  # expect() raised otherwise
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise CheckFailed(
            f"{CHECKPOINT} is not valid JSON after the last run",
            hint="A crash mid-write leaves half a file: write the checkpoint elsewhere first "
            "and swap it in atomically (os.replace).",
        ) from None


@check("lab5-q3")
def survives_crashes(ctx: Context) -> str:
    """killed again and again, even mid-checkpoint, the consumer ends with exact statistics"""
    for old in list_dir(ctx.workdir) or []:
        if old.startswith("checkpoint"):
            remove(ctx.workdir, old)
    add_flights_of_our_own(ctx, STATS_SOURCE)  # so statistics computed from the dataset are wrong
    truth = stats_of(read_all(ctx, STATS_SOURCE))
    # First two runs die halfway through their 2nd and 3rd checkpoint writes (in seeded order):
    # one lands between two writes of the same batch, one between batches, so a consumer that
    # saves anything between two checkpoints is caught. Then crashes at seeded moments.
    first = ctx.rng.choice([2, 3])
    plan = [("--crash-on-write", f"checkpoint:{first}"), ("--crash-on-write", f"checkpoint:{5 - first}")]
    plan += [("--crash-after", f"{ctx.rng.uniform(0.3, 1.5):.2f}") for _ in range(CRASH_RUNS - 2)]
    crashes, history = 0, []
    for i, (kind, arg) in enumerate(plan + [("clean", "")]):
        run = start(
            ctx,
            STATS_SCRIPT,
            IDLE_S,
            tag=f"run{i}",
            crash_on_write=arg if kind == "--crash-on-write" else "",
            crash_after=float(arg) if kind == "--crash-after" else None,
        )
        code = wait(run)
        history.append(f"run {i + 1} ({kind} {arg}".strip() + f"): exit {code}")
        if kind == "--crash-on-write" and code == 0:
            raise CheckFailed(
                f"run {i + 1} of {STATS_SCRIPT} was meant to die while writing checkpoint "
                f"#{arg.split(':')[1]}, but it ended by itself",
                found="; ".join(history),
                hint="Save the checkpoint to a file whose name starts with 'checkpoint' after every "
                "batch of at most 50 records, and let the grader's harness see it "
                "(plain open() or any other ordinary file API).",
            )
        if code == CRASHED:
            crashes += 1
            continue
        if code != 0:
            raise ended_early(
                run,
                f"on restart after {crashes} crash{'es' if crashes != 1 else ''}" if crashes else "",
                found="; ".join(history),
                hint="After a crash the checkpoint must still be readable: write it to a "
                "temporary file and os.replace() it over the old one."
                if crashes
                else f"Run it yourself (python {STATS_SCRIPT} 3) to see the whole error.",
            )
    expect(
        crashes > 0,
        "the grader meant to crash the consumer at least once",
        found="; ".join(history),
        hint="The grader kills the consumer around its checkpoint writes: write a checkpoint after "
        "every batch, and keep batches small (at most 50 records).",
    )
    stats = read_checkpoint(ctx).get("stats")
    shaped = isinstance(stats, dict) and all(
        isinstance(s, dict) and {"flights", "delay_sum"} <= set(s) for s in stats.values()
    )
    expect(
        shaped,
        f'the statistics in {CHECKPOINT} (state["stats"]) should give each airport its "flights" and "delay_sum"',
        expected='{"EWR": {"flights": ..., "delay_sum": ...}, ...}',
        found=next(iter(stats.items()), None) if isinstance(stats, dict) else stats,
        hint="Name the two numbers as the text does; the grader compares them with what the topic holds.",
    )
    assert isinstance(stats, dict)  # expect() raised otherwise
    found_n = sum(s.get("flights", 0) for s in stats.values())
    want_n = sum(s["flights"] for s in truth.values())
    from cluster.lab import load_flights

    dataset = {
        o: {
            "flights": sum(f["origin"] == o for f in day),
            "delay_sum": sum(f["dep_delay"] or 0 for f in day if f["origin"] == o),
        }
        for day in [load_flights(day=1)]
        for o in {f["origin"] for f in day}
    }
    hint = (
        "These are the public dataset's statistics, not the topic's: the grader added flights of its own to "
        f"{STATS_SOURCE}. Count the records the consumer reads."
        if stats == dataset
        else "Too many flights: repeated flights counted twice (keep the ids you have seen), or records "
        "replayed after a crash counted again."
        if found_n > want_n
        else "Too few flights: some records' offsets were saved before the records were counted, so a crash "
        "in between lost them."
        if found_n < want_n
        else "The right number of flights, but wrong sums: check how cancelled flights (no dep_delay) count."
    )
    # The truth counts the grader's own flights: the message names the airports that are wrong,
    # with the checkpoint's values, and says whether there are too many flights or too few.
    wrong = sorted((o for o in set(truth) | set(stats) if stats.get(o) != truth.get(o)), key=str)
    expect(
        stats == truth,
        f"the statistics in {CHECKPOINT} after {crashes} crashes ({'; '.join(history)}): {len(wrong)} airport(s) "
        f"wrong, {found_n} flights in all ({'more than' if found_n > want_n else 'fewer than' if found_n < want_n else 'as many as'} "
        "the topic holds)",
        expected="per airport of the topic (the grader's flights included), its distinct flights and the sum of "
        "their delays",
        found={o: stats.get(o) for o in wrong[:3]},
        hint=hint + " Save stats, offsets and seen ids together, in one atomic write.",
    )
    return "; ".join(history)


def add_flights_of_our_own(ctx: Context, topic: str = DEPARTURES) -> None:
    """Late and on-time flights the public dataset does not have, so statistics or alerts
    computed from it (instead of from the topic) are wrong."""
    from kafka import KafkaProducer

    producer = KafkaProducer(**ctx.kafka)
    partitions = producer.partitions_for(ctx.topic(topic))  # spread over all of them, whatever their number
    if not partitions:
        producer.close()
        raise CheckFailed(f"{ctx.topic(topic)} does not exist", hint="Run the notebook's cell that fills it.")
    numbers = ctx.rng.sample(range(1000, 10000), 8)  # distinct: a repeated id would look like a duplicate
    for i in range(8):
        fid = f"2013-01-01 ZZ{numbers[i]} {ctx.rng.choice(['EWR', 'JFK', 'LGA'])}"
        delay = ctx.rng.randrange(ALERT_DELAY, 400) if i % 2 else ctx.rng.randrange(-10, ALERT_DELAY)
        if i < 2:  # the boundary itself: "60 or more" is not "more than 60" (the dataset has no 60)
            delay = ALERT_DELAY - 1 + i
        event = {"id": fid, "carrier": "ZZ", "origin": fid[-3:], "dest": "ORD", "dep_delay": delay}
        producer.send(
            ctx.topic(topic), key=fid.encode(), value=json.dumps(event).encode(), partition=i % len(partitions)
        )
    producer.flush()
    producer.close()


def alert_id(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        alert = json.loads(value)
    except (TypeError, ValueError, RecursionError):
        return None
    return alert.get("id") if isinstance(alert, dict) else None


@check("lab5-q4")
def alerts_exactly_once(ctx: Context) -> str:
    """killed after a send and after a commit, the job still writes every alert exactly once"""
    add_flights_of_our_own(ctx)
    job = short_name(graders_topic(ctx, "alerts", 3, protect=False))
    late = sorted(
        json.loads(r.value)["id"]
        for r in read_all(ctx, DEPARTURES)
        if (json.loads(r.value).get("dep_delay") or 0) >= ALERT_DELAY
    )
    plan = [("--crash-on-send", ctx.rng.randrange(3, 30)), ("--crash-after-commit", 1), ("clean", 0)]
    history = []
    for i, (kind, n) in enumerate(plan):
        run = start(ctx, ALERTS_SCRIPT, job, IDLE_S, tag=f"alerts{i}", harness=[kind, str(n)] if n else [])
        code = wait(run)
        history.append(f"run {i + 1} ({kind}{' ' + str(n) if n else ''}): exit {code}")
        if kind != "clean" and code not in (CRASHED, 0):
            raise ended_early(
                run,
                f"before the grader's planned crash ({kind} {n})",
                found="; ".join(history),
                hint=f"Run it yourself (python {ALERTS_SCRIPT} alerts 2) to see the whole error.",
            )
        if kind != "clean" and code != CRASHED:
            raise CheckFailed(
                f"run {i + 1} of {ALERTS_SCRIPT} was meant to be killed ({kind} {n}) but ended by itself",
                found="; ".join(history),
                hint="Send the alerts with KafkaProducer.send and commit with commit_transaction(), "
                "batch by batch, so the grader's harness sees them.",
            )
        if kind == "clean" and code != 0:
            raise ended_early(
                run,
                "on restart after two crashes",
                found="; ".join(history),
                hint="A restarted job calls init_transactions() first; it aborts what the crashed "
                "one left open. Run the observe cell to see the whole error.",
            )
    found = sorted((alert_id(r.value) for r in read_all(ctx, job, isolation_level="read_committed")), key=str)
    twice = sorted({i for i in found if found.count(i) > 1}, key=str)
    missing = sorted(set(late) - set(found))
    extra = sorted(set(found) - set(late), key=str)
    committed, ends = committed_offsets(ctx, job, DEPARTURES), end_offsets(ctx, DEPARTURES)
    stopped_early = missing and committed != ends
    hint = (
        "Some alerts are there twice: the records of a killed run stayed visible (were they sent in a "
        "transaction?), or the input offsets were committed outside it (send_offsets_to_transaction "
        "commits them with the alerts)."
        if twice
        else f"The last run stopped before the end of departures (committed {short_of_the_end(committed, ends)}): "
        f"it was given IDLE_SECONDS={IDLE_S}; does it stop only after that long without a record?"
        if stopped_early
        else "Some alerts are missing: are the offsets committed only with the alerts of their batch, and "
        "are alerts computed from the records read from departures?"
        if missing
        else f'Only flights with dep_delay >= {ALERT_DELAY} get an alert, a JSON object with their "id".'
    )
    # The late flights are partly the grader's own: missing ones are counted, not named.
    ours = sum(1 for i in missing if " ZZ" in i)
    expect(
        not (twice or missing or extra),
        f"committed alerts on {ctx.topic(job)} after {'; '.join(history)}",
        expected=f"one alert per flight of departures with dep_delay >= {ALERT_DELAY} (the grader's included), "
        "each once",
        found=f"{len(found)} alerts; twice: {len(twice)} {twice[:3]}; missing: {len(missing)} "
        f"({ours} of them the grader's flights); not late: {len(extra)} {extra[:3]}",
        hint=hint,
    )
    expect(
        committed == ends,
        f"offsets of {ctx.group(job)} on {ctx.topic(DEPARTURES)} after the last run",
        expected="the end offset of every partition (the grader's flights included)",
        found=short_of_the_end(committed, ends),
        hint="Commit the next offset of every partition read, with send_offsets_to_transaction.",
    )
    return "; ".join(history)
