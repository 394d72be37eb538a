"""Lab 9, streaming ETL with Spark: values parsed with a schema, hourly delays per airport in
event-time windows, and a streaming job that the grader crashes, restarts and feeds late events,
whose Parquet output must equal the grader's truth exactly (no loss, no duplicates). Lab 10's
checks (joins, foreachBatch) use the same flights (flights.py) and Spark helpers (spark_labs.py).

Every check reads flights the grader wrote itself: a seeded day of January (not the day the
notebook uses) with flights of a made-up carrier mixed in, so answers worked out from the public
dataset cannot match."""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta, UTC
from pathlib import Path

from cluster.safe_files import RefusedPath, kind, list_dir, make_dirs, read_chunk, remove

from . import (
    CheckFailed,
    Context,
    check,
    expect,
    in_sandbox,
    predicted_booleans,
    prediction_feedback,
)
from .flights import (
    FAKE_CARRIER,
    WINDOW,
    close,
    flights_topic,
    graders_flights,
    hour_of,
    iso,
    send,
    when,
)
from .kafka_state import end_offsets, read_all, short_name
from .spark_labs import MAX_OUTPUT_ROWS, SPARK_POLICY, SPARK_VALUE_S, no_links
from .scripts import ended_early, read_student_file, run_folder, start, stop, wait

JOB_SCRIPT = "delays_job.py"
OUTPUT, CHECKPOINT = "hourly", "hourly-checkpoint"  # the job's folders, in the notebook's folder
WATERMARK = timedelta(minutes=30)
JOB_DEADLINE_S = 120  # one run of the job (Spark's start included)
POLICY = replace(SPARK_POLICY, checks_budget_s=3 * JOB_DEADLINE_S + 300)  # the job's three runs and the other checks
# What in_sandbox.call runs in the grading's sandbox: these open the student's files (Parquet
# parts) with plain file APIs, where a link reaches only what the sandbox shows.
IN_SANDBOX = ("output_rows", "committed_files", "spark_events")
SPARK_FOOTER = {b"org.apache.spark.version", b"org.apache.spark.sql.parquet.row.metadata"}
SPARK_DRIVER = "org.apache.spark.deploy.SparkSubmit"  # the JVM pyspark starts for a session


def utc_text(value, naive_is_local: bool) -> str:
    """A timestamp as UTC text, "2013-01-01 10:00:00". PySpark's collect() gives naive datetimes in
    the Python process's local time (not Spark's session time zone), so on a laptop outside UTC
    they read differently: naive_is_local=True for those. pyarrow gives Spark's Parquet timestamps
    naive in UTC, or aware (TIMESTAMP_MICROS, adjusted to UTC)."""
    if not isinstance(value, datetime):
        return str(value)
    if value.tzinfo is None and naive_is_local:
        value = value.astimezone()  # local -> aware
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return str(value)


KERNEL_SPARK = "__import__('cluster.spark', fromlist=['spark_session'])"
IN_KERNEL = "__import__('selfcheck.checks.lab9', fromlist=['_'])"  # this module, in the student's kernel
FLIGHTS = "__import__('selfcheck.checks.flights', fromlist=['_'])"  # the grader's flights, in the kernel


def batch_read(topic: str) -> str:
    """An expression, run in the student's kernel, for the raw DataFrame of the whole topic."""
    return (
        f"{KERNEL_SPARK}.spark_session().read.format('kafka').options(**{KERNEL_SPARK}.kafka_options({topic!r})).load()"
    )


@check("lab9-q1", kernel_runs="the question runs Spark, a child of the kernel")
def parses_values(ctx: Context) -> None:
    """parse(raw) turns the topic's JSON values into typed columns, dep_time a timestamp"""
    events = graders_flights(ctx)
    topic = flights_topic(ctx, events)
    rows = ctx.sub.value(
        f"[(r['id'], r['carrier'], r['origin'], r['dest'], r['tailnum'], r['dep_delay'], "
        f"type(r['dep_time']).__name__, {IN_KERNEL}.utc_text(r['dep_time'], True)) "
        f"for r in parse({batch_read(topic)}).collect()]",
        timeout=SPARK_VALUE_S,
    )
    expect(isinstance(rows, list), "parse(raw) should return a DataFrame with a row per record", found=rows)
    types = sorted({str(r[6]) for r in rows})
    expect(
        types in ([], ["datetime"]),
        "dep_time should be a timestamp column",
        expected="datetime values",
        found=types,
        hint="Declare dep_time as TIMESTAMP in the schema (or convert it with F.to_timestamp): "
        "event-time windows and watermarks need a timestamp, not text.",
    )
    got = sorted(tuple(r[:6]) + (r[7],) for r in rows)
    want = sorted(
        (e["id"], e["carrier"], e["origin"], e["dest"], e["tailnum"], e["dep_delay"], str(when(e))) for e in events
    )
    # The grader's flights are the answer: missing rows are named by id, the notebook's own rows shown.
    missing = sorted({w[0] for w in set(want) - set(got)})
    extra = sorted(set(got) - set(want), key=str)[:2]
    expect(
        got == want,
        f"the parsed flights of {topic}",
        expected="one row per record of the topic: id, carrier, origin, dest, tailnum, dep_delay and dep_time "
        "(a timestamp) as its JSON value gives them",
        found=f"{len(got)} rows; {len(missing)} flights missing or parsed otherwise, e.g. ids {missing[:2]}; "
        f"rows of yours that are not the topic's, e.g. {extra}",
        hint="Parse the value (bytes: cast to string first) with from_json and a schema of every field of the "
        'event, then select the struct\'s fields as columns ("f.*"). The checks use their own flights, not the '
        "notebook's.",
    )


def hourly_truth(events: list[dict]) -> dict[tuple[str, str], tuple[int, float]]:
    """(hour, origin) -> (flights, average delay) of the events, hours as 'YYYY-MM-DD HH:00:00'."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for e in events:
        t = when(e)
        groups[(str(t.replace(minute=0, second=0)), e["origin"])].append(e["dep_delay"])
    return {k: (len(v), sum(v) / len(v)) for k, v in groups.items()}


def compare_hourly(found: list[tuple], truth: dict, required: set, what: str, hint: str) -> None:
    """Each found (hour, origin, flights, avg_delay) row must be the truth's; no (hour, origin)
    twice; every required (hour, origin) present."""
    seen, wrong, twice = set(), [], []
    for hour, origin, flights, avg in found:
        key = (str(hour), origin)
        if key in seen:
            twice.append(key)
        seen.add(key)
        want = truth.get(key)
        try:
            avg = float(avg)  # a Decimal average is as good as a double
        except (TypeError, ValueError):
            pass
        if want is None or flights != want[0] or not isinstance(avg, float) or not close(avg, want[1]):
            wrong.append((key, (flights, avg)))  # the (hour, origin) and the notebook's values, not the truth's
    missing = sorted(required - seen)
    expect(
        not (wrong or twice or missing),
        what,
        expected="a row per (hour, origin) of the flights (every hour that is final, at least), each with its "
        "flights and average delay",
        found=f"{len(found)} rows; wrong: {len(wrong)} e.g. {wrong[:2]}; twice: {twice[:2]}; "
        f"missing: {len(missing)} e.g. {missing[:2]}",
        hint=hint,
    )


UNITS = {
    "week": 7 * 86400,
    "day": 86400,
    "hour": 3600,
    "minute": 60,
    "second": 1,
    "millisecond": 0.001,
    "microsecond": 1e-6,
}


def watermark_in_plan(line: str) -> tuple[str, timedelta | None]:
    """(column, delay) of one EventTimeWatermark line of an analyzed plan, as Spark 4 prints it:
    "+- ~EventTimeWatermark 1d0f..., dep_time#2: timestamp, 30 minutes" gives ("dep_time", 30 min);
    a delay Spark prints in months (no fixed length) gives None."""
    rest = line.split("EventTimeWatermark", 1)[1]
    column = re.search(r",\s*([^,#]+)#", rest)
    delay = rest.rsplit(",", 1)[1].strip()
    seconds, parts = 0.0, re.findall(r"(-?\d+(?:\.\d+)?)\s*([a-z]+?)s?\b", delay)
    for amount, unit in parts:
        if unit not in UNITS:
            return (column[1].strip() if column else "?", None)
        seconds += float(amount) * UNITS[unit]
    return (column[1].strip() if column else "?", timedelta(seconds=seconds) if parts else None)


def minutes(delay: timedelta | None) -> str:
    return "a delay in months" if delay is None else f"{delay.total_seconds() / 60:g} minutes"


@check("lab9-q2", kernel_runs="the question runs Spark, a child of the kernel")
def hourly_delays_in_batch(ctx: Context) -> None:
    """hourly_delays(flights) gives flights and average delay per origin and event-time hour, and the rule's watermark"""
    events = graders_flights(ctx)
    topic = flights_topic(ctx, events)
    # The flights parsed by the grader's code (in the kernel), so this part does not hang on parse().
    parsed = f"{FLIGHTS}.reference_flights({topic!r})"
    rows = ctx.sub.value(
        f"[({IN_KERNEL}.utc_text(r['hour'], True), r['origin'], r['flights'], r['avg_delay']) "
        f"for r in hourly_delays({parsed}).collect()]",
        timeout=SPARK_VALUE_S,
    )
    expect(
        isinstance(rows, list) and all(isinstance(r, (list, tuple)) and len(r) == 4 for r in rows),
        "hourly_delays(flights) should return a DataFrame with columns hour, origin, flights, avg_delay",
        found=str(rows)[:200],
    )
    truth = hourly_truth(events)
    compare_hourly(
        rows,
        truth,
        set(truth),
        f"hourly delays of the flights on {topic} (read as a batch)",
        hint='Group by F.window("dep_time", "1 hour") and origin; hour is the window\'s start, '
        "flights the count, avg_delay the mean of dep_delay. A watermark changes nothing in a batch.",
    )
    # On a stream: the watermark the rule asks for, read from the plan of hourly_delays (nothing runs).
    lines = ctx.sub.value(
        f"[line for line in hourly_delays({FLIGHTS}.reference_stream({topic!r}))._jdf.queryExecution()"
        f".analyzed().toString().splitlines() if 'EventTimeWatermark' in line]",
        timeout=SPARK_VALUE_S,
    )
    marks = [watermark_in_plan(line) for line in lines] if isinstance(lines, list) else []
    expect(
        marks == [("dep_time", WATERMARK)],
        "the watermark of hourly_delays on a stream (section 3's rule)",
        expected=f"one watermark, on dep_time, of {minutes(WATERMARK)}",
        found=", ".join(f"{column}: {minutes(delay)}" for column, delay in marks) or "no watermark",
        hint="On a stream Spark writes an hour once the watermark has passed its end, and drops later events "
        "of it. The rule: a flight that reaches the topic after flights that left up to 30 minutes after it "
        "must still be counted, and each hour written as soon as that allows. Put the watermark on the "
        "event time, before the aggregation.",
    )


# --- lab9-q3: the job, crashed, restarted and fed late events -------------------------------


def committed_files(folder: Path) -> list[Path] | None:
    """The Parquet files a file sink committed, as Spark's own reader finds them: those its
    _spark_metadata log lists ("add" entries; a compacted N.compact holds the earlier ones).
    None if there is no log."""
    log = folder / "_spark_metadata"
    if not log.is_dir():
        return None
    entries = sorted(
        (p for p in log.iterdir() if p.name.split(".")[0].isdigit()), key=lambda p: int(p.name.split(".")[0])
    )
    compacts = [p for p in entries if p.name.endswith(".compact")]
    if compacts:  # the last compaction holds everything before it
        entries = [p for p in entries if int(p.name.split(".")[0]) >= int(compacts[-1].name.split(".")[0])]
    files = {}
    for entry in entries:
        text = read_student_file(folder, Path("_spark_metadata", entry.name)) or ""
        for line in text.splitlines()[1:]:  # the first line is the format's version ("v1")
            try:
                item = json.loads(line)
            except ValueError:
                continue
            rel = inside(folder, str(item.get("path", "")))
            if rel is None:
                continue
            if item.get("action") == "add":
                files[rel] = folder / rel
            elif item.get("action") == "delete":
                files.pop(rel, None)
    return list(files.values())


def inside(folder: Path, logged: str) -> Path | None:
    """A path the file sink logged, relative to the output folder: "part-0.parquet", or
    "origin=JFK/part-0.parquet" when the job partitions its output (partitionBy). The log holds
    the path as the job saw it, so only what follows the folder's name is kept; nothing that
    climbs out of the folder."""
    parts = Path(logged.removeprefix("file:").lstrip("/") or ".").parts
    if folder.name not in parts:
        return Path(parts[-1]) if parts else None
    rest = parts[len(parts) - 1 - parts[::-1].index(folder.name) + 1 :]
    if not rest or ".." in rest:
        return None
    return Path(*rest)


def partition_values(folder: Path, file: Path) -> dict[str, str | None]:
    """The columns a partitioned output keeps in its folder names (origin=JFK/...): Spark
    reads them back from the path, so the grader does too."""
    from urllib.parse import unquote

    values: dict[str, str | None] = {}
    for name in file.relative_to(folder).parts[:-1]:
        key, sep, value = name.partition("=")
        if sep:
            values[unquote(key)] = None if value == "__HIVE_DEFAULT_PARTITION__" else unquote(value)
    return values


def read_output(ctx: Context) -> list[tuple]:
    """The job's rows (hour, origin, flights, avg_delay) as Spark would read the folder: read in
    the grading's sandbox (in_sandbox), as files the student's code wrote."""
    return [tuple(r) for r in in_sandbox.call(ctx, "selfcheck.checks.lab9:output_rows", str(ctx.workdir))]


def spark_wrote(meta, name: str) -> None:
    """A Parquet file Spark's writer made: parquet-java ("parquet-mr") names itself in the footer,
    and Spark adds its version and the rows' schema. pyarrow, pandas or polars write neither."""
    keys = set(meta.metadata or {})
    expect(
        str(meta.created_by or "").startswith("parquet-mr") and SPARK_FOOTER <= keys,
        f"{name} was not written by Spark",
        expected=f"written by parquet-mr, with {sorted(k.decode() for k in SPARK_FOOTER)}",
        found=f"written by {meta.created_by!r}, with {sorted(k.decode(errors='replace') for k in keys)[:4]}",
        hint="The job must be a Spark Structured Streaming query whose file sink writes the folder; "
        "files written by other libraries are not Spark's output.",
    )


def output_rows(where: str | Path) -> list[tuple]:
    """read_output's work, where the files are (in the sandbox when grading)."""
    import pyarrow.parquet as pq

    workdir = Path(where)
    folder = workdir / OUTPUT
    expect(
        folder.is_dir(),
        f"{JOB_SCRIPT} wrote no {OUTPUT}/ folder",
        hint=f"Write the stream to Parquet files in {OUTPUT}/ (the job's second argument).",
    )
    no_links(workdir, OUTPUT, f"{OUTPUT}/_spark_metadata")
    files = committed_files(folder)
    expect(
        files is not None,
        f"{OUTPUT}/ has no _spark_metadata log",
        hint='Write with Spark\'s file sink (writeStream.format("parquet") with the path OUTPUT): its log says '
        "which files each micro-batch committed, so a batch run twice is written once. Files written "
        "another way are not read.",
    )
    assert files is not None  # expect() raised otherwise
    rows = []
    for f in files:
        expect(
            f.is_file() and not f.is_symlink() and not any(p.is_symlink() for p in f.parents if folder in p.parents),
            f"{f.relative_to(folder)} is listed in the job's output but is not a file in it",
        )
        try:
            parquet = pq.ParquetFile(f)
            spark_wrote(parquet.metadata, f"{OUTPUT}/{f.relative_to(folder)}")
            expect(
                parquet.metadata.num_rows <= MAX_OUTPUT_ROWS,
                f"{OUTPUT}/{f.relative_to(folder)} holds {parquet.metadata.num_rows:,} rows",
                expected=f"at most {MAX_OUTPUT_ROWS:,} (a day's hours and airports are a few hundred)",
                hint="Write one row per hour and airport.",
            )
            table = parquet.read()
        except CheckFailed:
            raise
        except Exception as e:  # a torn or foreign file, in the student's words
            raise CheckFailed(
                f"{OUTPUT}/{f.relative_to(folder)} is not a readable Parquet file ({type(e).__name__})",
                hint="Let Spark's file sink write the folder; write nothing else there.",
            ) from None
        from_path = partition_values(folder, f)
        names = set(table.column_names) | set(from_path)
        expect(
            {"hour", "origin", "flights", "avg_delay"} <= names,
            f"the columns of {OUTPUT}/{f.relative_to(folder)}",
            expected=["hour", "origin", "flights", "avg_delay"],
            found=sorted(names),
        )
        for r in table.to_pylist():
            r = {**r, **from_path}
            rows.append((utc_text(r["hour"], False), r["origin"], r["flights"], r["avg_delay"]))
        expect(
            len(rows) <= MAX_OUTPUT_ROWS,
            f"{OUTPUT}/ holds more than {MAX_OUTPUT_ROWS:,} rows",
            hint="Write one row per hour and airport.",
        )
    return rows


def checkpoint_entry(checkpoint: Path, log: str, batch: int, line: int) -> dict | None:
    """One JSON line of a micro-batch's file in the checkpoint's offset or commit log ("v1", then
    JSON lines), read as a file the student's code wrote (no links, pipes or huge files); None
    while it is not there, or where it is not such a line."""
    try:
        text = read_student_file(checkpoint.parent, Path(checkpoint.name, log, str(batch)), limit=2**20)
        value = json.loads(text.splitlines()[line]) if text is not None else None
    except (CheckFailed, IndexError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def whole(value) -> int | None:
    return value if type(value) is int else None


def batch_watermark(checkpoint: Path, batch: int) -> int | None:
    """The watermark (ms) Spark chose for a micro-batch before running it, from its offset log
    (batchWatermarkMs); None while the file is not there."""
    return whole((checkpoint_entry(checkpoint, "offsets", batch, 1) or {}).get("batchWatermarkMs"))


def batch_end(checkpoint: Path, batch: int) -> int | None:
    """The offset one past the last record a micro-batch read, from its offset log (the third
    line: {topic: {partition: offset}}; the grader's topics for the job have one partition)."""
    ends = list((checkpoint_entry(checkpoint, "offsets", batch, 2) or {}).values())
    return whole(ends[0].get("0")) if len(ends) == 1 and isinstance(ends[0], dict) else None


def next_watermark(checkpoint: Path, batch: int) -> int | None:
    """The watermark (ms) a committed micro-batch left for the next, from the commit log."""
    return whole((checkpoint_entry(checkpoint, "commits", batch, 1) or {}).get("nextBatchWatermarkMs"))


def run_job(ctx: Context, topic: str, tag: str, fail_from: int | None = None) -> str:
    """One run of the student's job over what the topic holds. With fail_from: a micro-batch
    from that one on fails at the worst moment, its output written and its commit not. The
    grader picks the first whose watermark passes the end of an hour (so it writes a window:
    with small micro-batches many write nothing) and, as soon as Spark has logged its offsets,
    puts a folder where its commit file will go, so Spark cannot write it and the query stops
    with an error. A sink that cannot tell a repeated batch from a new one then writes that
    batch's rows twice when the job is restarted."""
    events = run_folder(ctx, ctx.workdir, ctx.sandbox)  # new and empty, the run's sandbox may write it
    run = start(
        ctx,
        JOB_SCRIPT,
        topic,
        OUTPUT,
        CHECKPOINT,
        tag=tag,
        harness=("--stop-spark",),
        env={"PYSPARK_SUBMIT_ARGS": event_log_args(events)},
    )
    driver = DriverWatch(run.proc.pid, events)
    ctx.scratch.setdefault("lab9-event-logs", []).append((tag, events, driver.logs))
    if fail_from is None:
        code = wait(run, JOB_DEADLINE_S)
        driver.stop()
        expect(
            driver.seen or code != 0,
            f"{JOB_SCRIPT} ({tag}) ended without ever starting a Spark driver",
            expected=f"a JVM running {SPARK_DRIVER} among the job's processes (pyspark starts it for the session)",
            found=f"{driver.looks} looks at its processes, none a Spark driver",
            hint="The job must run its query on Spark: SparkSession.builder ... getOrCreate() (or the course's "
            "spark_session()), readStream from Kafka, writeStream to Parquet.",
        )
    else:
        checkpoint = ctx.workdir / CHECKPOINT
        hour_ms = 3600 * 1000
        blocked, batch = None, fail_from
        no_links(ctx.workdir, CHECKPOINT, f"{CHECKPOINT}/commits", f"{CHECKPOINT}/offsets")
        deadline = time.monotonic() + JOB_DEADLINE_S
        while not run.ended() and time.monotonic() < deadline:
            if blocked is None and (now := batch_watermark(checkpoint, batch)) is not None:
                before = batch_watermark(checkpoint, batch - 1)
                if before is not None and now // hour_ms > before // hour_ms:  # it closes a window
                    no_links(ctx.workdir, CHECKPOINT, f"{CHECKPOINT}/commits")
                    try:  # a folder where Spark's commit file goes: the commit fails
                        make_dirs(ctx.workdir, f"{CHECKPOINT}/commits/{batch}", exclusive=True)
                        blocked = batch
                    except FileExistsError:  # it committed before the grader looked
                        pass
                if blocked is None:
                    batch += 1
            time.sleep(0.01)
        ended = run.proc.poll()
        driver.stop()
        stop(run.proc)
        no_links(ctx.workdir, CHECKPOINT, f"{CHECKPOINT}/commits")
        if blocked is not None and kind(ctx.workdir, f"{CHECKPOINT}/commits/{blocked}") == "folder":
            remove(ctx.workdir, f"{CHECKPOINT}/commits/{blocked}")
        if blocked is not None and ended not in (None, 0):
            expect(
                driver.seen,
                f"{JOB_SCRIPT} ({tag}) ran without ever starting a Spark driver",
                expected=f"a JVM running {SPARK_DRIVER} among the job's processes",
                found=f"{driver.looks} looks at its processes, none a Spark driver",
                hint="The job must run its query on Spark, not imitate its files.",
            )
            return f"{tag}: failed in micro-batch {blocked}, after its output and before its commit"
        if ended not in (None, 0) and blocked is None:  # it failed on its own: say why
            raise ended_early(
                run,
                f"before micro-batch {batch}, where the grader meant to make it fail",
                hint="Run the job's cell and read its whole error.",
            )
        why = (
            f"ended with exit 0 although its micro-batch {blocked} could not commit (does it catch the query's error?)"
            if ended == 0 and blocked is not None
            else "ended before it"
            if ended == 0
            else f"did not stop within {JOB_DEADLINE_S} s"
            if blocked is not None
            else f"had not reached micro-batch {batch} after {JOB_DEADLINE_S} s"
        )
        # The hint names what the checkpoint showed when the job ended first: no micro-batch where
        # it was told to keep them, too few (each reading too much), or none that closed an hour.
        hint = (
            "Read at most 100 records per micro-batch (maxOffsetsPerTrigger), keep the "
            f"checkpoint in {CHECKPOINT}/ and the output in {OUTPUT}/ (the arguments), and run "
            "the query with trigger(availableNow=True) until it ends."
        )
        if ended == 0 and blocked is None:
            logged = 0
            while logged < 10_000 and batch_watermark(checkpoint, logged) is not None:
                logged += 1

            def closes_an_hour(b: int) -> bool:
                now, before = batch_watermark(checkpoint, b), batch_watermark(checkpoint, b - 1)
                return now is not None and before is not None and now // hour_ms > before // hour_ms

            first_read = batch_end(checkpoint, 0)
            if logged == 0:
                hint = (
                    f"The job ran, yet {CHECKPOINT}/offsets/ holds no micro-batch: keep the query's checkpoint in "
                    "the folder the job is given (its third argument), the same every run, not a folder of its own."
                )
            elif logged <= fail_from:
                hint = (
                    f"The job's checkpoint holds {logged} micro-batch{'es' if logged != 1 else ''}"
                    + (f" (the first read {first_read} records)" if first_read is not None else "")
                    + ": too few, each reading too much. Read at most 100 records per micro-batch "
                    "(maxOffsetsPerTrigger=100) and run the query with trigger(availableNow=True), which keeps "
                    "that limit (trigger(once=True) reads everything in one)."
                )
            elif not any(closes_an_hour(b) for b in range(fail_from, logged)):
                hint = (
                    f"None of the job's micro-batches from {fail_from} on moved the watermark past the end of "
                    "an hour (its checkpoint's offsets log says each one's): give dep_time a watermark of 30 "
                    "minutes (withWatermark), so that each hour is written once it has passed."
                )
        raise CheckFailed(
            f"the grader meant to make {JOB_SCRIPT} fail in a micro-batch from {fail_from} on that "
            f"closes an hour's window, but it {why}",
            found=run.output()[-600:] if ended else None,
            hint=hint,
        )
    if code != 0:
        raise ended_early(
            run,
            hint="Run the job's cell and read its whole error; a restart must read the checkpoint the run before left.",
        )
    return f"{tag}: exit 0"


def java_binaries() -> set[str]:
    """The machine's JDK launchers (resolved), the ones a real Spark driver runs in."""
    import shutil

    from cluster.settings import env

    found = {shutil.which("java") or ""}
    if home := env("JAVA_HOME"):
        found.add(os.path.join(home, "bin", "java"))
    return {os.path.realpath(p) for p in found if p and os.path.exists(p)}


def is_spark_driver(p) -> bool:
    """A Spark driver as the grader sees it from outside: a process whose executable (the kernel's
    /proc/PID/exe, which the process cannot rename) is the JDK's java, with Spark's SparkSubmit as
    its main class. A command line alone proves nothing: any process can name SparkSubmit."""
    return main_class(p.cmdline()) == SPARK_DRIVER and os.path.realpath(p.exe()) in java_binaries()


JAVA_OPTIONS_WITH_VALUE = {"-cp", "-classpath", "--class-path", "-p", "--module-path", "--add-modules", "-jar"}


def main_class(args: list[str]) -> str | None:
    """The class a java command line runs: its first word after the JVM's options."""
    words = iter(args[1:])
    for word in words:
        if word in JAVA_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


class DriverWatch:
    """Whether a Spark driver ran among a script's processes: a thread looks at the process tree
    (in the sandbox when grading) every half second until stop(). With `events` (the folder the
    grader gave the driver for its event log), also which files there a driver held open: the
    event logs that driver wrote, not files another process put beside them."""

    def __init__(self, pid: int, events: Path | None = None):
        import threading

        self.pid, self.seen, self.looks = pid, False, 0
        self.events = os.path.realpath(events) if events is not None else None
        self.logs: set[str] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        import psutil

        while not (self.seen and (self.logs or self.events is None)) and not self._done.is_set():
            try:
                procs = psutil.Process(self.pid).children(recursive=True)
            except psutil.Error:
                procs = []
            for p in procs:
                try:
                    if is_spark_driver(p):
                        self.seen = True
                        if self.events is not None:
                            self.logs.update(
                                os.path.basename(f.path)
                                for f in p.open_files()
                                if os.path.dirname(f.path) == self.events
                            )
                except psutil.Error:
                    pass
            self.looks += 1
            self._done.wait(0.5)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)


# --- Spark's own account of the job: the event log the grader has its driver keep ------------
# The job's files say what any process can write: a footer naming parquet-mr, a _spark_metadata
# log and a checkpoint are a few lines each (a pyarrow job beside an idle Spark session, its
# footer patched, passed on them). So the grader has each run's driver keep Spark's event log
# (spark.eventLog.*, through PYSPARK_SUBMIT_ARGS) in a new folder of the grader's, and reads only
# the files there that the JVM it saw as the driver (/proc: the JDK's java running SparkSubmit)
# held open. Spark's listener bus writes in it each micro-batch's progress (its source's end
# offsets, its watermark, its sink) and each task's output (bytes and records, by micro-batch).
# That account must agree with what the grader reads itself: every micro-batch of the checkpoint's
# commit log reported with the offsets and watermark of its offset log, the last one at the end
# the brokers give for the topic, and the files of the sink's log exactly the bytes and rows
# Spark's tasks wrote. Faking it means writing Spark's events by hand into the log Spark is
# writing, consistent with the brokers and with the byte sizes of one's own Parquet files: far
# more than the ten lines of the query. Not the UI's REST API (the solution, like many jobs,
# turns the UI off, and a short run can end between two looks), nor a listener on a socket (none
# in Spark's jars reports micro-batches: it would take Java of the course's own).
EVENT_LOG_BYTES = 64 * 2**20  # of one run's event log (a lab's run writes 1 to 3 MB)
EVENT_LINE_BYTES = 4 * 2**20  # of one event (a query's plan: tens of kB)
MAX_EVENT_ITEMS = 100_000  # progress reports and stages kept from all the logs
EVENTS = {  # the events read (Spark writes "Event" first); every other line is skipped unparsed
    b'{"Event":"SparkListenerJobStart",': "job",
    b'{"Event":"SparkListenerTaskEnd",': "task",
    b'{"Event":"org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent",': "progress",
}
EVENT_LOG_HINT = (
    "The grader reads what Spark itself reports of the job, in the event log it has the job's driver keep: "
    "leave Spark's spark.eventLog.* settings and PYSPARK_SUBMIT_ARGS as they are."
)


def event_log_args(folder: Path) -> str:
    """PYSPARK_SUBMIT_ARGS for a driver that keeps its event log in `folder`: one file of JSON
    lines, uncompressed (nothing to decompress, so nothing to bound but the bytes read)."""
    conf = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": Path(folder).resolve().as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }
    return " ".join(f"--conf {shlex.quote(f'{k}={v}')}" for k, v in conf.items()) + " pyspark-shell"


def event_lines(workdir: Path, relative: Path):
    """An event log's lines, read a MiB at a time, as a file the student's code could write:
    at most EVENT_LOG_BYTES in all, none longer than EVENT_LINE_BYTES."""
    offset, rest = 0, b""
    while chunk := read_chunk(workdir, relative, offset):
        offset += len(chunk)
        expect(
            offset <= EVENT_LOG_BYTES,
            f"the Spark event log {relative.name} holds more than {EVENT_LOG_BYTES:,} bytes",
            hint=EVENT_LOG_HINT,
        )
        *lines, rest = (rest + chunk).split(b"\n")
        for line in (*lines, rest):
            expect(
                len(line) <= EVENT_LINE_BYTES,
                f"the Spark event log {relative.name} has a line of more than {EVENT_LINE_BYTES:,} bytes",
                hint=EVENT_LOG_HINT,
            )
        yield from lines
    if rest:
        yield rest


def spark_events(where: str | Path, logs: list) -> dict:
    """What the event logs (logs: [folder, [file names]] in the working folder) report of the
    streaming queries: each micro-batch's progress (query, batch, sink, its sources' end
    offsets, watermark) and what the tasks of each (query, micro-batch) wrote ([query, batch,
    bytes, records]); and the files the sink's log of OUTPUT/ lists ([files, bytes, rows]).
    Run in the grading's sandbox (in_sandbox): the logs and files are the student's to write."""
    import pyarrow.parquet as pq

    workdir = Path(where)
    progress: list[dict] = []
    writes: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    read: list[str] = []
    for folder, names in logs:
        for name in sorted(names)[:4]:
            # The driver renames its log from NAME.inprogress to NAME when it stops.
            found = [
                Path(folder, n)
                for n in (name.removesuffix(".inprogress"), name)
                if kind(workdir, Path(folder, n)) == "file"
            ]
            if not found:
                continue
            read.append(found[0].name)
            stages: dict[int | None, tuple[str, int]] = {}  # stage -> (query, micro-batch)
            try:
                for line in event_lines(workdir, found[0]):
                    what = next((w for prefix, w in EVENTS.items() if line.startswith(prefix)), None)
                    try:
                        event = json.loads(line) if what else None
                    except ValueError:
                        event = None
                    if not isinstance(event, dict):
                        continue
                    if what == "progress" and isinstance(p := event.get("progress"), dict):
                        progress.append(progress_report(p))
                    elif what == "job":  # a job of a micro-batch: its stages are the micro-batch's
                        query = entry(event, "Properties", "sql.streaming.queryId")
                        batch, ids = entry(event, "Properties", "streaming.sql.batchId"), event.get("Stage IDs")
                        if (
                            isinstance(query, str)
                            and isinstance(batch, str)
                            and batch.isdigit()
                            and isinstance(ids, list)
                        ):
                            stages.update((s, (query, int(batch))) for s in ids if whole(s) is not None)
                    elif what == "task" and (key := stages.get(whole(event.get("Stage ID")))) is not None:
                        if entry(event, "Task End Reason", "Reason") == "Success":
                            writes[key][0] += (
                                whole(entry(event, "Task Metrics", "Output Metrics", "Bytes Written")) or 0
                            )
                            writes[key][1] += (
                                whole(entry(event, "Task Metrics", "Output Metrics", "Records Written")) or 0
                            )
                    expect(
                        len(progress) + len(stages) <= MAX_EVENT_ITEMS,
                        f"the Spark event log {found[0].name} reports more than {MAX_EVENT_ITEMS:,} micro-batches and stages",
                        hint=EVENT_LOG_HINT,
                    )
            except RefusedPath as e:
                raise CheckFailed(
                    f"the Spark event log {found[0].name} could not be read: it {e.why}", hint=EVENT_LOG_HINT
                ) from None
    files = committed_files(workdir / OUTPUT) or []
    size = rows = 0
    for f in files:
        try:
            size += os.lstat(f).st_size
            rows += pq.ParquetFile(f).metadata.num_rows  # the footer only (output_rows read them first)
        except Exception:  # a file gone or torn since output_rows read it
            size = rows = -1
            break
    return {
        "read": read,
        "progress": progress,
        "writes": [[q, b, *v] for (q, b), v in writes.items()],
        "files": [len(files), size, rows],
    }


def entry(value, *keys):
    """value[k1][k2]... where each is a JSON object; None where one is not."""
    for k in keys:
        value = value.get(k) if isinstance(value, dict) else None
    return value


def progress_report(p: dict) -> dict:
    """One micro-batch's progress (a StreamingQueryProgress, as the event log holds it)."""
    ends = []
    sources = p.get("sources")
    for source in sources if isinstance(sources, list) else []:
        end = source.get("endOffset") if isinstance(source, dict) else None
        try:
            ends.append(json.loads(end) if isinstance(end, str) else end)
        except ValueError:
            ends.append(None)
    sink, times = p.get("sink"), p.get("eventTime")
    watermark = times.get("watermark") if isinstance(times, dict) else None
    return {
        "query": str(p.get("id")),
        "batch": whole(p.get("batchId")),
        "sink": sink.get("description") if isinstance(sink, dict) else None,
        "ends": ends,
        "watermark": watermark if isinstance(watermark, str) else None,
    }


def sink_folder(description) -> str | None:
    """The folder a file sink writes, from its description in a progress report:
    "FileSink[file:/path/hourly]" -> "/path/hourly"."""
    if not isinstance(description, str) or not description.startswith("FileSink[") or not description.endswith("]"):
        return None
    path = description[len("FileSink[") : -1].removeprefix("file:")
    return os.path.normpath("/" + path.lstrip("/"))


def iso_ms(text) -> int | None:
    """A progress report's time ("2013-01-05T12:20:00.000Z") in epoch milliseconds."""
    try:
        t = datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def spark_did_it(ctx: Context, topic: str, history: list[str]) -> None:
    """Spark's own account of the job's runs (its event logs) agrees with the checkpoint, the
    brokers and the files of the sink's log."""
    runs = ctx.scratch.get("lab9-event-logs", [])
    blind = [tag for tag, _, logs in runs if not logs]
    expect(
        bool(runs) and not blind,
        f"{JOB_SCRIPT}'s Spark driver kept no event log in the folder the grader gave it ({', '.join(blind)})",
        expected="Spark's event log of every run, in the folder of PYSPARK_SUBMIT_ARGS's spark.eventLog.dir",
        hint=EVENT_LOG_HINT,
    )
    account = in_sandbox.call(
        ctx,
        "selfcheck.checks.lab9:spark_events",
        str(ctx.workdir),
        [[Path(f).name, sorted(logs)] for _, f, logs in runs],
    )
    output = os.path.realpath(ctx.workdir / OUTPUT)
    reports = [p for p in account["progress"] if sink_folder(p["sink"]) == output]
    queries = {p["query"] for p in reports}
    reported = defaultdict(list)
    for p in reports:
        reported[p["batch"]].append((p["ends"], iso_ms(p["watermark"])))
    checkpoint = ctx.workdir / CHECKPOINT
    no_links(ctx.workdir, CHECKPOINT, f"{CHECKPOINT}/offsets", f"{CHECKPOINT}/commits")
    names = list_dir(ctx.workdir, Path(CHECKPOINT, "commits")) or []
    committed = sorted(int(n) for n in names[:10_000] if n.isdigit())
    unreported = [
        b
        for b in committed
        if ([checkpoint_entry(checkpoint, "offsets", b, 2)], batch_watermark(checkpoint, b)) not in reported[b]
    ]
    last = batch_end(checkpoint, committed[-1]) if committed else None
    end = end_offsets(ctx, short_name(topic)).get(0)
    wrote = [w for w in account["writes"] if w[0] in queries]
    spark_bytes, spark_rows = sum(w[2] for w in wrote), sum(w[3] for w in wrote)
    files, size, rows = account["files"]
    expect(
        bool(reports) and not unreported and last == end and (spark_bytes, spark_rows) == (size, rows),
        f"what Spark reported of {JOB_SCRIPT} after {'; '.join(history)} (the event logs its driver kept for the grader), "
        f"against {CHECKPOINT}/, the topic and {OUTPUT}/",
        expected="a streaming query writing to " + OUTPUT + "/ that reported every micro-batch of the checkpoint's "
        "commit log with the offsets and watermark of its offset log, read the topic to its end, and wrote exactly "
        "the bytes and rows of the files the sink's log lists",
        found=f"{len(reports)} micro-batch reports of a query writing {OUTPUT}/ in {len(account['read'])} event logs"
        f"; committed micro-batches not reported so: {len(unreported)} e.g. {unreported[:3]}"
        f"; last offset read {last}, the topic's end {end}"
        f"; Spark's tasks wrote {spark_bytes:,} bytes and {spark_rows} rows, "
        f"the {files} files of the sink's log hold {size:,} bytes and {rows} rows",
        hint="Let one Spark Structured Streaming query, in the job's own driver, do the work: readStream from Kafka, "
        "writeStream to Parquet in the folder and with the checkpoint the job is given. The grader believes what "
        "Spark reports of it, not files written another way.",
    )


def from_ms(ms: int) -> datetime | None:
    """A watermark of Spark's checkpoint (epoch milliseconds) as this module's naive UTC times."""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError):
        return None


def watermark_moves(ctx: Context, topic: str) -> list[tuple[int, timedelta | None]]:
    """Every time the job's watermark moved, from its checkpoint: (the micro-batch that ran with
    the new one, how far it stayed behind the latest event time of the records the micro-batch
    before it read; None if that one read none). Spark moves it only so, after a micro-batch that
    ran; a re-run micro-batch that the file sink skips, or one that read nothing, leaves it where it
    was. The records are read back from the topic (one partition) by the offsets each micro-batch
    logged."""
    checkpoint = ctx.workdir / CHECKPOINT
    no_links(ctx.workdir, CHECKPOINT, f"{CHECKPOINT}/offsets")
    times = {r.offset: when(json.loads(r.value)) for r in read_all(ctx, short_name(topic))}
    moves, batch, start = [], 0, 0
    while (after := batch_watermark(checkpoint, batch + 1)) is not None:
        end = batch_end(checkpoint, batch)
        if after != batch_watermark(checkpoint, batch):
            read = [times[o] for o in range(start, end or start) if o in times]
            moved_to = from_ms(after)
            moves.append((batch + 1, max(read) - moved_to if read and moved_to else None))
        start, batch = end if end is not None else start, batch + 1
    return moves


def delay_text(delay: timedelta | None) -> str:
    return "after a micro-batch that read nothing" if delay is None else f"{delay.total_seconds() / 60:g} minutes"


def keeps_30_minutes(ctx: Context, topic: str, history: list[str]) -> None:
    """Every move of the job's watermark kept it 30 minutes behind the latest flight read."""
    moves = watermark_moves(ctx, topic)
    wrong = [(batch, delay) for batch, delay in moves if delay != WATERMARK]
    expect(
        bool(moves) and not wrong,
        f"the watermark of {JOB_SCRIPT} in its checkpoint after {'; '.join(history)}",
        expected="30 minutes behind the latest flight read, every time it moved",
        found="it never moved"
        if not moves
        else "; ".join(f"micro-batch {b} ran with one {delay_text(d)} behind" for b, d in wrong[:3]),
        hint='hourly_delays in the job starts with withWatermark("dep_time", "30 minutes"), as in the '
        "notebook, in every run: Spark writes an hour once the latest event time minus 30 minutes has "
        "passed its end.",
    )


def job_watermarks(ctx: Context) -> tuple[datetime | None, datetime | None]:
    """After a run that ended well: the watermark its last micro-batch ran with (Spark had
    written, and forgotten, every window ending at or before it) and the one the next micro-batch
    will run with (the commit log's nextBatchWatermarkMs); None where the checkpoint lacks it."""
    checkpoint = ctx.workdir / CHECKPOINT
    no_links(ctx.workdir, CHECKPOINT, f"{CHECKPOINT}/offsets", f"{CHECKPOINT}/commits")

    def last_batch(folder: str) -> int | None:
        try:
            return max(
                (int(f) for f in list_dir(checkpoint.parent, Path(checkpoint.name, folder)) or [] if f.isdigit()),
                default=None,
            )
        except OSError:
            return None

    batch = last_batch("commits")
    if batch is None or batch != last_batch("offsets"):
        return None, None
    written, following = batch_watermark(checkpoint, batch), next_watermark(checkpoint, batch)
    return (None if written is None else from_ms(written)), (None if following is None else from_ms(following))


def late_events(ctx: Context, written: datetime, watermark: datetime, day: str) -> tuple[dict, dict]:
    """Two flights the grader adds after the first runs, both older than the job's watermark,
    minutes either side of a window's end: one just before the end of the last hour the job has
    written (its window is final and forgotten: Spark must drop it), one a few minutes older than
    the watermark but in the first hour still open (Spark drops late rows by window, not by their
    own time: it must count). Spark forgets a window in the micro-batch after the one that moved
    the watermark past its end, so the grader places the first by `written`, the watermark the
    job's last micro-batch ran with: a window between it and `watermark` could go either way."""
    origin = ctx.rng.choice(["EWR", "JFK", "LGA"])
    make = lambda at, delay: {
        "id": f"{day} {FAKE_CARRIER}{ctx.rng.randrange(1000, 10000)} {origin}",
        "carrier": FAKE_CARRIER,
        "origin": origin,
        "dest": "ORD",
        "tailnum": None,
        "dep_delay": delay,
        "dep_time": iso(at),
    }
    dropped = make(hour_of(written) - timedelta(minutes=ctx.rng.randrange(1, 10)), ctx.rng.randrange(100, 400))
    counted = make(
        max(hour_of(watermark), watermark - timedelta(minutes=ctx.rng.randrange(1, 10))), ctx.rng.randrange(100, 400)
    )
    return dropped, counted


@check("lab9-q3")
def job_exactly_once(ctx: Context) -> str:
    """the streaming job, failed mid-stream and restarted, then fed late flights, writes exactly the hourly truth"""
    for name in (OUTPUT, CHECKPOINT):
        remove(ctx.workdir, name)
    ctx.scratch["lab9-event-logs"] = []  # each run's (tag, event log folder, the driver's logs there)
    events = graders_flights(ctx)
    day = events[0]["id"][:10]
    cut = len(events) // 2
    first, rest = events[:cut], events[cut:]
    # One partition: Spark splits a micro-batch across partitions by records waiting, not by time,
    # and the watermark is one for all; with the flights keyed by airport in three partitions, a
    # job with small micro-batches could fall behind it in one partition and rightly drop flights.
    topic = flights_topic(ctx, first, partitions=1)
    history = [run_job(ctx, topic, "run 1", fail_from=ctx.rng.choice([2, 3]))]
    keeps_30_minutes(ctx, topic, history)
    history.append(run_job(ctx, topic, "run 2 (restart)"))
    written, watermark = job_watermarks(ctx)
    expect(
        written is not None and watermark is not None and hour_of(written) > when(first[0]),
        f"hours written by {JOB_SCRIPT} after {'; '.join(history)}",
        expected="a checkpoint whose last micro-batch ran with a watermark past the end of an hour",
        found=f"last micro-batch's watermark {written}, the next one's {watermark}",
        hint="Keep the checkpoint in the folder the job is given, and run the query with "
        "trigger(availableNow=True) until it ends.",
    )
    assert written is not None and watermark is not None  # expect() raised otherwise
    dropped, counted = late_events(ctx, written, watermark, day)
    send(ctx, topic, ctx.rng.sample([dropped, counted], 2) + rest)  # both in run 3's first micro-batch
    history.append(run_job(ctx, topic, "run 3 (late flights and the rest of the day)"))
    # The truth: every flight but the dropped one; windows are written once the watermark
    # (the latest event time minus 30 minutes) has passed their end. The last hour or two
    # may still be open, so they may be missing; rows that are there must be right.
    truth = hourly_truth(events + [counted])
    watermark = when(events[-1]) - WATERMARK
    required = {k for k in truth if datetime.strptime(k[0], "%Y-%m-%d %H:%M:%S") + 2 * WINDOW <= watermark}
    found = read_output(ctx)
    spark_did_it(ctx, topic, history)
    key = lambda e: (str(hour_of(when(e))), e["origin"])
    flights = {(str(h), o): f for h, o, f, _ in found}
    # what the late flights' rows hold when the first is counted, or the second dropped
    counted_late = flights.get(key(dropped)) == hourly_truth(events + [dropped])[key(dropped)][0]
    dropped_open = key(counted) in flights and flights[key(counted)] == hourly_truth(events).get(key(counted), (0,))[0]
    hint = (
        f"The job counted the late flight at {dropped['dep_time']}, in an hour it had already written: "
        "with a Parquet sink in append mode Spark forgets a written hour and drops what comes later for it. "
        "Does the job write hours some other way?"
        if counted_late
        else f"The job dropped the late flight at {counted['dep_time']}, whose hour was still open: the watermark "
        "was past the flight's own time but not past its hour's end, and Spark drops late rows by window. "
        "Does the job drop rows by their own time?"
        if dropped_open
        else "Some hours are there twice: did each run write its own copy? Let the file sink and the checkpoint "
        "decide what is written, so a restarted run repeats nothing."
        if len({(str(h), o) for h, o, _, _ in found}) < len(found)
        else "Some hours are missing or wrong: does a restart start from the checkpoint (the same folder every "
        "run), and does every run read the topic from the earliest offset the first time?"
    )
    compare_hourly(
        found,
        truth,
        required,
        f"{OUTPUT}/ after {'; '.join(history)}; the late flight at {dropped['dep_time']} should be "
        f"dropped (its hour was written before it came), the one at {counted['dep_time']} counted "
        f"(older than the watermark, but its hour, {key(counted)[0]} at {key(counted)[1]}, still open)",
        hint,
    )
    keeps_30_minutes(ctx, topic, history)  # in every run, the late flights' included
    return "; ".join(history)


# What section 5's demo shows, whatever the machine: the rule of append mode and the watermark.
LATE_TRUTH = {"closed": False, "open": True}


@check("lab9-q3-prediction")
def late_flights_prediction(ctx: Context) -> str:
    """a prediction of whether each of section 5's late flights is counted in its hour was written before the demo"""
    predicted = predicted_booleans(
        ctx, "predicted_counted", LATE_TRUTH, "whether each of section 5's late flights is counted in its hour"
    )
    return prediction_feedback(
        "predicted_counted",
        {k: predicted[k] for k in LATE_TRUTH},
        LATE_TRUTH,
        "Append mode writes an hour once the watermark passes its end and never again, so a flight for it that "
        "comes later is dropped; an hour still open takes a late flight whatever its own time (the watermark "
        "drops by window, not by event).",
    )
