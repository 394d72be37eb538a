"""Lab 8, throughput and latency. Nothing is judged on an absolute rate (a loaded machine is
slower, not wrong): latencies against the record timestamps the grader chose, percentiles of a
seeded list, the student's tuned producer against a synchronous loop measured in the same
grading, and bytes on disk, which do not vary from run to run.

- lab8-q1 latencies(topic, count): end-to-end latency of each record from its timestamp; the
  grader back-dates its records by seeded amounts, so only the timestamps give the answer;
- lab8-q2 percentiles(latencies): (p50, p99) of a seeded list, any usual definition;
- lab8-q3 send_all(fast_producer(), topic, values): acks="all" kept, every value once, at least
  SPEEDUP_AT_LEAST times the grader's synchronous loop, both timed by the grader's clock; and
  section 4's prediction (how much faster acks=0 sends) made;
- lab8-q4 the same producer stores the day's flights in at most DISK_RATIO_AT_MOST of the bytes
  the grader's uncompressed producer needs for them."""

from __future__ import annotations

import json
import math
import time

from cluster.waiting import wait_for

from . import CheckFailed, Context, RaisedInKernel, check, expect, prediction, shown_in_kernel
from .kafka_state import end_offsets, graders_topic, read_all, short_name

PERCENTILES = (50, 99)
LATENCY_RECORDS = 40
CLOCK_SLACK_MS = 5  # timestamps are whole milliseconds
SEND_RECORDS = 20_000  # for q3: a tuned producer needs about a second, a synchronous loop over 30 s
RECORD_BYTES = 100
BASELINE_RECORDS = 300  # the grader's synchronous loop: about a second
# Measured on a 2-core machine (lab 8's table): a tuned kafka-python producer sends 50-70 times
# as fast as a synchronous loop; batching alone (async, default linger) already gives ~40x.
SPEEDUP_AT_LEAST = 10
VISIBLE_WAIT_S = 5  # for acknowledged records to become readable (all in-sync replicas have them)
GRADERS_PRODUCER = "_lab8_graders_producer"  # the student's producer, kept in the kernel between two reads
DISK_RATIO_AT_MOST = 0.5  # gzip/zstd/lz4/snappy over whole batches of flights: 0.15-0.35


# --- q1: latency from timestamps ----------------------------------------------------------
@check("lab8-q1")
def latencies_from_timestamps(ctx: Context) -> None:
    """latencies(topic, count) gives each record's age when read, from its timestamp, in ms"""
    from kafka import KafkaProducer

    topic = graders_topic(ctx, "latency-check", 1)
    now_ms = int(time.time() * 1000)
    # Records stamped as created up to a minute ago, as a slow upstream system would have made them.
    stamps = [
        now_ms - ctx.rng.choice([ctx.rng.randrange(0, 200), ctx.rng.randrange(2_000, 60_000)])
        for _ in range(LATENCY_RECORDS)
    ]
    with KafkaProducer(**ctx.kafka) as producer:
        for i, ts in enumerate(stamps):
            producer.send(topic, value=b"record %d" % i, timestamp_ms=ts)
        producer.flush()
    before = time.time() * 1000
    got = ctx.sub.value(f"latencies({topic!r}, {LATENCY_RECORDS})")
    after = time.time() * 1000
    if isinstance(got, dict) and all(isinstance(k, int) for k in got):
        got = [got[k] for k in sorted(got)]  # {offset: latency}, e.g. a pandas Series
    expect(
        isinstance(got, (list, tuple))
        and len(got) == LATENCY_RECORDS
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in got),
        f"latencies({topic!r}, {LATENCY_RECORDS}) should give {LATENCY_RECORDS} numbers in offset order",
        expected=f"a list of {LATENCY_RECORDS} numbers (ms)",
        found=type(got).__name__ + (f" of {len(got)}" if hasattr(got, "__len__") else ""),
    )
    # Each latency lies between the record's age when the call began and when it returned.
    wrong = [
        i
        for i, (lat, ts) in enumerate(zip(got, stamps))
        if not before - ts - CLOCK_SLACK_MS <= lat <= after - ts + CLOCK_SLACK_MS
    ]
    if wrong:
        i = wrong[0]
        seconds = all(abs(lat * 1000 - (before - ts)) < (after - before) + 1000 for lat, ts in zip(got, stamps))
        # The ages come from the grader's timestamps: the message says which way the value is off.
        low = got[i] < before - stamps[i] - CLOCK_SLACK_MS
        expect(
            False,
            f"latencies({topic!r}, {LATENCY_RECORDS}): {len(wrong)} of {LATENCY_RECORDS} are not the "
            f"record's age when read (offset {i} first, {'younger' if low else 'older'} than it was)",
            expected="the time the record was read minus its timestamp, in ms (between its age when the call "
            "began and when it returned)",
            found=got[i],
            hint=("These look like seconds: give milliseconds. " if seconds else "")
            + "The grader stamped its records as made at different times, some a minute ago. A record's "
            "latency is the time you read it minus record.timestamp (ms since 1970, set by its producer), "
            "not a time you measured yourself.",
        )


# --- q2: percentiles ----------------------------------------------------------------------
def latency_sample(ctx: Context) -> list[float]:
    """A skewed sample like real latencies: most fast, a long slow tail; all distinct."""
    # At least 200 values: with fewer, some definitions (statistics.quantiles' default) give the
    # maximum as p99, and a p99 taken as max() would pass.
    n = ctx.rng.randrange(250, 420)
    distinct = {
        round(ctx.rng.lognormvariate(1.5, 0.6) + (ctx.rng.random() < 0.05) * ctx.rng.uniform(50, 400), 3)
        for _ in range(n)
    }
    values = sorted(distinct)
    ctx.rng.shuffle(values)
    return values


def acceptable(sample: list[float], q: float) -> tuple[float, float]:
    """The range a q-th percentile may take: between the order statistics that the usual
    definitions (nearest rank, linear interpolation, numpy's and statistics' methods) pick."""
    s, n = sorted(sample), len(sample)
    ranks = [
        math.floor(q / 100 * (n - 1)),
        math.ceil(q / 100 * (n - 1)),
        math.ceil(q / 100 * n) - 1,
        min(n - 1, math.floor(q / 100 * n)),
        min(n - 1, math.floor(q / 100 * (n + 1)) - 1),
        min(n - 1, math.ceil(q / 100 * (n + 1)) - 1),
    ]
    ranks = [min(max(r, 0), n - 1) for r in ranks]
    return s[min(ranks)], s[max(ranks)]


@check("lab8-q2")
def percentiles_of_a_sample(ctx: Context) -> None:
    """percentiles(latencies) gives (p50, p99) of a seeded sample"""
    sample = latency_sample(ctx)
    got = ctx.sub.value(f"percentiles({sample!r})")
    if isinstance(got, dict):
        got = tuple(got.get(k, got.get(f"p{k}")) for k in PERCENTILES)
    expect(
        isinstance(got, (list, tuple))
        and len(got) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in got),
        f"percentiles(...) of {len(sample)} latencies should give two numbers, (p50, p99)",
        expected="(p50, p99)",
        found=got,
    )
    for q, value in zip(PERCENTILES, got):
        lo, hi = acceptable(sample, q)
        # The sample is the grader's and not in the message: so is not its percentile (which way is said).
        expect(
            lo - 1e-9 <= value <= hi + 1e-9,
            f"p{q} of {len(sample)} latencies (min {min(sample)}, "
            f"mean {sum(sample) / len(sample):.3f}, max {max(sample)}): "
            + ("lower" if value < lo else "higher")
            + " than any usual definition gives",
            expected=f"the value {q}% of the way along the sorted latencies (nearest rank or interpolated)",
            found=value,
            hint="Sort the latencies: the p-th percentile is the value p% of the way along (numpy.percentile "
            "does it). Not the mean, not the maximum; and the list arrives in no particular order.",
        )


# --- q3 and q4: the tuned producer ---------------------------------------------------------
def synchronous_baseline(ctx: Context) -> float:
    """The grader's synchronous loop (one send, wait for its acknowledgement, the next) on a
    topic like the student's: records per second on this machine, now, by the grader's clock
    from making the producer to the last acknowledgement, as the student's is timed."""
    from kafka import KafkaProducer

    topic = graders_topic(ctx, "sync-baseline", 3)
    start = time.monotonic()
    with KafkaProducer(**ctx.kafka, acks="all") as producer:
        for i in range(BASELINE_RECORDS):
            producer.send(topic, value=b"%06d" % i + b"." * (RECORD_BYTES - 6)).get(timeout=30)
        return BASELINE_RECORDS / (time.monotonic() - start)


def run_send_all(ctx: Context, topic: str, values_expr: str, count: int) -> tuple[str, float]:
    """Run the student's send_all(fast_producer(), topic, values) in the kernel: its acks, and
    the seconds it took by the grader's clock (the kernel's could be the student's). The
    producer is closed (which would send what is left) only after the records were counted."""
    p = GRADERS_PRODUCER
    start = time.monotonic()
    try:
        # Right as send_all returns: the producer's acks, and whether batches still await an answer.
        acks, waiting = ctx.sub.value(
            f"({p} := fast_producer(), send_all({p}, {topic!r}, {values_expr}), "
            # the acks the producer's sender thread puts in its requests (its own copy of the
            # settings: changing producer.config after the fact changes nothing on the wire)
            f"getattr(getattr({p}, '_sender', {p}), 'config', {{}}).get('acks'), "
            f"getattr(getattr({p}, '_accumulator', None), 'has_incomplete', False))[2:]"
        )
    except RaisedInKernel as e:  # named as the student wrote it, not as the grader's expression
        raise RaisedInKernel("send_all(fast_producer(), topic, values)", e.ename, e.evalue) from None
    except CheckFailed as e:
        if "did not return" not in e.what:
            raise
        raise CheckFailed(
            f"send_all(fast_producer(), ...) of {count:,} records did not finish within "
            f"{time.monotonic() - start:.0f} s",
            hint="A tuned producer needs well under a second for these; one that waits for each "
            "record's acknowledgement needs a minute. Send them all, then flush() once.",
        ) from None
    seconds = time.monotonic() - start
    try:
        # Acknowledged is not yet readable with acks=1: consumers see a record once every in-sync
        # replica has it (the high watermark), a moment later.
        ends = wait_for(
            lambda: end_offsets(ctx, short_name(topic)),
            timeout_s=VISIBLE_WAIT_S,
            until=lambda ends: sum(ends.values()) >= count,
            every_s=0.2,
        ).last
    finally:
        ctx.sub.value(f"{p}.close()")
    expect(
        not waiting,
        "records still unacknowledged when send_all(...) returned",
        expected="none",
        found="some",
        hint="send_all should return only when the brokers have acknowledged every record: producer.flush() "
        "waits for that.",
    )
    expect(
        sum(ends.values()) == count,
        f"records in {topic} once send_all(...) returned",
        expected=count,
        found=sum(ends.values()),
        hint="send_all should send every value and return only when the brokers have acknowledged them all "
        "(producer.flush() waits for that).",
    )
    return acks, seconds


@check("lab8-q3")
def tuned_producer_is_fast_and_safe(ctx: Context) -> str:
    """send_all(fast_producer(), ...) keeps acks="all", sends every value once, much faster than a synchronous loop"""
    baseline = synchronous_baseline(ctx)
    topic = graders_topic(ctx, "throughput-check", 3, protect=False)
    tag = ctx.rng.randrange(10**6)
    values = f"[b'%06d:%07d:' % ({tag}, i) + b'x' * {RECORD_BYTES - 15} for i in range({SEND_RECORDS})]"
    acks, seconds = run_send_all(ctx, topic, values, SEND_RECORDS)
    expect(
        acks in (-1, "all"),
        "fast_producer()'s acks",
        expected='"all" (-1)',
        found=acks,
        hint="Tune for speed without giving up durability: keep acks='all' (the default) and batch instead. "
        "fast_producer() should return a kafka-python KafkaProducer.",
    )
    records = read_all(ctx, short_name(topic))
    sent = sorted(r.value for r in records)
    want = sorted(b"%06d:%07d:" % (tag, i) + b"x" * (RECORD_BYTES - 15) for i in range(SEND_RECORDS))
    expect(
        sent == want,
        f"the values in {topic}",
        expected=f"each of the {SEND_RECORDS} values once",
        found=f"{len(set(sent) & set(want))} of them",
        hint="Send each value as it is, once.",
    )
    for p in {r.partition for r in records}:
        order = [int(r.value.split(b":")[1]) for r in records if r.partition == p]
        expect(
            order == sorted(order),
            f"the order of the values in partition {p}",
            expected="as sent",
            found=f"{order[:5]}…",
            hint="Records of one partition keep the order they were sent in: send them in the order given.",
        )
    speed = SEND_RECORDS / seconds
    expect(
        speed >= SPEEDUP_AT_LEAST * baseline,
        "send_all(fast_producer(), ...)'s rate vs the grader's synchronous loop measured just before "
        "(both from making the producer to the last acknowledgement)",
        expected=f"at least {SPEEDUP_AT_LEAST}x {baseline:,.0f} = {SPEEDUP_AT_LEAST * baseline:,.0f} records/s",
        found=f"{speed:,.0f} records/s ({speed / baseline:.1f}x)",
        hint="Do not wait for each record (no .get() per send): send them all, then flush() once, and let "
        "the producer batch (linger_ms, batch_size, compression).",
    )
    predicted = prediction(
        ctx,
        "predicted_acks_speedup",
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
        "a positive number, e.g. 1.0",
        'how many times as fast as acks="all" you expect acks=0 to send in section 4\'s run',
    )
    return f"{speed:,.0f} records/s, {speed / baseline:.0f}x the synchronous loop's {baseline:,.0f}; " + acks_feedback(
        ctx, predicted
    )


def acks_feedback(ctx: Context, predicted: float) -> str:
    """How the prediction compares with section 4's run, when the kernel still has it (a self-check
    in the notebook; grading leaves demos out, so then the lesson alone)."""
    lesson = (
        "kafka-python spends its time building records in Python, and the wait for the followers "
        "hides behind that work, so acks changes the rate little with this client"
    )
    shown = shown_in_kernel(ctx, "acks_speedup")
    if not isinstance(shown, (int, float)) or isinstance(shown, bool):
        return f"predicted_acks_speedup: you predicted {predicted:g} (not scored): {lesson}."
    close = abs(predicted - shown) <= 0.25 * shown
    return (
        f"predicted_acks_speedup: {'close to' if close else 'you predicted ' + format(predicted, 'g') + ','} "
        f"what section 4's run showed, {shown:.2f} (not scored)" + ("" if close else f": {lesson}") + "."
    )


def log_bytes(ctx: Context, topic: str) -> int:
    """Bytes the topic's partitions take in their leaders' logs (the brokers' own count)."""
    meta = ctx.admin.describe_topics([topic])[0]
    leaders = {p["partition_index"]: p["leader_id"] for p in meta["partitions"]}
    sizes = {}
    answers = ctx.admin.describe_log_dirs()
    for answer in answers:
        for log_dir in answer["log_dirs"]:
            for t in log_dir.get("topics", []):
                if t.get("name") == topic:
                    for p in t["partitions"]:
                        if leaders.get(p["partition_index"]) == answer["broker"]:
                            sizes[p["partition_index"]] = p["partition_size"]
    if not sizes and not any(answer["log_dirs"] for answer in answers):
        sizes = local_log_bytes(topic, leaders)  # a self-check: only the admin may ask the brokers
    expect(
        set(sizes) == set(leaders),
        f"the size of {topic}'s partitions on their leaders",
        expected=sorted(leaders),
        found=sorted(sizes),
        hint="This is a problem with the grader's cluster, not your code: ask for a regrade.",
    )
    return sum(sizes.values())


def local_log_bytes(topic: str, leaders: dict[int, int]) -> dict[int, int]:
    """The same from the local cluster's files, for a student's own login (a self-check)."""
    from cluster.clients import mode
    from cluster.settings import Settings

    if mode() != "local":
        raise CheckFailed(
            "only the course's admin may ask the brokers for log sizes, so this part is checked "
            "when your notebook is graded",
            hint="Section 3's table shows your codec's bytes on disk.",
        )
    cfg = Settings.from_env()
    return {
        p: sum(
            f.stat().st_size for f in (cfg.node_dir(leader) / "data" / f"{topic}-{p}").glob("*.log")
        )  # grader-only: the broker's data folder
        for p, leader in leaders.items()
    }


@check("lab8-q4")
def tuned_producer_saves_disk(ctx: Context) -> str:
    """send_all(fast_producer(), ...) stores a day of flights in at most half the bytes of an uncompressed producer"""
    from kafka import KafkaProducer

    from cluster.lab import load_flights

    day = ctx.rng.randrange(1, 32)
    flights = [json.dumps(f).encode() for f in load_flights(day=day)]
    plain_topic = graders_topic(ctx, "plain-flights", 1)
    with KafkaProducer(**ctx.kafka, acks="all", linger_ms=100, batch_size=256 * 1024) as producer:
        for value in flights:
            producer.send(plain_topic, value=value)
        producer.flush()
    topic = graders_topic(ctx, "packed-flights", 1, protect=False)
    values = (
        "[__import__('json').dumps(f).encode() for f in "
        f"__import__('cluster.lab', fromlist=['_']).load_flights(day={day})]"
    )
    run_send_all(ctx, topic, values, len(flights))
    stored = [r.value for r in read_all(ctx, short_name(topic))]
    expect(
        stored == flights,
        f"the values in {topic}",
        expected=f"the {len(flights)} flights as given, in order",
        found=f"{sum(a == b for a, b in zip(stored, flights))} of them in place",
        hint="Send each value as it is (the producer compresses batches; values you change yourself are "
        "not the flights).",
    )
    plain, packed = log_bytes(ctx, plain_topic), log_bytes(ctx, topic)
    expect(
        packed <= DISK_RATIO_AT_MOST * plain,
        f"bytes on disk of the {len(flights)} flights of 2013-01-{day:02d} sent by send_all(fast_producer(), ...)",
        expected=f"at most {DISK_RATIO_AT_MOST:.0%} of {plain:,} (uncompressed, whole batches)",
        found=f"{packed:,} ({packed / plain:.0%})",
        hint="Compress (compression_type='gzip', 'lz4', 'snappy' or 'zstd'), and batch: a codec compresses "
        "one batch at a time, so a batch of one record barely shrinks.",
    )
    return f"{packed:,} bytes, {packed / plain:.0%} of uncompressed"
