"""The grader's seeded cases test every rule whatever the seed: a case that a known mistake
answers correctly by chance would pass that mistake (CI once saw lab 6's tombstone rule so)."""

from __future__ import annotations

import random
from types import SimpleNamespace

from selfcheck.checks.lab6 import compaction_case
from datetime import UTC


def kept(closed, active):
    """What a compacted topic keeps: each key's newest closed write (a tombstone too), all active ones."""
    newest = {key: offset for offset, (key, _) in enumerate(closed)}
    return sorted(newest.values()) + list(range(len(closed), len(closed) + len(active)))


def tombstones_left_out(closed, active):
    newest = {}
    for offset, (key, value) in enumerate(closed):
        if value is None:
            newest.pop(key, None)
        else:
            newest[key] = offset
    return sorted(newest.values()) + list(range(len(closed), len(closed) + len(active)))


def first_write_wins(closed, active):
    first = {}
    for offset, (key, _) in enumerate(closed):
        first.setdefault(key, offset)
    return sorted(first.values()) + list(range(len(closed), len(closed) + len(active)))


def active_compacted_too(closed, active):
    newest = {key: offset for offset, (key, _) in enumerate(closed + active)}
    return sorted(newest.values())


def test_every_compaction_case_tells_each_mistake_from_the_rule():
    for seed in range(2000):
        closed, active = compaction_case(SimpleNamespace(rng=random.Random(seed)))
        truth = kept(closed, active)
        for mistake in (tombstones_left_out, first_write_wins, active_compacted_too):
            assert mistake(closed, active) != truth, f"seed {seed}: {mistake.__name__} passes {closed}, {active}"


def test_every_latency_sample_takes_any_usual_percentile_and_rejects_max_and_mean():
    """lab8-q2: numpy's nine methods and the statistics module pass; max() as p99 and the mean
    as p50 fail (the bench once saw max() pass a sample of 180, where the exclusive method
    gives the maximum)."""
    import statistics

    import numpy as np

    from selfcheck.checks.lab8 import acceptable, latency_sample

    def within(value, sample, q):
        lo, hi = acceptable(sample, q)
        return lo - 1e-9 <= value <= hi + 1e-9

    methods = (
        "linear",
        "lower",
        "higher",
        "nearest",
        "midpoint",
        "inverted_cdf",
        "hazen",
        "weibull",
        "median_unbiased",
    )
    for seed in range(1000):
        sample = latency_sample(SimpleNamespace(rng=random.Random(seed)))
        assert not within(max(sample), sample, 99), f"seed {seed}: max() passes as p99"
        assert not within(float(np.mean(sample)), sample, 50), f"seed {seed}: the mean passes as p50"
        for q in (50, 99):
            for method in methods:
                assert within(float(np.percentile(sample, q, method=method)), sample, q), (seed, q, method)
            for method in ("exclusive", "inclusive"):
                assert within(statistics.quantiles(sample, n=100, method=method)[q - 1], sample, q), (seed, q, method)


def test_lab9_reads_timestamps_as_utc_whatever_the_machines_time_zone(monkeypatch):
    """PySpark's collect() gives naive datetimes in the machine's local time: a laptop in India
    must not fail lab 9's self-checks (its hours would read 15:30 instead of 10:00)."""
    import time
    from datetime import datetime

    from selfcheck.checks.lab9 import utc_text

    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        collected = datetime.fromtimestamp(datetime(2013, 1, 1, 10, tzinfo=UTC).timestamp())
        assert str(collected) == "2013-01-01 15:30:00"  # what collect() gives there
        assert utc_text(collected, naive_is_local=True) == "2013-01-01 10:00:00"
        assert utc_text(datetime(2013, 1, 1, 10), naive_is_local=False) == "2013-01-01 10:00:00"  # pyarrow, INT96
        assert utc_text(datetime(2013, 1, 1, 10, tzinfo=UTC), False) == "2013-01-01 10:00:00"  # MICROS
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_lab9_reads_the_watermark_from_a_plan_as_spark_4_prints_it():
    """lab9-q2 reads the watermark of hourly_delays on a stream from its analyzed plan: the column and
    the delay, whatever units the student wrote it in (Spark prints 1800 seconds as 30 minutes)."""
    from datetime import timedelta

    from selfcheck.checks.lab9 import watermark_in_plan

    line = "+- ~EventTimeWatermark f418c9c6-be17-47cf-a77e-2b883deb010f, dep_time#2: timestamp, 30 minutes"
    assert watermark_in_plan(line) == ("dep_time", timedelta(minutes=30))
    assert watermark_in_plan("+- EventTimeWatermark x, dep_time#12: timestamp, 1 hours 30 minutes") == (
        "dep_time",
        timedelta(minutes=90),
    )
    assert watermark_in_plan("+- ~EventTimeWatermark x, origin#3: timestamp, 45 minutes") == (
        "origin",
        timedelta(minutes=45),
    )
    assert watermark_in_plan("+- ~EventTimeWatermark x, t#3: timestamp, 1 months") == ("t", None)  # no fixed length


def test_lab9_reads_a_partitioned_output_as_spark_does(tmp_path):
    """A job that partitions its Parquet by origin (partitionBy) writes origin=JFK/part-...: the
    file sink's log lists those paths as the job saw them, and the origin lives in the folder's
    name, not in the file. The grader reads it back as Spark would; nothing outside the folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from selfcheck.checks.lab9 import committed_files, inside, partition_values

    out = tmp_path / "hourly"
    (out / "origin=JFK").mkdir(parents=True)
    (out / "_spark_metadata").mkdir()
    pq.write_table(
        pa.table({"hour": ["2013-01-01 10:00:00"], "flights": [3], "avg_delay": [4.0]}),
        out / "origin=JFK" / "part-0.parquet",
    )
    (out / "_spark_metadata" / "0").write_text(
        'v1\n{"path":"file:///elsewhere/hourly/origin=JFK/part-0.parquet","action":"add"}\n'
        '{"path":"file:///elsewhere/hourly/../../etc/passwd","action":"add"}\n'
    )
    assert committed_files(out) == [out / "origin=JFK" / "part-0.parquet"]
    assert partition_values(out, out / "origin=JFK" / "part-0.parquet") == {"origin": "JFK"}
    assert inside(out, "file:/x/hourly/part-1.parquet").as_posix() == "part-1.parquet"


def avro_decodes(writer: dict, reader: dict, records: int) -> bool:
    """Whether `records` records Avro generates for `writer` decode with `reader` (lab 11's tests)."""
    from fastavro.utils import generate_many

    from selfcheck.checks.lab11 import avro_bytes, avro_record

    try:
        for record in generate_many(writer, records):
            avro_record(avro_bytes(writer, record), writer, reader)
    except Exception:
        return False
    return True


def test_lab11s_compatibility_truths_are_what_decoding_finds():
    """The grader's truth for lab11-q1 follows Avro's rules (its code ships in the student kit,
    so it does not decode: that is the exercise). Here every kind of change, on many seeds, is
    decoded both ways with fastavro: the rules must say what decoding finds."""
    import random
    from types import SimpleNamespace

    from selfcheck.checks.lab11 import KINDS, WORD, changed, seeded_record, truth

    seen = set()
    for seed in range(30):
        ctx = SimpleNamespace(rng=random.Random(seed))
        for kind in KINDS:
            old = seeded_record(ctx)
            new = changed(ctx, old, kind)
            found = WORD[(avro_decodes(old, new, 3), avro_decodes(new, old, 3))]
            assert truth(kind, old, new) == found, (seed, kind, old, new)
            seen.add((kind, found))
    assert {answer for _, answer in seen} == {"full", "backward", "forward", "none"}


def test_lab11s_next_version_truths_are_what_decoding_finds():
    """lab11-q3's truth (whether FULL_TRANSITIVE takes some schema making the change) follows
    Avro's rules: here each change, on many seeds, is made both as a plain field with a default
    and as a union with null, and decoded both ways with every version; every such candidate has
    the shape the grader's check asks for, so its truth alone decides."""
    import copy
    import random
    from types import SimpleNamespace

    from selfcheck.checks.lab11 import WISHES, makes_the_change, seeded_history, wish

    def decodes(writer, reader):
        return avro_decodes(writer, reader, 8)

    defaults = {"string": "", "int": 0, "long": 0, "double": 0.0, "boolean": False}

    def candidates(latest, change):
        if "remove" in change:
            yield dict(latest, fields=[f for f in latest["fields"] if f["name"] != change["remove"]])
        elif "widen" in change:
            yield dict(
                latest,
                fields=[dict(f, type=change["type"]) if f["name"] == change["widen"] else f for f in latest["fields"]],
            )
        else:
            t = change["type"]
            for field in (
                {"name": change["add"], "type": t, "default": defaults[t]},
                {"name": change["add"], "type": ["null", t], "default": None},
            ):
                yield dict(copy.deepcopy(latest), fields=[*latest["fields"], field])

    for seed in range(40):
        ctx = SimpleNamespace(rng=random.Random(seed))
        for what in WISHES:
            versions, added, optional = seeded_history(ctx)
            assert all(decodes(a, b) for a in versions for b in versions), (seed, "the history is full both ways")
            change, exists = wish(ctx, what, versions, added, optional)
            for new in candidates(versions[-1], change):
                full = all(decodes(v, new) and decodes(new, v) for v in versions)
                assert full == exists, (seed, what, change, new)
                assert makes_the_change(new, versions[-1], change) is None, (seed, what, new)
            if "add" in change:  # the same field without its default, or with it under an alias, is refused
                bare = dict(
                    versions[-1], fields=[*versions[-1]["fields"], {"name": change["add"], "type": change["type"]}]
                )
                assert "no default" in (makes_the_change(bare, versions[-1], change) or ""), (seed, what)
                aliased = copy.deepcopy(next(candidates(versions[-1], change)))
                aliased["fields"][-1]["aliases"] = [optional]
                assert makes_the_change(aliased, versions[-1], change) is not None, (seed, what)


def test_lab1_q6_measures_until_the_place_of_batched_sends_is_clear():
    """Two rounds when batched sends lead by far (as they do on any machine), all five when they
    do not lead: the check never decides on less than it needs."""
    import time

    from selfcheck.checks.lab1 import BATCHED, MIN_ROUNDS, ROUNDS, batched_clearly_first, best_rates

    def ways(batched_pause: float) -> tuple[dict, dict]:
        rounds = {"rpc": 0, "kafka one by one": 0, BATCHED: 0}

        def way(name, pause):
            return (lambda: time.sleep(pause), 5, lambda: rounds.__setitem__(name, rounds[name] + 1))

        return {
            "rpc": way("rpc", 0.002),
            "kafka one by one": way("kafka one by one", 0.002),
            BATCHED: way(BATCHED, batched_pause),
        }, rounds

    clear, rounds = ways(0.0)
    best = best_rates(clear, decided=batched_clearly_first)
    assert set(rounds.values()) == {MIN_ROUNDS} and batched_clearly_first(best)
    # Batched sends not ahead: no round can settle it. (Slower, not equal: two equal sleeps on a
    # loaded machine once came out 3x apart, and CI saw the check stop after three rounds.)
    behind, rounds = ways(0.004)
    best_rates(behind, decided=batched_clearly_first)
    assert set(rounds.values()) == {ROUNDS}


def ctx_of(seed: int) -> SimpleNamespace:
    return SimpleNamespace(rng=random.Random(seed))


def test_lab6_q4s_table_always_ends_with_a_deleted_key():
    from selfcheck.checks.lab6 import table_case

    for seed in range(2000):
        writes, table = table_case(ctx_of(seed))
        assert any(status is None and plane not in table for plane, status in writes), seed


def test_lab3_q1s_cases_tell_a_forgotten_sign_mask_and_pythons_hash():
    from kafka.partitioner.default import murmur2

    from selfcheck.checks.lab3 import java_partition, partition_cases

    for seed in range(300):
        cases = partition_cases(ctx_of(seed))
        assert len(cases) == 8
        assert any(murmur2(k) % n != java_partition(k, n) for k, n in cases), seed  # no & 0x7fffffff
        assert sum(murmur2(k) % n != java_partition(k, n) for k, n in cases) >= 2, seed


def test_lab10s_own_flights_have_distinct_ids_and_left_out_reports_leave_flights_without_weather():
    from selfcheck.checks.lab9 import WINDOW, graders_flights, hour_of, iso, when
    from selfcheck.checks.lab10 import graders_weather, held_back
    from cluster.lab import weather

    for seed in [780, 1242, 0, 1]:  # the first two once left no report of the hour to hold back in lab10-q2
        ctx = ctx_of(seed)
        events = graders_flights(ctx)
        ids = [e["id"] for e in events]
        assert len(ids) == len(set(ids)), seed
        middle = hour_of(when(events[len(events) // 2]))
        reports = graders_weather(ctx, events, whole=middle - 2 * WINDOW)
        late = held_back(ctx, events, reports, middle - 2 * WINDOW)
        assert sum(r["time_hour"] == late["time_hour"] for r in reports) > 1, seed
        sent = {(r["origin"], r["time_hour"]) for r in reports}
        public = {(r["origin"], r["time_hour"]) for r in weather(day=int(events[0]["id"][8:10]))}
        busy = {(e["origin"], iso(hour_of(when(e)))) for e in events}
        assert len(public - sent) == 3 and (public - sent) <= busy, seed


def test_lab9s_late_flights_are_one_in_a_written_hour_and_one_older_than_the_watermark_in_an_open_hour():
    """lab9-q3: whatever the seed and wherever the job's micro-batches ended, the first late flight
    falls minutes before the end of the last hour the job has written (Spark forgot it: dropped),
    the second before the watermark (unless that is on the hour) but in an hour still open (Spark
    drops by window, not by a row's own time: counted); a job that drops late rows by their own
    time loses both."""
    from datetime import timedelta

    from selfcheck.checks.lab9 import WINDOW, graders_flights, hour_of, late_events, when

    for seed in range(40):
        ctx = ctx_of(seed)
        events = graders_flights(ctx)
        middle = when(events[len(events) // 2])
        for minutes in range(0, 6 * 60, 13):  # wherever the micro-batches left the watermark
            watermark = middle - timedelta(minutes=minutes)
            for behind in (0, 1, 30, 59, 60, 61, 125):  # the last micro-batch's watermark, behind it
                written = watermark - timedelta(minutes=behind)
                dropped, counted = late_events(ctx, written, watermark, events[0]["id"][:10])
                assert hour_of(when(dropped)) + WINDOW <= written, (seed, minutes, behind)  # a written hour
                assert hour_of(when(counted)) + WINDOW > watermark, (seed, minutes, behind)  # an open hour
                assert when(dropped) < when(counted) <= watermark, (seed, minutes, behind)
                assert when(counted) < watermark or watermark == hour_of(watermark), (seed, minutes, behind)
                assert dropped["origin"] == counted["origin"], (seed, minutes, behind)


def test_lab2_means_on_a_half_cent_take_either_rounding_and_nothing_further():
    # CI once saw the grader's round() give 119.47 and a pandas mean of the same flights 119.48.
    from selfcheck.checks.lab2 import mean_delays, same_delays, shown

    flights = [{"origin": "JFK", "dep_delay": d} for d in (119, 120, 119, 120, 119, 120, 120, 119)]
    flights[0]["dep_delay"] = 118.8  # the mean is 119.475 exactly, whose float lies below it
    exact = mean_delays(flights)
    assert round(exact["JFK"], 2) == shown(exact)["JFK"]
    assert same_delays({"JFK": 119.47}, exact) and same_delays({"JFK": 119.48}, exact)
    assert not same_delays({"JFK": 119.46}, exact) and not same_delays({"JFK": 119.49}, exact)
    assert not same_delays({"JFK": 119.475, "LGA": 1.0}, exact) and not same_delays({"JFK": "119.47"}, exact)


def test_lab15s_day_cannot_be_read_off_the_public_dataset():
    """A board worked out from datasets/ (CI once saw it pass lab15-q4: the grader's day was the
    public day plus a few made-up planes, and the late hours had none of them)."""
    from collections import Counter

    from cluster.lab import departures
    from selfcheck.checks import lab15

    for seed in range(25):
        day = lab15.graders_day(SimpleNamespace(rng=random.Random(seed)))
        truth = lab15.expected_hours(day, {e["id"] for e in day.events})
        public = departures(day=int(day.events[0]["dep_time"][8:10]))
        left = Counter((f["origin"], f["dep_time"][:13]) for f in public)
        delayed = Counter((f["origin"], f["dep_time"][:13]) for f in public if f["dep_delay"] >= lab15.DELAYED_MIN)
        right = {k for k, v in truth.items() if (left[k], delayed[k]) == v}
        late_hours = {(e["origin"], lab15.hour_of(e)) for e in day.events if e["id"] in day.late}
        assert late_hours and not late_hours <= right, f"seed {seed}: the public day gets every late hour right"
        assert len(right) <= 0.25 * len(truth), (
            f"seed {seed}: the public day gets {len(right)} of {len(truth)} hours right"
        )


def test_lab15s_burst_comes_at_an_hours_start_after_version_2s_sample():
    """The burst (lab15-q6) lands in the run's last part, after at least BURST_AFTER departures of
    version 2 (the storage's sample, lab15-q7) and before the day's last ones, in one hour."""
    from selfcheck.checks import lab15

    for seed in range(10):
        day = lab15.graders_day(SimpleNamespace(rng=random.Random(seed)))
        base = [e for e in day.events if e["id"] not in day.burst]
        before = {e["id"] for e in base[: len(base) // 2 + int(lab15.FEED_PER_S * lab15.FROZEN_S)]}
        rest = [e for e in day.events if e["id"] not in before]
        at = [i for i, e in enumerate(rest) if e["id"] in day.burst]
        assert len(day.burst) == len(at) == lab15.BURST_N and at == list(range(at[0], at[0] + lab15.BURST_N))
        assert at[0] >= lab15.BURST_AFTER, f"seed {seed}: {at[0]} departures before the burst"
        assert len(rest) - at[-1] > 10 + len(day.closing), f"seed {seed}: the burst is at the day's end"
        assert {e["dep_time"][:13] for e in rest if e["id"] in day.burst} == {day.burst_hour[:13]}
        assert len({e["tailnum"] for e in day.events if e["id"] in day.burst}) == lab15.BURST_N


def test_lab15_latency_runs_from_an_hour_being_due_to_its_first_right_record():
    import json
    import math

    from selfcheck.checks import lab15

    day = lab15.graders_day(SimpleNamespace(rng=random.Random(3)))
    ids = {e["id"] for e in day.events}
    r = lab15.Run(day, "ns.events", "ns.board", in_topic=[(0, n, i) for n, i in enumerate(sorted(ids))])
    r.given_at = {e["id"]: float(n) for n, e in enumerate(day.events)}  # one a second, in the feed's order
    truth = lab15.expected_hours(day, ids)
    keys = sorted(k for k in truth if k[1] < day.burst_hour[:13])[-3:]

    def due(key):
        end = lab15.when(key[1] + ":00:00Z") + lab15.timedelta(hours=1, minutes=lab15.LATENESS_MIN)
        return min(
            r.given_at[e["id"]] for e in day.events if e["origin"] == key[0] and lab15.when(e["dep_time"]) >= end
        )

    def record(key, counts, at):
        value = {"airport": key[0], "hour": key[1] + ":00:00Z", "departures": counts[0], "delayed": counts[1]}
        return (0, 0, 0, json.dumps(value).encode(), at)

    a, b, c = keys
    r.board_seen = [
        record(a, truth[a], due(a) + 2.5),
        record(c, (truth[c][0] + 5, truth[c][1]), due(c) + 1),  # never right
        record(b, (truth[b][0] + 1, truth[b][1]), due(b) + 1),  # wrong first: the right one counts
        record(b, truth[b], due(b) + 20),
        record(a, truth[a], due(a) + 9),  # a repeat: the first right one counts
    ]
    r.measured_from = due(a) - 0.5
    lat = lab15.latencies(r)
    assert lat[a] == 2.5 and lat[b] == 20 and lat[c] == math.inf
    assert all(due(k) >= r.measured_from for k in lat), "an hour due before the measure counted"
    assert lab15.percentile(list(lat.values()), 99) == math.inf
    assert lab15.percentile([float(n) for n in range(1, 101)], 99) == 99
    assert lab15.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0


def test_lab15_storage_judges_the_costlier_window_and_the_fullest_partition(tmp_path):
    """lab15-q7: a producer that compresses its first departures and not the burst is judged by the
    burst; retention.bytes must hold the fullest partition's share, not an even one."""
    import pytest

    from selfcheck.checks import CheckFailed, lab15

    day = lab15.graders_day(SimpleNamespace(rng=random.Random(4)))
    before = [e["id"] for e in day.events[:200]]
    after = [e["id"] for e in day.events[200:1200]]

    def graded(at_start, before_burst, at_end, partitions, retention_bytes="-1"):
        r = lab15.Run(day, "ns.events", "ns.board")
        r.storage_sample, r.given_as_v2 = before, before + after
        r.in_topic = [(partitions(n), n, i) for n, i in enumerate(before + after)]
        r.disk_at_start, r.disk_before_burst, r.disk_at_end = at_start, before_burst, at_end
        r.events_config = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": retention_bytes}
        r.replicas, r.events_partitions = 3, 2
        ctx = SimpleNamespace(namespace="ns", seed=1, workdir=tmp_path, sandbox=object(), scratch={})
        ctx.scratch[("lab15-run", "ns", 1, "")] = r  # one run a grading, whatever the kernel writes later
        return lab15.storage(ctx)

    even = lambda n: n % 2
    assert graded(0, 200 * 200, 200 * 200 + 1000 * 150, even).startswith("200 bytes a departure")
    with pytest.raises(CheckFailed, match="from the burst to the day's end took 800,000 bytes"):
        graded(0, 200 * 200, 200 * 200 + 1000 * 800, even)
    # 7 days of 1,000 departures at 200 bytes over 3 replicas: 233,334 a partition if the two hold
    # half each, 350,000 in the one holding three quarters
    assert graded(0, 200 * 200, 200 * 200 + 1000 * 150, even, "300000")
    with pytest.raises(CheckFailed, match="holds 75% of the departures"):
        graded(0, 200 * 200, 200 * 200 + 1000 * 150, lambda n: int(n % 4 != 0), "300000")


def test_lab9_a_spark_driver_is_the_jdks_java_running_sparksubmit(tmp_path):
    """DriverWatch believes what the kernel says of a process, not its command line: a Python
    process that names SparkSubmit is no driver, nor a java whose main class is another."""
    import shutil
    import subprocess
    import sys

    import psutil

    from selfcheck.checks.lab9 import SPARK_DRIVER, is_spark_driver, main_class

    real = ["java", "-cp", "/x/*", "-Xmx1g", SPARK_DRIVER, "--conf", "a=b", "pyspark-shell"]
    assert main_class(real) == SPARK_DRIVER
    assert main_class(["java", "-cp", SPARK_DRIVER, "Other", SPARK_DRIVER]) == "Other"
    sleeper = "import time; time.sleep(30)"
    forged = subprocess.Popen([sys.executable, "-c", sleeper, "-cp", "x", SPARK_DRIVER])
    (tmp_path / "Sleep.java").write_text(
        "class Sleep { public static void main(String[] a) throws Exception { Thread.sleep(30000); } }"
    )
    java = shutil.which("java")
    other = (
        subprocess.Popen([java, "-Dname=" + SPARK_DRIVER, str(tmp_path / "Sleep.java"), SPARK_DRIVER]) if java else None
    )
    try:
        assert not is_spark_driver(psutil.Process(forged.pid))
        if other is not None:
            assert not is_spark_driver(psutil.Process(other.pid))
    finally:
        for p in (forged, other):
            if p is not None:
                p.kill()
                p.wait()


def test_lab9_reads_sparks_own_account_of_the_job_with_bounds(tmp_path, monkeypatch):
    """lab9-q3 believes what Spark's event log reports: each micro-batch's progress and what its
    tasks wrote, read a line at a time with bounds on bytes, lines and items; every other event
    is skipped unparsed, a failed task's output is not counted, and a log past a bound fails."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    import pytest

    from selfcheck.checks import CheckFailed, lab9

    out = tmp_path / "hourly"
    (out / "_spark_metadata").mkdir(parents=True)
    pq.write_table(pa.table({"flights": [1, 2]}), out / "part-0.parquet")
    size = (out / "part-0.parquet").stat().st_size
    (out / "_spark_metadata" / "0").write_text('v1\n{"path":"file:///x/hourly/part-0.parquet","action":"add"}\n')
    (tmp_path / ".run-x").mkdir()
    metrics = lambda bytes_, records: {"Output Metrics": {"Bytes Written": bytes_, "Records Written": records}}
    events = [
        {"Event": "SparkListenerApplicationStart", "App Name": "delays-job"},
        {
            "Event": "SparkListenerJobStart",
            "Stage IDs": [0, 1],
            "Properties": {"sql.streaming.queryId": "q", "streaming.sql.batchId": "0"},
        },
        {
            "Event": "SparkListenerTaskEnd",
            "Stage ID": 1,
            "Task End Reason": {"Reason": "Success"},
            "Task Metrics": metrics(size, 2),
        },
        {
            "Event": "SparkListenerTaskEnd",
            "Stage ID": 1,
            "Task End Reason": {"Reason": "ExceptionFailure"},
            "Task Metrics": metrics(9, 9),
        },
        {
            "Event": "SparkListenerTaskEnd",
            "Stage ID": 7,
            "Task End Reason": {"Reason": "Success"},
            "Task Metrics": metrics(5, 5),
        },
        {
            "Event": "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent",
            "progress": {
                "id": "q",
                "batchId": 0,
                "eventTime": {"watermark": "2013-01-05T12:20:00.000Z"},
                "sources": [{"endOffset": '{"t":{"0":100}}'}],
                "sink": {"description": f"FileSink[file:{out}]"},
            },
        },
    ]
    # As Spark writes them: compact JSON, "Event" first; and a torn line, skipped.
    text = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events) + '{"Event":"SparkListenerTaskEnd",\n'
    (tmp_path / ".run-x" / "local-1").write_text(text)
    logs = [[".run-x", ["local-1.inprogress"]]]  # the name the driver held open, renamed when it stopped
    got = lab9.spark_events(tmp_path, logs)
    assert (got["read"], got["writes"], got["files"]) == (["local-1"], [["q", 0, size, 2]], [1, size, 2])
    [p] = got["progress"]
    assert (p["batch"], p["ends"], lab9.iso_ms(p["watermark"])) == (0, [{"t": {"0": 100}}], 1357388400000)
    assert lab9.sink_folder(p["sink"]) == str(out)
    monkeypatch.setattr(lab9, "EVENT_LOG_BYTES", len(text) - 1)
    with pytest.raises(CheckFailed, match="holds more than"):
        lab9.spark_events(tmp_path, logs)
    monkeypatch.setattr(lab9, "EVENT_LOG_BYTES", 2**20)
    monkeypatch.setattr(lab9, "EVENT_LINE_BYTES", 200)
    with pytest.raises(CheckFailed, match="a line of more than"):
        lab9.spark_events(tmp_path, logs)


def test_lab15_a_flood_of_claims_keeps_only_the_days_ids(tmp_path):
    """The producer's "acked" lines are read in chunks; a claim of an id the day does not have is
    counted, never kept, and a line longer than any claim is not held whole: 64 MiB of claims cost
    the grader no more memory than the day's ids."""
    from types import SimpleNamespace

    from selfcheck.checks import lab15

    day = SimpleNamespace(events=[{"id": f"2013-01-05 ZZ{n} EWR"} for n in range(100)])
    log = tmp_path / "producer.log"
    real = "".join(f"acked 2013-01-05 ZZ{n} EWR 0 {n}\n" for n in range(0, 100, 2))
    flood = "".join(f"acked 2013-01-05 XX{n} EWR\n" for n in range(200_000))
    garbage = "y" * (3 * 2**20) + "\n"  # a line longer than a chunk: skipped, never held whole
    log.write_text(flood + garbage + real + "acked 2013-01-05 ZZ3 EWR")
    feeder = object.__new__(lab15.Feeder)
    feeder.day, feeder.known, feeder.unknown_claims, feeder.earlier = day, {e["id"] for e in day.events}, 0, set()
    feeder.run = SimpleNamespace(log=log, proc=SimpleNamespace(poll=lambda: 0))
    feeder._reset()
    acked = feeder.acked()
    assert acked == {f"2013-01-05 ZZ{n} EWR" for n in range(0, 100, 2)} | {"2013-01-05 ZZ3 EWR"}
    assert feeder.unknown_claims == 200_000


def test_lab8_cpu_counts_what_the_cgroup_files_say_and_an_unreaped_child(tmp_path):
    """lab8-q3's measure of the student's CPU: v2's cpu.stat and v1's cpuacct.usage read in
    seconds; and where no cgroup counts, psutil's walk from the sandbox's outer process still
    counts a child that sent and ended without being reaped (os.waitid with WNOWAIT: a zombie,
    in no cgroup.procs and in no parent's children's times), the corpus' sends-in-an-unreaped-child."""
    import subprocess
    import sys

    import psutil

    from selfcheck.checks.lab8 import cgroup_usage, processes_cpu

    (tmp_path / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    (tmp_path / "cpuacct.usage").write_text("1250000000\n")
    assert cgroup_usage(tmp_path / "cpu.stat") == 2.5
    assert cgroup_usage(tmp_path / "cpuacct.usage") == 1.25
    assert cgroup_usage(tmp_path / "missing") is None

    code = (
        "import os, sys, time\n"
        "sys.stdin.readline()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    end = time.process_time() + 0.3\n"
        "    while time.process_time() < end: pass\n"
        "    os._exit(0)\n"
        "os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)\n"
        "print('done', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        root = psutil.Process(proc.pid)
        jail = SimpleNamespace(pid=proc.pid, processes=lambda: [root, *root.children(recursive=True)])
        before = processes_cpu(jail)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "done\n"
        after = processes_cpu(jail)
        assert sum(v - before.get(k, 0.0) for k, v in after.items()) >= 0.25
    finally:
        proc.kill()
        proc.wait()


def test_lab13s_plan_holds_every_case_on_every_seed():
    """Lab 13's grader's changes (selfcheck/checks/lab13.py, make_plan) hold, whatever the seed, the
    cases its parts and corpus rely on: a row updated twice in one transaction, a status that goes
    A -> B -> A, a key deleted and inserted again later, changes in every phase (the kill, the stop,
    the added column), and a first batch a sink reads whole; and the model replays to its truths."""
    from collections import Counter

    from selfcheck.checks import lab13

    for seed in range(200):
        plan = lab13.make_plan(seed)
        names = [n for n, _ in plan.columns]
        assert "status" in names and plan.added[0] not in names and len(set(names)) == len(names)
        assert {c.phase for c in plan.changes} == {"A", "B", "C", "D"}
        a = plan.phases["A"]
        twice = [tx for tx in a if len(tx) == 2 and tx[0][0] == tx[1][0] == "update" and tx[0][1] == tx[1][1]]
        assert twice and twice[0][0][2]["status"] != twice[0][1][2]["status"], seed
        statuses = {}
        for c in plan.changes:
            if c.op == "u" and c.before["status"] != c.after["status"]:
                statuses.setdefault(c.id, []).append((c.before["status"], c.after["status"]))
        assert any(a[0] == b[1] for v in statuses.values() for a, b in zip(v, v[1:])), f"seed {seed}: no A -> B -> A"
        ops = [(c.op, c.id) for c in plan.changes]
        reborn = [i for op, i in ops if op == "d" and ("c", i) in ops[ops.index(("d", i)) :]]
        assert reborn, f"seed {seed}: no key deleted and inserted again"
        assert plan.count("C") < 500, (
            seed
        )  # the copy a sink's first poll may read whole (the upserts-then-deletes case)
        # the model replayed from its statements gives the truths it states
        state = {i: dict(r) for i, r in plan.rows.items()}
        for c in plan.changes:
            if c.phase == "D":
                for r in state.values():
                    r.setdefault(plan.added[0], None)
            assert state.get(c.id) == c.before, seed
            if c.after is None:
                state.pop(c.id)
            else:
                state[c.id] = dict(c.after)
        assert state == plan.final, seed
        assert Counter(c.op for c in plan.changes)["d"] >= 5


def test_lab13s_topic_comparison_sees_what_differs_and_hands_out_no_rows():
    """The grader compares a connector's topic with its model by digests (selfcheck/checks/lab13.py,
    seen_on and stream_differences): the model's own events, as Debezium's JSON, compare clean; a
    change missing, one repeated, two swapped and a snapshot row with another value are each named;
    and what seen_on returns of a topic holds no row (no status a reader could take)."""
    import json

    from selfcheck.checks import lab13

    plan = lab13.make_plan(3)

    def record(op, ident, before, after):
        return json.dumps({"id": ident}).encode(), json.dumps({"before": before, "after": after, "op": op}).encode()

    snapshot = [record("r", i, None, row) for i, row in plan.rows.items()]
    changes = [record(*c.event()) for c in plan.changes]
    assert lab13.stream_differences(plan, lab13.seen_on(snapshot + changes)) == []
    lost = lab13.stream_differences(plan, lab13.seen_on(snapshot + changes[:-1]))
    assert lost == [
        f"1 of the {len(changes)} changes missing or different: 1 of phase D (made after a column was added)"
    ]
    again = lab13.stream_differences(plan, lab13.seen_on(snapshot + changes + changes[-1:]))
    assert again == ["1 change events that are not one of the grader's changes, or repeat one"]
    swapped = lab13.stream_differences(plan, lab13.seen_on(snapshot + changes[1:2] + changes[:1] + changes[2:]))
    assert swapped == ["every change there once, but not in the order the database committed them"]
    first = next(iter(plan.rows))
    other = record("r", first, None, {**plan.rows[first], "status": "elsewhere"})
    wrong = lab13.stream_differences(plan, lab13.seen_on([other, *snapshot[1:], *changes]))
    assert wrong == [
        f"{len(plan.rows)} snapshot events for the {len(plan.rows)} rows the table had (1 rows without one that "
        "has their values, 1 events that are not one of those rows, or repeat one)"
    ]
    seen = lab13.seen_on(snapshot + changes)
    assert not any(
        s in repr(seen) for c in plan.changes for s in (c.after or c.before or {}).values() if isinstance(s, str)
    )
