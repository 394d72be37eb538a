"""Lab 5, seek and delivery guarantees: replay by time, the idempotent producer, and a
consumer that survives being killed (the grader kills it, at seeded moments)."""

from __future__ import annotations

import json

from kafka import TopicPartition

from . import CheckFailed, Context, check, expect, expect_equal
from .kafka_state import describe_topic, read_all
from .scripts import CRASHED, read_student_file, start, wait

DEPARTURES = "departures"
SOURCE = "stats-source"
STATS_SCRIPT, CHECKPOINT = "stats_consumer.py", "checkpoint.json"
IDLE_S = "3"
CRASH_RUNS = 4          # runs that are killed on purpose before the last, clean one


def flight_id(f: dict) -> str:
    """The id the notebook gives a flight (year-month-day carrier flight origin)."""
    return f"{f['year']}-{f['month']:02d}-{f['day']:02d} {f['carrier']}{f['flight']} {f['origin']}"


def true_stats() -> dict:
    from cluster.lab import load_flights

    flights = load_flights(day=1)
    origins = sorted({f["origin"] for f in flights})
    return {o: {"flights": sum(f["origin"] == o for f in flights),
                "delay_sum": sum(f["dep_delay"] for f in flights if f["origin"] == o and f["dep_delay"])}
            for o in origins}


@check("lab5-q1")
def replay_by_time(ctx: Context) -> None:
    """replay(start_ms, end_ms) returns exactly the flights whose timestamps fall in the window"""
    records = read_all(ctx, DEPARTURES)
    expect(len(records) > 0, f"{ctx.topic(DEPARTURES)} is empty", hint="Run the notebook's first cells.")
    stamps = sorted(r.timestamp for r in records)
    for _ in range(2):
        i = ctx.rng.randrange(0, len(stamps) - 50)
        start_ms, end_ms = stamps[i], stamps[i + ctx.rng.randrange(10, 50)]
        want = sorted(json.loads(r.value)["id"] for r in records if start_ms <= r.timestamp < end_ms)
        got = ctx.sub.value(f"sorted(replay({start_ms}, {end_ms}))")
        expect_equal(got, want, f"the flight ids of replay({start_ms}, {end_ms})",
                     hint="offsets_for_times({tp: start_ms}) gives the first offset at or after start_ms in "
                          "each partition; seek there and read until a timestamp reaches end_ms (or the end).")


@check("lab5-q2")
def idempotent_producer(ctx: Context) -> None:
    """the stats source was written by an idempotent producer, duplicates and all"""
    meta = describe_topic(ctx, SOURCE)
    tps = [TopicPartition(ctx.topic(SOURCE), p["partition_index"]) for p in meta["partitions"]]
    states = ctx.admin.describe_producers(tps)
    missing = [tp.partition for tp in tps if not states[tp].active_producers]
    expect(not missing, "every partition of the stats source should have an idempotent producer's state",
           expected="a producer id with sequence numbers", found=f"none on partitions {missing}",
           hint="KafkaProducer(..., enable_idempotence=True, acks='all'); acks=1 or retries=0 turns it off.")
    from cluster.lab import load_flights

    flights = load_flights(day=1)
    want = len(flights) + len(flights[::10])   # every tenth flight is sent twice, on purpose
    expect_equal(len(read_all(ctx, SOURCE)), want, f"messages on {ctx.topic(SOURCE)}",
                 hint="Send every flight once, and every tenth flight (flights[::10]) a second time.")


def read_checkpoint(ctx: Context) -> dict:
    text = read_student_file(ctx.workdir / CHECKPOINT)
    expect(text is not None, f"{STATS_SCRIPT} left no {CHECKPOINT}", hint="Save the checkpoint after every batch.")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise CheckFailed(f"{CHECKPOINT} is not valid JSON after the last run",
                          hint="Write the checkpoint to a temporary file, then os.replace() it.") from None


@check("lab5-q3")
def survives_crashes(ctx: Context) -> str:
    """killed again and again, even mid-checkpoint, the consumer ends with exact statistics"""
    for old in ctx.workdir.glob("checkpoint*"):
        old.unlink()
    # First two runs die halfway through their 2nd and 3rd checkpoint writes (in seeded order):
    # one lands between two writes of the same batch, one between batches, so a consumer that
    # saves anything between two checkpoints is caught. Then crashes at seeded moments.
    first = ctx.rng.choice([2, 3])
    plan = [("--crash-on-write", f"checkpoint:{first}"), ("--crash-on-write", f"checkpoint:{5 - first}")]
    plan += [("--crash-after", f"{ctx.rng.uniform(0.3, 1.5):.2f}") for _ in range(CRASH_RUNS - 2)]
    crashes, history = 0, []
    for i, (kind, arg) in enumerate(plan + [("clean", "")]):
        run = start(ctx, STATS_SCRIPT, IDLE_S, tag=f"run{i}",
                    crash_on_write=arg if kind == "--crash-on-write" else "",
                    crash_after=float(arg) if kind == "--crash-after" else None)
        code = wait(run)
        history.append(f"run {i + 1} ({kind} {arg}".strip() + f"): exit {code}")
        if kind == "--crash-on-write" and code == 0:
            raise CheckFailed(f"run {i + 1} of {STATS_SCRIPT} was meant to die while writing checkpoint "
                              f"#{arg.split(':')[1]}, but it ended by itself", found="; ".join(history),
                              hint="Save the checkpoint to a file whose name starts with 'checkpoint' after every "
                                   "batch of at most 50 records, and let the grader's harness see it "
                                   "(plain open() or any other ordinary file API).")
        if code == CRASHED:
            crashes += 1
            continue
        if code != 0:
            last = (run.output().strip().splitlines() or ["(no output)"])[-1]
            raise CheckFailed(f"{STATS_SCRIPT} failed on restart after a crash: {last}",
                              found="; ".join(history),
                              hint="After a crash the checkpoint must still be readable: write it to a "
                                   "temporary file and os.replace() it over the old one.")
    expect(crashes > 0, "the grader meant to crash the consumer at least once", found="; ".join(history),
           hint="Save the checkpoint after each batch of at most 50 records (max_records=50).")
    stats, truth = read_checkpoint(ctx).get("stats"), true_stats()
    found_n = sum(s.get("flights", 0) for s in stats.values()) if isinstance(stats, dict) else 0
    want_n = sum(s["flights"] for s in truth.values())
    hint = ("Too many flights: repeated flights counted twice (keep the ids you have seen), or records "
            "replayed after a crash counted again." if found_n > want_n else
            "Too few flights: some records' offsets were saved before the records were counted, so a crash "
            "in between lost them." if found_n < want_n else
            "The right number of flights, but wrong sums: check how cancelled flights (no dep_delay) count.")
    expect_equal(stats, truth, f"the statistics in {CHECKPOINT} after {crashes} crashes ({'; '.join(history)})",
                 hint=hint + " Save stats, offsets and seen ids together, in one atomic write.")
    return "; ".join(history)
