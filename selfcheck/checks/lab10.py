"""Lab 10, Spark streams that meet: a stream joined to a table of the grader's (every flight
kept once, with the name its airline had when it left), two streams joined whose state must not
grow forever (flights with their hour's weather), and a foreachBatch sink that must stay right
when Spark replays a micro-batch.

Every check reads flights the grader wrote itself, with lab 9's generator: a seeded day of
January (not the day the notebook uses) with flights of a made-up carrier mixed in, and weather
reports with seeded temperatures, and airline names with a seeded tag that change during the day,
so answers worked out from the public dataset cannot match."""

from __future__ import annotations

import sqlite3
import time
from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta, UTC
from pathlib import Path

from . import CheckFailed, Context, check, expect, in_sandbox, prediction, prediction_feedback
from .kafka_state import graders_topic
from .flights import (
    FAKE_CARRIER,
    SCHEMA,
    TIME_FORMAT,
    WINDOW,
    close,
    flights_topic,
    graders_flights,
    hour_of,
    iso,
    send,
    when,
)
from .spark_labs import MAX_OUTPUT_ROWS, SPARK_POLICY, SPARK_VALUE_S, no_links

# One Spark driver a grading (the kernel's: every part runs its queries there), with the Spark labs'
# room for threads and memory; no job script, so the checks need less time.
POLICY = replace(SPARK_POLICY, checks_budget_s=3 * SPARK_VALUE_S + 120)
FLIGHTS = "__import__('selfcheck.checks.flights', fromlist=['_'])"  # the grader's flights, in the kernel
IN_KERNEL = "__import__('selfcheck.checks.lab10', fromlist=['_'])"  # this module, in the student's kernel
IN_SANDBOX = ("sqlite_rows", "sqlite_clear", "sqlite_insert")  # they open the student's SQLite file


def when_reported(report: dict) -> datetime:
    """The hour a weather report describes (lab10-q2)."""
    return datetime.strptime(report["time_hour"], TIME_FORMAT)


# --- lab10-q1: a stream joined to a table whose rows change over time ------------------------

NAMES_SCHEMA = "carrier STRING, name STRING, since TIMESTAMP, until TIMESTAMP"
SINCE_EVER = datetime(2013, 1, 1)  # the names in use when the data starts
PREDICTED_ROWS = 2  # the notebook's demo: one flight of an airline with two names, joined on the code alone


def names_table(rows: list[list]):
    """Run in the student's kernel: the grader's names, as a table of NAMES_SCHEMA (times UTC)."""
    from cluster.spark import spark_session

    def at(text):
        return None if text is None else datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC)

    return spark_session().createDataFrame([(c, n, at(s), at(u)) for c, n, s, u in rows], NAMES_SCHEMA)


def graders_names(ctx: Context, events: list[dict]) -> list[list]:
    """The course's airlines with a seeded tag in each name, as versions (carrier, name, since,
    until): one carrier of the day missing, one renamed at a seeded moment between its flights, one
    whose only name starts halfway through its flights (those before have no name). The rename and
    the late start each fall on the very minute one of that carrier's flights left (a seeded one of
    the middle half), where the text's bounds differ from others: with since <= dep_time < until
    that flight has the new name only; an inclusive `until` (between) gives it both names, an
    exclusive `since` neither."""
    from cluster.lab import airlines

    tag = f" #{ctx.rng.randrange(1000, 10000)}"
    busy: dict[str, set[datetime]] = defaultdict(set)
    for e in events:
        if e["carrier"] != FAKE_CARRIER:
            busy[e["carrier"]].add(when(e))
    often = sorted(c for c, times in busy.items() if len(times) >= 4)
    renamed, late = ctx.rng.sample(often, 2)
    gone = ctx.rng.choice(sorted(set(busy) - {renamed, late}))

    def on_a_flight(times: set[datetime]) -> datetime:
        """A seeded departure minute of the middle half (the carrier's flights left before it and after)."""
        moments = sorted(times)
        return moments[ctx.rng.randrange(len(moments) // 4, 3 * len(moments) // 4)]

    rows = []
    for a in airlines():
        c, name = a["carrier"], a["name"] + tag
        if c == gone:
            continue
        if c == renamed:
            at = on_a_flight(busy[c])
            rows += [[c, name, iso(SINCE_EVER), iso(at)], [c, f"{a['name']} (renamed){tag}", iso(at), None]]
        elif c == late:
            rows.append([c, name, iso(on_a_flight(busy[c])), None])
        else:
            rows.append([c, name, iso(SINCE_EVER), None])
    return rows


def on_a_bound(rows: list[list], event: dict) -> bool:
    """Whether the flight left at the very moment one of its carrier's names took effect or
    stopped (no flight leaves at SINCE_EVER): where the bounds' rule alone decides its name."""
    return any(c == event["carrier"] and event["dep_time"] in (since, until) for c, _, since, until in rows)


def name_then(rows: list[list], carrier: str, t: datetime) -> str | None:
    """The name a carrier had at t: since <= t < until (until None: still in use)."""
    for c, name, since, until in rows:
        if c == carrier and datetime.strptime(since, TIME_FORMAT) <= t:
            if until is None or t < datetime.strptime(until, TIME_FORMAT):
                return name
    return None


@check("lab10-q1", kernel_runs="the question runs Spark, a child of the kernel")
def joins_airline_names(ctx: Context) -> None:
    """with_airline(flights, names) gives every flight, once, the name its airline had when it left, and keeps flights without one"""
    events = graders_flights(ctx)
    topic = flights_topic(ctx, events)
    table = graders_names(ctx, events)
    names = f"{IN_KERNEL}.names_table({table!r})"
    parsed = f"{FLIGHTS}.reference_flights({topic!r})"
    rows = ctx.sub.value(
        f"[(r['id'], r['name']) for r in with_airline({parsed}, {names}).collect()]", timeout=SPARK_VALUE_S
    )
    expect(
        isinstance(rows, list),
        "with_airline(flights, names) should return a DataFrame with a name column",
        found=str(rows)[:200],
    )
    want = {e["id"]: name_then(table, e["carrier"], when(e)) for e in events}
    got: dict[str, list] = defaultdict(list)
    for flight, name in rows:
        got[flight].append(name)
    nameless = sorted(i for i, name in want.items() if name is None)
    dropped = sorted(set(nameless) - set(got))
    expect(
        not dropped,
        f"flights whose carrier had no name in names when they left, on {topic}",
        expected="every one kept, with no name (None)",
        found=f"{len(dropped)} missing, e.g. {dropped[:2]}",
        hint="A flight that finds no row in names must stay in the result: an inner join drops it, so a new "
        "airline's flights would vanish from everything downstream. Keep every flight (a left join, the "
        "stream on the left).",
    )
    twice = sorted(i for i, found in got.items() if len(found) > 1)
    # Where the check saw the mistake: only on the flights that left at the very moment of a
    # rename (the bounds' rule), or on others too (a condition without the time, or a wrong one).
    event_of = {e["id"]: e for e in events}
    at_bounds = lambda ids: bool(ids) and all(i in event_of and on_a_bound(table, event_of[i]) for i in ids)
    expect(
        not twice,
        f"flights that come out more than once, on {topic}",
        expected="each flight once",
        found=f"{len(twice)}, e.g. {twice[0]} with {got[twice[0]]}" if twice else "none",
        hint="Only flights that left at the very moment their airline was renamed come out twice: they meet "
        "the old name and the new one. until is excluded (the old name stopped at that moment) and since "
        "included: since <= dep_time < until. between(since, until) includes both ends."
        if at_bounds(twice)
        else "An airline renamed during the day has two rows in names: joined on the code alone, each of its "
        "flights meets both. Join on the carrier and on the time: since <= dep_time < until (until null: "
        "the name still in use).",
    )
    # The names are the grader's table, renamed at its own moments: a wrong flight is shown with the
    # notebook's name for it, never the right one.
    wrong = sorted((i, got[i][0]) for i in want if i in got and got[i][0] != want[i])
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    expect(
        not (wrong or missing or extra),
        f"(id, name) of the flights on {topic}",
        expected="every flight once, with the name its airline had in the names given when it left",
        found=f"wrong names: {len(wrong)} e.g. (id, your name) {wrong[:1]}; missing: {missing[:2]}; "
        f"not expected: {extra[:2]}",
        hint="Only flights that left at the very moment a name took effect (or stopped) have a wrong name or "
        "none: since is included and until excluded, so such a flight has the name that starts then "
        "(since <= dep_time < until; not since < dep_time, nor dep_time <= until)."
        if not extra and at_bounds([i for i, _ in wrong] + missing)
        else "Use the names table you are given (the grader's differs from the course's, and changes names "
        "during the day): a flight takes the row of its carrier whose since <= dep_time < until.",
    )


@check("lab10-q1-prediction")
def rows_per_flight_prediction(ctx: Context) -> str:
    """a prediction of how many rows one flight of a renamed airline gives, joined on the code alone, was written before the demo"""
    predicted = prediction(
        ctx,
        "predicted_rows",
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        "a whole number, e.g. 1",
        "how many rows one flight of an airline with two names gives, joined on the code alone",
    )
    return prediction_feedback(
        "predicted_rows",
        predicted,
        PREDICTED_ROWS,
        "A join pairs each row with every row of the other side that meets the condition: on the code "
        "alone, a flight meets each name its airline ever had.",
    )


# --- lab10-q2: two streams joined, flights with the weather of their airport and hour ---------

WEATHER_SCHEMA = "origin STRING, time_hour TIMESTAMP, temp DOUBLE, wind_speed DOUBLE, visib DOUBLE, precip DOUBLE"
JOINED = ("id", "temp", "wind_speed", "visib")  # the columns lab10-q2 reads from the join
MOVED_ON = timedelta(days=3)  # how far past the day the grader's last reports move the watermark
STATE_AFTER = 4  # rows a join may keep once the stream has moved on: the last reports
_QUERIES: dict = {}  # in the kernel: the grader's running queries, by name


def reference_stream(topic: str, schema: str):
    """Run in the student's kernel: the topic as a stream of the schema's columns, parsed here."""
    from pyspark.sql import functions as F

    from cluster.spark import kafka_options, spark_session

    raw = spark_session().readStream.format("kafka").options(**kafka_options(topic, startingOffsets="earliest")).load()
    return raw.select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select("e.*")


def start_join(with_weather, flights_topic: str, weather_topic: str, name: str) -> str:
    """Run in the student's kernel: the student's join of the two topics' streams, written to a
    memory table `name` in append mode (the only mode of a stream-stream inner join)."""
    import tempfile

    joined = with_weather(reference_stream(flights_topic, SCHEMA), reference_stream(weather_topic, WEATHER_SCHEMA))
    query = (
        joined.select(*JOINED)
        .writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .option("checkpointLocation", tempfile.mkdtemp(prefix="lab10-q2-"))
        .start()
    )
    _QUERIES[name] = query
    return str(query.id)


def settle(name: str) -> dict:
    """Run in the student's kernel: wait until the query has processed what the topics hold,
    including the batch without data that Spark runs to apply a new watermark (it evicts state
    there); then the rows in its state."""
    query = _QUERIES[name]
    query.processAllAvailable()
    deadline = time.monotonic() + 30
    while query.status["isDataAvailable"] or query.status["isTriggerActive"]:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    progress = query.lastProgress or {}
    return {
        "batch": progress.get("batchId"),
        "watermark": progress.get("eventTime", {}).get("watermark"),
        "state_rows": sum(op.get("numRowsTotal", 0) for op in progress.get("stateOperators", [])),
    }


def joined_rows(name: str) -> list[tuple]:
    """Run in the student's kernel: the memory table's rows, the query stopped."""
    from cluster.spark import spark_session

    rows = [tuple(r) for r in spark_session().table(name).collect()]
    _QUERIES.pop(name).stop()
    return rows


def flight_hours(events: list[dict]) -> set[tuple[str, str]]:
    """The (origin, hour as report text) of every flight: the reports some flight can meet."""
    return {(e["origin"], iso(hour_of(when(e)))) for e in events}


def graders_weather(ctx: Context, events: list[dict], whole: datetime | None = None) -> list[dict]:
    """The reports of the events' day, each temperature moved by a seeded amount and three
    reports of hours with flights left out (those flights then meet no weather: an outer join
    shows), none of the hour `whole`, so answers from the public dataset cannot match."""
    from cluster.lab import weather

    reports = weather(day=int(events[0]["id"][8:10]))
    busy = flight_hours(events)
    left_out = set(
        ctx.rng.sample(
            [
                i
                for i, r in enumerate(reports)
                if (r["origin"], r["time_hour"]) in busy and (whole is None or when_reported(r) != whole)
            ],
            3,
        )
    )
    return [
        dict(r, temp=round(r["temp"] + ctx.rng.uniform(-4, 4), 2) if r["temp"] is not None else None)
        for i, r in enumerate(reports)
        if i not in left_out
    ]


def held_back(ctx: Context, events: list[dict], reports: list[dict], hour: datetime) -> dict:
    """A seeded report of `hour` at an airport with flights in that hour, which the grader sends
    in a later micro-batch than the other airports' reports of that hour: a watermark of 0
    seconds has passed it by then (Spark drops rows at or below the watermark)."""
    busy = flight_hours(events)
    of_hour = [r for r in reports if when_reported(r) == hour]
    return ctx.rng.choice([r for r in of_hour if (r["origin"], r["time_hour"]) in busy and len(of_hour) > 1])


@check("lab10-q2", kernel_runs="the question runs Spark, a child of the kernel")
def joins_the_weather(ctx: Context) -> str:
    """with_weather(flights, weather) joins two streams: each flight with the report of its airport and hour, and a state that does not grow forever"""
    events = graders_flights(ctx)
    middle = hour_of(when(events[len(events) // 2]))
    reports = graders_weather(ctx, events, whole=middle - 2 * WINDOW)
    # one partition each: records reach Spark in the order sent, so no flight or report falls
    # behind the watermark because its partition lagged (the check is about the join, not that)
    flights_at, weather_at = (graders_topic(ctx, name, 1, retention_ms="-1") for name in ("flights", "weather"))
    # Steps, so that each side must wait in the join's state for the other: first the morning's
    # flights with the reports of all but their last hour (those flights wait), but for one
    # airport's report of the last reported hour, sent alone next, after the others' of its hour
    # (a watermark of 0 s has passed it); then every other report (the afternoon's wait); then
    # the afternoon's flights. A join that reads either side as a table misses flights.
    late = held_back(ctx, events, reports, middle - 2 * WINDOW)
    name = f"grader_weather_{ctx.rng.randrange(10**6)}"
    steps = []
    for i, (flights, weather) in enumerate(
        (
            (
                [e for e in events if when(e) < middle],
                [r for r in reports if when_reported(r) < middle - WINDOW and r is not late],
            ),
            ([], [late]),
            ([], [r for r in reports if when_reported(r) >= middle - WINDOW]),
            ([e for e in events if when(e) >= middle], []),
        )
    ):
        send(ctx, flights_at, flights)
        send(ctx, weather_at, weather)
        if i == 0:
            ctx.sub.value(
                f"{IN_KERNEL}.start_join(with_weather, {flights_at!r}, {weather_at!r}, {name!r})", timeout=SPARK_VALUE_S
            )
        steps.append(ctx.sub.value(f"{IN_KERNEL}.settle({name!r})", timeout=SPARK_VALUE_S))
    # Days later, a flight and a report that meet nothing: they move the watermark past the whole
    # day. Then a flight of the day's first reported hour, days late: a join whose watermarks let
    # go of the day has forgotten that report; one that keeps everything joins it.
    later = hour_of(when(events[-1])) + MOVED_ON
    send(
        ctx,
        flights_at,
        [
            {
                "id": "the watermark moves on",
                "carrier": FAKE_CARRIER,
                "origin": "BOS",
                "dest": "ORD",
                "tailnum": None,
                "dep_delay": 0,
                "dep_time": iso(later + timedelta(minutes=30)),
            }
        ],
    )
    send(
        ctx,
        weather_at,
        [{"origin": "SEA", "time_hour": iso(later), "temp": 50.0, "wind_speed": 5.0, "visib": 10.0, "precip": 0.0}],
    )
    steps.append(ctx.sub.value(f"{IN_KERNEL}.settle({name!r})", timeout=SPARK_VALUE_S))
    first = next(r for r in reports if r is not late)
    days_late = {
        "id": f"{first['time_hour'][:10]} {FAKE_CARRIER}1 {first['origin']} days late",
        "carrier": FAKE_CARRIER,
        "origin": first["origin"],
        "dest": "ORD",
        "tailnum": None,
        "dep_delay": 0,
        "dep_time": iso(when_reported(first) + timedelta(minutes=10)),
    }
    send(ctx, flights_at, [days_late])
    steps.append(ctx.sub.value(f"{IN_KERNEL}.settle({name!r})", timeout=SPARK_VALUE_S))
    rows = ctx.sub.value(f"{IN_KERNEL}.joined_rows({name!r})", timeout=SPARK_VALUE_S)

    report_of = {(r["origin"], r["time_hour"]): r for r in reports}
    want = {}
    for e in events:
        r = report_of.get((e["origin"], iso(hour_of(when(e)))))
        if r is not None:
            want[e["id"]] = (r["temp"], r["wind_speed"], r["visib"])
    got: dict[str, list] = defaultdict(list)
    for row in rows:
        got[row[0]].append(tuple(row[1:]))
    expect(
        days_late["id"] not in got,
        "a flight sent three days after the others, of an hour whose report came on time",
        expected="left out: the watermarks have passed its hour, the join forgot the report",
        found=f"joined with {got.get(days_late['id'], [None])[0]}",
        hint="The join still holds the day's reports days later: give both streams a watermark of hours, not "
        "days (and none is no better: Spark then keeps every row forever), and bound dep_time by the "
        "report's hour.",
    )
    twice = sorted(i for i, found in got.items() if len(found) > 1)
    expect(
        not twice,
        f"flights joined with more than one report, on {flights_at} and {weather_at}",
        expected="each flight once, with the report of the hour it left",
        found=f"{len(twice)} e.g. {twice[:2]}",
        hint="Bound the join in time on both sides: a report's time_hour <= dep_time < time_hour + 1 hour "
        "(and the same origin), so a flight meets only its own hour's report.",
    )
    same = lambda a, b: a == b or (a is not None and b is not None and close(float(a), float(b)))
    # The reports are the grader's (every temperature moved): a wrong flight is shown with the
    # notebook's values, never its report's.
    wrong = sorted(
        (i, got[i][0]) for i, w in want.items() if i in got and not all(same(x, y) for x, y in zip(got[i][0], w))
    )
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    expect(
        not (wrong or missing or extra),
        f"the flights of {flights_at} joined with the reports of {weather_at}",
        expected="every flight that has a report of its origin and hour, once, with that report's (temp, "
        "wind_speed, visib)",
        found=f"{len(got)}; wrong values: {len(wrong)} e.g. (id, yours) {wrong[:1]}; missing: {len(missing)} e.g. "
        f"{missing[:2]}; not expected: {len(extra)} e.g. {extra[:2]}",
        hint="Join the two streams you are given (the checks move every temperature, so tables of the "
        "public data do not match) on origin and the hour the flight left; an inner join (a flight "
        "without a report is left out). Read both as the streams you are given (each side waits for "
        "the other), and give each a watermark longer than its lateness (reports come an hour late, "
        "an airport's sometimes after the others' of that hour) so no row is dropped before its partner "
        "arrives.",
    )
    state = steps[-1]["state_rows"]
    expect(
        state <= STATE_AFTER,
        "rows the join keeps in its state once the stream is days past the grader's flights",
        expected=f"at most {STATE_AFTER} (the last flight and report)",
        found=f"{state} rows",
        hint="Without a watermark on both streams and a time bound in the join condition, Spark must keep "
        "every flight and report forever, in case a match arrives: memory grows without end. Add "
        "withWatermark to both sides and bound dep_time by the report's hour.",
    )
    return (
        f"{len(want)} flights joined; rows in the join's state after each step: "
        f"{', '.join(str(s['state_rows']) for s in steps)}"
    )


# --- lab10-q3: foreachBatch into a table, right when a micro-batch is run twice ---------------

TABLE_FILE, TABLE = "delays.db", "hourly"
BATCH_SCHEMA = "hour TIMESTAMP, origin STRING, flights BIGINT, avg_delay DOUBLE"


def batch_frame(rows: list[list]):
    """Run in the student's kernel: a micro-batch of an update-mode query, as foreachBatch gets it."""
    from cluster.spark import spark_session

    return spark_session().createDataFrame(
        [(datetime.strptime(h, TIME_FORMAT).replace(tzinfo=UTC), o, f, a) for h, o, f, a in rows], BATCH_SCHEMA
    )


def table_rows(ctx: Context) -> list[tuple]:
    """The student's table, read in the grading's sandbox (a file the student's code wrote)."""
    return [tuple(r) for r in in_sandbox.call(ctx, "selfcheck.checks.lab10:sqlite_rows", str(ctx.workdir))]


def sqlite_rows(workdir: str) -> list[tuple]:
    path = Path(workdir) / TABLE_FILE
    no_links(Path(workdir), TABLE_FILE)
    expect(
        path.is_file(),
        f"save_batch wrote no {TABLE_FILE} in the notebook's folder",
        hint=f'Open sqlite3.connect("{TABLE_FILE}") in save_batch and write the batch\'s rows to a table {TABLE}.',
    )
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            rows = db.execute(
                f"SELECT hour, origin, flights, avg_delay FROM {TABLE} LIMIT {MAX_OUTPUT_ROWS + 1}"
            ).fetchall()
    except sqlite3.Error as e:
        raise CheckFailed(
            f"{TABLE_FILE} has no readable table {TABLE} (hour, origin, flights, avg_delay): {e}",
            hint=f"Create the table in save_batch if it is not there: CREATE TABLE IF NOT EXISTS {TABLE} "
            "(hour TEXT, origin TEXT, flights INTEGER, avg_delay REAL, PRIMARY KEY (hour, origin)).",
        ) from None
    expect(
        len(rows) <= MAX_OUTPUT_ROWS,
        f"{TABLE} holds more than {MAX_OUTPUT_ROWS:,} rows",
        hint="Keep one row per hour and airport.",
    )
    return rows


HOUR_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H")


def hour_in_table(value) -> datetime | None:
    """An hour as a table may hold it ("2013-01-05 14:00:00", "2013-01-05T14:00:00Z",
    "2013-01-05 14:00", ...); None for anything else."""
    text = str(value).strip().replace("T", " ").removesuffix("Z").removesuffix("+00:00")
    for form in HOUR_FORMATS:
        try:
            return datetime.strptime(text[:19], form)
        except ValueError:
            pass
    return None


def utc_hour_text(value) -> str:
    """An hour of the table as "2013-01-05 14:00:00"; unreadable values as they are."""
    hour = hour_in_table(value)
    return str(hour) if hour is not None else str(value)


def sqlite_hint(e: sqlite3.Error) -> str:
    return (
        "Commit or close every connection you open (with sqlite3.connect(...) as db: commits; db.close() closes)."
        if "locked" in str(e)
        else f"Keep {TABLE} with the columns hour, origin, flights and avg_delay."
    )


def clear_table(ctx: Context) -> set[tuple[str, str]]:
    """Empty every table the notebook's own run left in the file (the batch ids a save_batch may
    keep beside the hours included; the file and the tables' layout stay: the student's kernel
    may hold the file open); the (hour, origin) keys of hourly. In the grading's sandbox."""
    return {tuple(k) for k in in_sandbox.call(ctx, "selfcheck.checks.lab10:sqlite_clear", str(ctx.workdir))}


def sqlite_clear(workdir: str) -> list[tuple[str, str]]:
    path = Path(workdir) / TABLE_FILE
    if not path.is_file():
        return []
    no_links(Path(workdir), TABLE_FILE)
    try:
        with sqlite3.connect(path, timeout=10) as db:
            tables = [
                t
                for (t,) in db.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                )
            ]
            keys = (
                {
                    (utc_hour_text(h), o)
                    for h, o in db.execute(f"SELECT hour, origin FROM {TABLE} LIMIT {MAX_OUTPUT_ROWS}")
                }
                if TABLE in tables
                else set()
            )
            for t in tables:
                db.execute(f'DELETE FROM "{t}"')
            return sorted(keys)
    except sqlite3.Error as e:
        raise CheckFailed(f"the grader could not empty the tables of {TABLE_FILE}: {e}", hint=sqlite_hint(e)) from None


def earlier_run_row(ctx: Context, hour: datetime) -> tuple:
    """Add to the student's table a row as an earlier run of the job would have left it, so a
    save_batch that rewrites the whole table from what its process remembers loses it. The hour
    is written the way save_batch writes hours where the grader can tell (the same text with
    another date and hour), else as the text asks ("2013-01-01 10:00:00"). A row the grader cannot
    add fails the part: a check that cannot run its step never passes it."""
    mine = hour.strftime("%Y-%m-%d %H:%M:%S")
    known = [(h, hour_in_table(h)) for h, *_ in table_rows(ctx) if isinstance(h, str) and hour_in_table(h)]
    if known:
        text, seen = known[0]
        assert seen is not None  # known keeps the hours the table's text gives
        at = text.find(seen.strftime("%Y-%m-%d"))
        clock = text.find(seen.strftime("%H"), at + 10) if at >= 0 else -1
        like = (
            text[:at] + hour.strftime("%Y-%m-%d") + text[at + 10 : clock] + hour.strftime("%H") + text[clock + 2 :]
            if clock >= 0
            else None
        )
        if like is not None and hour_in_table(like) == hour:
            mine = like
    row = (mine, "LGA", ctx.rng.randrange(1, 40), round(ctx.rng.uniform(-10, 90), 3))
    in_sandbox.call(ctx, "selfcheck.checks.lab10:sqlite_insert", str(ctx.workdir), list(row))
    return row


def sqlite_insert(workdir: str, row: list) -> None:
    no_links(Path(workdir), TABLE_FILE)
    try:
        with sqlite3.connect(Path(workdir) / TABLE_FILE, timeout=10) as db:
            db.execute(f"INSERT INTO {TABLE} (hour, origin, flights, avg_delay) VALUES (?, ?, ?, ?)", row)
    except sqlite3.Error as e:
        raise CheckFailed(
            f"the grader could not add a row of an earlier run, {tuple(row)}, to the table {TABLE}: {e}",
            hint=f"Keep {TABLE} to the columns the text names (hour, origin, flights, avg_delay; any "
            "other needs a default), with one row per hour and airport: the grader checks that "
            "rows of an earlier run survive a restart.",
        ) from None


@check("lab10-q3", kernel_runs="the question runs Spark, a child of the kernel")
def upserts_each_batch(ctx: Context) -> str:
    """save_batch(batch, batch_id) keeps a table of hourly delays right through updates and a replayed micro-batch"""
    no_links(ctx.workdir, TABLE_FILE)
    removed = clear_table(ctx)  # the rows of the notebook's own run
    day = ctx.rng.randrange(2, 32)
    hours = [datetime(2013, 1, day, h) for h in ctx.rng.sample(range(11, 24), 6)]
    row = lambda h, o: [iso(h), o, ctx.rng.randrange(1, 40), round(ctx.rng.uniform(-10, 90), 3)]
    first = [row(h, o) for h in hours[:3] for o in ("EWR", "JFK")]
    # an update-mode query's next batch: hours that changed (more flights came) and new ones
    second = [row(h, o) for h, o in ((hours[2], "EWR"), (hours[3], "LGA"), (hours[3], "JFK"))]
    third = [row(h, o) for h, o in ((hours[3], "LGA"), (hours[4], "EWR"))]
    batches = [(0, first), (1, second), (1, second), (2, third)]  # batch 1 replayed after a crash
    truth = {}
    for i, (batch_id, rows) in enumerate(batches):
        ctx.sub.value(f"save_batch({IN_KERNEL}.batch_frame({rows!r}), {batch_id}) is None", timeout=SPARK_VALUE_S)
        for h, o, f, a in rows:
            truth[(str(datetime.strptime(h, TIME_FORMAT)), o)] = (f, a)
        if i == 0:
            # The job restarts after micro-batch 0 (a new process: nothing of the last one's memory)
            # and the table holds a row of an earlier run besides: both must stay.
            kept = earlier_run_row(ctx, hours[5])
            truth[(utc_hour_text(kept[0]), kept[1])] = kept[2:]
    found = table_rows(ctx)
    keys = [(utc_hour_text(h), o) for h, o, *_ in found]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    wrong = sorted(  # the (hour, origin) and the table's values, never the batches' (the grader's)
        (k, (f, a))
        for k, (_, _, f, a) in zip(keys, found)
        if truth.get(k) is None or f != truth[k][0] or not isinstance(a, (int, float)) or not close(a, truth[k][1])
    )
    missing = sorted(set(truth) - set(keys))
    back = sorted(set(keys) & (removed - set(truth)))
    unknown = sorted(set(keys) - set(truth) - removed)
    hint = (
        f"Rows the grader deleted before its micro-batches came back, e.g. {back[0]} (your notebook's own "
        "run): save_batch rewrites the table from what its process remembers. Write only the batch's rows, "
        "upserted into the table as it is."
        if back
        else f"The table has hours that no batch had, e.g. {unknown[0]}: write each hour as UTC text "
        '(format it in Spark: F.date_format("hour", "yyyy-MM-dd HH:mm:ss"); str() of what collect() gives '
        "is your computer's local time)."
        if unknown
        else "An hour is in the table twice: a replayed micro-batch, or an update of an hour, was inserted again. "
        "Upsert by (hour, origin): INSERT ... ON CONFLICT (hour, origin) DO UPDATE (or INSERT OR REPLACE with "
        "that primary key), so writing the same batch twice changes nothing."
        if twice
        else "Hours of earlier micro-batches, or of an earlier run, are gone: each batch of an update-mode query "
        "holds only the rows that changed, so add them to the table; do not replace the table with the batch "
        "or with what your process remembers (a restarted job remembers nothing)."
        if missing
        else "Some rows have old or wrong values: an hour's newer row must replace its older one."
    )
    expect(
        not (back or twice or wrong or missing),
        f"table {TABLE} of {TABLE_FILE} after micro-batches 0, 1, 1 again (replayed), 2",
        expected=f"{len(truth)} (hour, origin) rows, each with its latest values",
        found=f"{len(found)} rows; twice: {twice[:2]}; wrong: {len(wrong)} e.g. {wrong[:1]}; missing: {missing[:2]}",
        hint=hint,
    )
    return f"{len(truth)} rows right after 4 calls (one a replay), a row of an earlier run kept"
