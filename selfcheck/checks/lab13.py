"""Lab 13, the capstone: an operations board of the student's own design, graded end to end
under faults.

The student delivers three scripts and the choices inside them (partitions, replicas, keys, acks,
the job and its checkpoint); the grader runs them once, on a three-broker cluster of the
grading's own (cluster/own.py, as lab 7), and breaks things while they run:

    board_setup.py EVENTS BOARD          makes the topics
    board_job.py EVENTS BOARD STATE      departures per airport and hour, EVENTS -> BOARD
    board_producer.py EVENTS             the grader's departures (JSON lines on stdin) -> EVENTS,
                                         printing "acked <id>" once the brokers acknowledged one

The run (`pipeline_run`, once per grading; every part reads what it measured):
1. a broker is stopped while the producer writes: every departure given meanwhile must be
   acknowledged (the pipeline goes on with one broker down);
2. the job is killed (SIGKILL) a seeded moment after its first result, and started again with
   the same STATE;
3. the two followers of the leader of most partitions are frozen (SIGSTOP) while 1 s of
   departures is written, that leader is killed, the followers go on: what the leader
   acknowledged alone is lost (acks=1), what all replicas had is kept (acks="all");
4. departures come late (10-25 minutes behind the latest one, within the 30 minutes allowed),
   then a departure two hours after the day's last, at each airport, closes the day's hours.

The truth is the grader's own: a seeded day of January 2013 plus made-up planes (ZZ) that fly
from every airport, and which departures come late, where, is drawn from the seed; the board is
compared with the departures that are in EVENTS (the producer's part is judged by lab13-q1), by
their ids, so a board worked out from the public dataset cannot match.

- lab13-q1 durable: with a broker stopped, writes go on; no acknowledged departure is lost;
- lab13-q2 in order: each plane's departures in one partition, in the order they were reported;
- lab13-q3 exactly once: every hour on the board, once final, with its right counts (repeats
  of the same counts are harmless: the board is read as a table), after the job's crash;
- lab13-q4 late departures: the hours that got late departures count them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import secrets
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cluster.waiting import wait_for

from . import CheckFailed, Context, LabPolicy, check, expect
from .kafka_state import read_all, short_name
from .lab7 import BROKERS, all_up, cluster_of, partitions, stop_one, wait_until
from .scripts import ScriptRun, start, stop, wait

SETUP, PRODUCER, JOB = "board_setup.py", "board_producer.py", "board_job.py"
LATENESS_MIN = 30  # the brief: departures up to this late are counted
DELAYED_MIN = 15  # the brief: a departure this late or more is "delayed"
FEED_PER_S = 100  # the grader's departures arrive at this rate (a day: about 10 s)
SETUP_DEADLINE_S = 60
ACK_WAIT_S = 30  # for every departure given to be acknowledged
JOB_FIRST_RESULT_S = 120  # from the job's start to its first hour on the board (a Spark driver starts)
BOARD_DEADLINE_S = 120  # after the last departure, for every hour to be on the board
LATE_PAUSE_S = 4  # before late departures: long enough for a job's micro-batch to read what came first
FROZEN_S = 1.0  # the departures given while the followers are frozen: this many seconds of them (a session: 3 s)
JOB_RESTARTS = 2  # a job that exits by itself is started again (an orchestrator would), this often
ACKED = re.compile(r"^acked (.+?)\s*$", re.M)
POLICY = LabPolicy(
    own_cluster=True,
    # setup, the first result, the run, the board: about two minutes with a Spark job
    checks_budget_s=SETUP_DEADLINE_S + JOB_FIRST_RESULT_S + 3 * ACK_WAIT_S + BOARD_DEADLINE_S + 60,
    gradings_at_once=1,  # three brokers, a Spark driver and the kernel: 3 GB a grading
)


# --- the grader's day --------------------------------------------------------------------------
def when(iso: str) -> datetime:
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def hour_of(event: dict) -> str:
    return event["dep_time"][:13]  # "2013-01-05T07"


@dataclass
class Day:
    events: list[dict]  # in the order they are fed
    late: dict[str, int]  # id -> minutes behind the latest departure fed before it
    closing: set[str]  # ids of the departures that close the day (their hours are not checked)
    pauses: dict[str, datetime]  # id -> the latest departure time fed before it (the grader pauses there)


def graders_day(ctx: Context) -> Day:
    """A seeded day of January 2013 (2-31), made-up planes of ZZ flying from all three airports,
    some departures fed late, and one departure per airport two hours after the day's last."""
    from cluster.lab import departures

    rng = ctx.rng
    day = rng.randrange(2, 32)
    events = departures(day=day)
    start_t, end_t = when(events[0]["dep_time"]), when(events[-1]["dep_time"])
    minutes = int((end_t - start_t).total_seconds() // 60)
    numbers = iter(rng.sample(range(1000, 10000), 40))
    for plane in range(6):  # each flies three times a day, from another airport each time
        tail = f"N{rng.randrange(100, 1000)}Z{plane}"
        airports = rng.sample(["EWR", "JFK", "LGA"], 3)
        for at, origin in zip(sorted(rng.sample(range(minutes), 3)), airports):
            events.append(_made_up(next(numbers), day, origin, tail, start_t + timedelta(minutes=at), rng))
    events.sort(key=lambda e: e["dep_time"])
    # Two hours after the last departure (the day's last local hours are the next day's in UTC):
    # every hour of the day is then more than LATENESS_MIN past its end, at every airport.
    after = when(events[-1]["dep_time"]).replace(minute=0, second=0) + timedelta(hours=2)
    closing = [
        _made_up(next(numbers), day, origin, None, after + timedelta(minutes=i), rng)
        for i, origin in enumerate(["EWR", "JFK", "LGA"])
    ]
    # Late: at three hour boundaries B of the day's second half, the departures of the 10 minutes
    # before B are held back until the stream has reached B + 5-15 minutes; then, after a pause
    # (the job has read what came before), they come, 5-25 minutes late. Their hour has ended:
    # only a job that keeps hours open for late departures counts them.
    half = when(events[len(events) // 2 + 3 * FEED_PER_S // 2]["dep_time"])
    hours = sorted({when(e["dep_time"]).replace(minute=0, second=0) for e in events})
    boundaries = sorted(rng.sample([h for h in hours if half + timedelta(minutes=20) < h < hours[-2]], 3))
    late: dict[str, int] = {}
    pauses: dict[str, datetime] = {}
    order = list(events)
    for b in boundaries:
        held = [e for e in order if b - timedelta(minutes=10) <= when(e["dep_time"]) < b]
        if not held:
            continue
        reached = b + timedelta(minutes=rng.randrange(5, 16))
        order = [e for e in order if e not in held]
        at = next((i for i, o in enumerate(order) if when(o["dep_time"]) > reached), len(order))
        order[at:at] = held
        pauses[held[0]["id"]] = reached
        late.update({e["id"]: int((reached - when(e["dep_time"])).total_seconds() // 60) for e in held})
    return Day(order + closing, late, {e["id"] for e in closing}, pauses)


def _made_up(number: int, day: int, origin: str, tail: str | None, at: datetime, rng) -> dict:
    return {
        "id": f"2013-01-{day:02d} ZZ{number} {origin}",
        "carrier": "ZZ",
        "origin": origin,
        "dest": "ORD",
        "tailnum": tail,
        "dep_delay": rng.randrange(-10, 120),
        "dep_time": iso(at),
    }


# --- the run ---------------------------------------------------------------------------------------
@dataclass
class Run:
    """What one run of the student's pipeline did, as the brokers and the grader saw it."""

    day: Day
    events_topic: str
    board_topic: str
    broker_stopped: int = 0
    given_while_down: list[str] = field(default_factory=list)
    acked_while_down: set[str] = field(default_factory=set)
    leader_killed: int = 0
    acked: set[str] = field(default_factory=set)
    in_topic: list[tuple[int, int, str]] = field(default_factory=list)  # (partition, offset, id)
    strangers: list[str] = field(default_factory=list)  # values in EVENTS the grader never gave
    board: dict[tuple[str, str], list[dict]] = field(default_factory=dict)  # (airport, hour) -> values
    unreadable: list[str] = field(default_factory=list)  # board values that are no result
    job_starts: int = 0
    job_exits: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Feeder:
    """The producer script and what the grader gave it."""

    def __init__(self, run: ScriptRun):
        self.run = run

    def acked(self) -> set[str]:
        return set(ACKED.findall(self.run.output()))

    def give(self, events: list[dict], per_s: float = FEED_PER_S) -> None:
        for e in events:
            try:
                self.run.proc.stdin.write((json.dumps(e) + "\n").encode())
                self.run.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise CheckFailed(
                    f"{PRODUCER} stopped reading its input",
                    found=self.run.output()[-500:],
                    hint="Read departures from sys.stdin until it ends; a failed send should be retried, not end the script.",
                ) from None
            if per_s:
                time.sleep(1 / per_s)

    def wait_acked(self, ids: set[str], timeout: float = ACK_WAIT_S) -> bool:
        return bool(
            wait_for(
                lambda: ids <= self.acked(),
                timeout_s=timeout,
                every_s=0.2,
                stop_if=lambda: self.run.proc.poll() is not None,
            )
        )


class Job:
    """The student's job, started again (with the same STATE) whenever it exits by itself."""

    def __init__(self, ctx: Context, run: Run, events: str, board: str, state: str):
        self.ctx, self.r, self.args = ctx, run, (events, board, state)
        self.proc: ScriptRun | None = None
        self.start()

    def start(self) -> None:
        self.r.job_starts += 1
        self.proc = start(self.ctx, JOB, *self.args, tag=f"job-{self.r.job_starts}")

    def kill(self) -> None:
        assert self.proc is not None
        stop(self.proc.proc)
        self.start()

    def keep_alive(self) -> None:
        """Start the job again if it exited by itself (a crash of its own)."""
        assert self.proc is not None
        code = self.proc.proc.poll()
        if code is None:
            return
        self.r.job_exits.append(f"exit {code}: {self.proc.output()[-300:].strip()}")
        expect(
            len(self.r.job_exits) <= JOB_RESTARTS,
            f"{JOB} exited by itself {len(self.r.job_exits)} times",
            found=self.r.job_exits[-1],
            hint="A streaming job runs until it is stopped; let the Kafka client retry when a broker is "
            "down instead of ending the job.",
        )
        self.start()


def own_view(ctx: Context) -> Context:
    """The same grading, reading the grading's own cluster as its admin."""
    return dataclasses.replace(ctx, kafka=cluster_of(ctx).admin_connection())


def board_records(view: Context, topic: str) -> tuple[dict[tuple[str, str], list[dict]], list[str]]:
    """The board's committed records, as (airport, "YYYY-MM-DDTHH") -> values in offset order."""
    found: dict[tuple[str, str], list[dict]] = defaultdict(list)
    bad = []
    for r in read_all(view, short_name(topic), isolation_level="read_committed"):
        try:
            value = json.loads(r.value)
            found[(str(value["airport"]), _hour(value["hour"]))].append(value)
        except (TypeError, ValueError, KeyError) as e:
            bad.append(f"{r.value[:120]!r} ({type(e).__name__})")
    return found, bad


def _hour(raw) -> str:
    """An hour as "YYYY-MM-DDTHH" from an ISO string ("2013-01-05T07:00:00Z", "...T07:00:00.000Z",
    "+00:00") or epoch milliseconds."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return datetime.fromtimestamp(raw / 1000, UTC).strftime("%Y-%m-%dT%H")
    t = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    if t.tzinfo is not None:
        t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H")


def scripts_hash(ctx: Context) -> str:
    from .scripts import read_student_file

    return hashlib.sha256(
        "\0".join(read_student_file(ctx.workdir, name) or "" for name in (SETUP, PRODUCER, JOB)).encode()
    ).hexdigest()


_runs: dict[tuple, Run | CheckFailed] = {}  # a self-check's runs, in the student's kernel


def pipeline_run(ctx: Context) -> Run:
    """The run, once per grading (ctx.scratch); in a self-check, once per version of the scripts."""
    key = ("lab13-run", ctx.namespace, ctx.seed, scripts_hash(ctx))
    found = ctx.scratch.get(key) or (_runs.get(key) if ctx.sandbox is None else None)
    if found is None:
        try:
            found = run_pipeline(ctx)
        except CheckFailed as e:
            found = e
        ctx.scratch[key] = found
        if ctx.sandbox is None:
            _runs.clear()
            _runs[key] = found
    if isinstance(found, CheckFailed):
        raise CheckFailed(f"the pipeline's run stopped: {found.what}", found.expected, found.found, found.hint)
    return found


def run_pipeline(ctx: Context) -> Run:
    all_up(ctx)
    tag = secrets.token_hex(3)  # new names every run (a self-check runs again on the same cluster)
    day = graders_day(ctx)
    r = Run(day, ctx.topic(f"events-{tag}"), ctx.topic(f"board-{tag}"))
    view = own_view(ctx)
    job = feeder = None
    try:
        _setup(ctx, r)
        job = Job(ctx, r, r.events_topic, r.board_topic, f"board-state-{tag}")
        feeder = Feeder(start(ctx, PRODUCER, r.events_topic, tag="producer", stdin=True))
        _faults(ctx, r, day, feeder, job, view)
        _board_complete(ctx, r, job, view)
    finally:
        for proc in (job and job.proc, feeder and feeder.run):
            if proc is not None:
                stop(proc.proc)
        all_up(ctx)
    _read_events(view, r)
    r.board, r.unreadable = board_records(view, r.board_topic)
    return r


def _setup(ctx: Context, r: Run) -> None:
    setup = start(ctx, SETUP, r.events_topic, r.board_topic, tag="setup")
    code = wait(setup, SETUP_DEADLINE_S)
    expect(
        code == 0,
        f"{SETUP} failed (exit {code})",
        found=setup.output()[-600:],
        hint="Run it in the notebook on your own cluster with two new names; it should make both topics and end.",
    )
    for topic in (r.events_topic, r.board_topic):
        try:
            wait_until(lambda t=topic: all(lead is not None for lead, _ in partitions(ctx, t).values()), topic, 30)
        except Exception:
            raise CheckFailed(
                f"{SETUP} ended, but the topic {topic} does not exist with a leader for each partition",
                found=setup.output()[-300:],
                hint="Make both topics it is given, with their full names as given.",
            ) from None


def _faults(ctx: Context, r: Run, day: Day, feeder: Feeder, job: Job, view: Context) -> None:
    events = day.events
    n = len(events)
    first, down, during_crash = events[: n // 4], events[n // 4 : n // 4 + n // 5], events[n // 4 + n // 5 : n // 2]
    frozen, rest = events[n // 2 : n // 2 + int(FEED_PER_S * FROZEN_S)], events[n // 2 + int(FEED_PER_S * FROZEN_S) :]

    feeder.give(first)
    expect(
        feeder.wait_acked({e["id"] for e in first}),
        f"{PRODUCER} did not report the first {len(first)} departures as acknowledged within {ACK_WAIT_S} s "
        "(every broker up)",
        expected="a line 'acked <id>' per departure",
        found=feeder.run.output()[-600:] or "(no output)",
        hint="Print 'acked <id>' from the send's callback once the broker has acknowledged it.",
    )
    job.keep_alive()

    # 1. A broker stops cleanly; the producer's writes must go on.
    r.broker_stopped = ctx.rng.choice(BROKERS)
    stop_one(ctx, r.broker_stopped)
    feeder.give(down)
    r.given_while_down = [e["id"] for e in down]
    feeder.wait_acked(set(r.given_while_down))
    r.acked_while_down = feeder.acked() & set(r.given_while_down)
    all_up(ctx)
    job.keep_alive()

    # 2. The job dies a seeded moment after its first result, and is started again.
    def first_result() -> bool:
        job.keep_alive()
        return any(board_records(view, r.board_topic)[0])

    if not wait_for(first_result, timeout_s=JOB_FIRST_RESULT_S, every_s=1):
        raise CheckFailed(
            f"{JOB} wrote no hour to the board within {JOB_FIRST_RESULT_S} s, though "
            f"{len(first) + len(down)} departures over several hours were in {short_name(r.events_topic)}",
            found=job.proc.output()[-800:] if job.proc else "",
            hint="Run the job on your own cluster from the notebook and read the board; an hour is written once "
            f"a departure more than {LATENESS_MIN} minutes past its end has come.",
        )
    crash_in = ctx.rng.uniform(0.3, 1.5)
    feeding = threading.Thread(target=feeder.give, args=(during_crash,), daemon=True)
    feeding.start()
    time.sleep(crash_in)
    job.kill()
    r.notes.append(f"the job killed {crash_in:.1f} s after its first result, started again")
    feeding.join()

    # 3. The followers of the leader of most partitions freeze; 1 s of departures; the leader dies.
    leaders = [lead for lead, _ in partitions(ctx, r.events_topic).values()]
    r.leader_killed = max(BROKERS, key=lambda b: (leaders.count(b), -b))
    followers = [b for b in BROKERS if b != r.leader_killed]
    own = cluster_of(ctx)
    for b in followers:
        own.nodes[b].process().suspend()
    try:
        # At the feed's pace, in many small batches: a frozen follower still gets the answer to
        # the fetch it had asked before it froze (the kernel takes it in), so the first batch
        # reaches it; the next ones only the leader has.
        feeder.give(frozen)
        time.sleep(0.3)  # the last answers reach the producer
        own.kill_broker(r.leader_killed)
    finally:
        for b in followers:
            process = own.nodes[b].process()
            if process is not None:
                process.resume()
    wait_until(lambda: r.leader_killed not in _live(ctx), f"broker {r.leader_killed} leaving the live brokers")
    all_up(ctx)
    job.keep_alive()

    # 4. The rest of the day, late departures among them, and the departures that close it.
    start_at = 0
    for i, e in enumerate(rest):
        if e["id"] in day.pauses:
            feeder.give(rest[start_at:i])
            start_at = i
            _caught_up(ctx, r, job, view, day.pauses[e["id"]])
    feeder.give(rest[start_at:])
    if feeder.run.proc.stdin is not None:
        feeder.run.proc.stdin.close()
    code = wait(feeder.run, ACK_WAIT_S * 2)
    expect(
        code == 0,
        f"{PRODUCER} should end by itself (exit 0) once its input ends",
        found=f"exit {code}: " + feeder.run.output()[-300:],
        hint="After the input ends, flush() the producer and return.",
    )
    r.acked = feeder.acked()


def _caught_up(ctx: Context, r: Run, job: Job, view: Context, reached: datetime) -> None:
    """Before late departures: until the board has every hour that ended LATENESS_MIN before the
    latest departure fed (any job meeting the brief has written those once it read that far), at
    most ACK_WAIT_S; then a pause, for a job that reads in micro-batches to finish its batch."""
    due = {
        k
        for k in expected_hours(r.day, {e["id"] for e in r.day.events})
        if when(k[1] + ":00:00Z") + timedelta(hours=1, minutes=LATENESS_MIN) <= reached
    }

    def written() -> bool:
        job.keep_alive()
        return due <= set(board_records(view, r.board_topic)[0])

    wait_for(written, timeout_s=ACK_WAIT_S, every_s=0.5)
    time.sleep(LATE_PAUSE_S)


def _live(ctx: Context) -> set[int]:
    from cluster.brokers import live_brokers

    from .lab7 import retried

    return retried(ctx, live_brokers, "listing the live brokers")


def expected_hours(day: Day, ids: set[str]) -> dict[tuple[str, str], tuple[int, int]]:
    """(airport, hour) -> (departures, delayed) of the departures with these ids (the day's, not
    the closing ones)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for e in day.events:
        if e["id"] in ids and e["id"] not in day.closing:
            c = counts[(e["origin"], hour_of(e))]
            c[0] += 1
            c[1] += e["dep_delay"] >= DELAYED_MIN
    return {k: (a, b) for k, (a, b) in counts.items()}


def _board_complete(ctx: Context, r: Run, job: Job, view: Context) -> None:
    """Until every hour of the day is on the board (whatever its counts), or the deadline."""
    _read_events(view, r)
    want = set(expected_hours(r.day, {i for _, _, i in r.in_topic}))

    def complete() -> bool:
        job.keep_alive()
        return want <= set(board_records(view, r.board_topic)[0])

    if not wait_for(complete, timeout_s=BOARD_DEADLINE_S, every_s=2):
        r.notes.append(f"the board still lacked hours {BOARD_DEADLINE_S} s after the last departure")


def _read_events(view: Context, r: Run) -> None:
    given = {e["id"] for e in r.day.events}
    r.in_topic, r.strangers = [], []
    for rec in read_all(view, short_name(r.events_topic)):
        try:
            event_id = json.loads(rec.value)["id"]
        except (TypeError, ValueError, KeyError):
            event_id = None
        if event_id in given:
            r.in_topic.append((rec.partition, rec.offset, event_id))
        else:
            r.strangers.append(repr(rec.value[:120]))


# --- the parts -------------------------------------------------------------------------------------
@check("lab13-q1")
def durable(ctx: Context) -> str:
    """with a broker stopped the writes go on, and no acknowledged departure is lost when a leader dies"""
    r = pipeline_run(ctx)
    missing_down = [i for i in r.given_while_down if i not in r.acked_while_down]
    expect(
        not missing_down,
        f"with broker {r.broker_stopped} stopped, {len(missing_down)} of the {len(r.given_while_down)} departures "
        f"given were not acknowledged within {ACK_WAIT_S} s",
        expected="all acknowledged: three replicas, two of them enough for a write",
        found=missing_down[:3],
        hint="With one of three brokers down, every partition must still have a leader and enough in-sync "
        "replicas: replication factor 3, min.insync.replicas at most 2.",
    )
    kept = {i for _, _, i in r.in_topic}
    lost = sorted(r.acked - kept)
    expect(
        not lost,
        f"{len(lost)} departures reported as acknowledged are not in the topic, after broker {r.leader_killed}, "
        "the leader of most partitions, died while its followers were frozen",
        expected="none lost",
        found=lost[:3],
        hint="The leader acknowledged writes its followers did not have yet: with acks=1 (or 0) they die with it. "
        "acks='all' waits for every in-sync replica.",
    )
    never = sorted({e["id"] for e in r.day.events} - kept)
    expect(
        not never,
        f"{len(never)} departures given to {PRODUCER} never reached the topic",
        found=never[:3],
        hint="Keep retrying a failed send (the Kafka client does, for delivery_timeout_ms); never drop one.",
    )
    expect(
        not r.strangers,
        f"the topic holds {len(r.strangers)} records that are not a departure the grader gave",
        found=r.strangers[:2],
        hint="Write each input line's departure as JSON with its fields, its id included.",
    )
    dupes = len(r.in_topic) - len(kept)
    return (
        f"{len(r.given_while_down)} departures acknowledged with broker {r.broker_stopped} stopped; "
        f"{len(r.acked)} acknowledged, all kept, through the death of broker {r.leader_killed}; "
        f"{dupes} duplicate{'s' if dupes != 1 else ''} in the topic"
    )


@check("lab13-q2")
def in_order(ctx: Context) -> str:
    """each plane's departures in one partition, in the order they were reported"""
    r = pipeline_run(ctx)
    reported = {e["id"]: i for i, e in enumerate(r.day.events)}  # the order the grader gave them
    plane = {e["id"]: e["tailnum"] for e in r.day.events}
    by_plane: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    seen = set()
    for p, offset, i in r.in_topic:
        if plane[i] and i not in seen:
            seen.add(i)
            by_plane[plane[i]].append((p, offset, i))
    flying = {t: recs for t, recs in by_plane.items() if len(recs) > 1}
    split = sorted(t for t, recs in flying.items() if len({p for p, _, _ in recs}) > 1)
    expect(
        not split,
        f"the departures of {len(split)} of the {len(flying)} planes that flew more than once are in more than one "
        "partition, where no consumer sees them in order",
        found={t: sorted({p for p, _, _ in flying[t]}) for t in split[:3]},
        hint="A partition keeps order, a topic does not: key each departure by its plane (tailnum).",
    )
    wrong = sorted(
        t
        for t, recs in flying.items()
        if [i for _, _, i in sorted(recs)] != sorted((i for _, _, i in recs), key=reported.get)
    )
    expect(
        not wrong,
        f"{len(wrong)} planes' departures are in their partition out of the order they were given to {PRODUCER}",
        found={t: [i for _, _, i in sorted(flying[t])] for t in wrong[:2]},
        hint="A retried send overtook a later one: use an idempotent producer (or one request in flight).",
    )
    return f"{len(flying)} planes that flew more than once, each in one partition, in order"


def _board_verdict(r: Run, late: bool) -> tuple[list[str], int]:
    truth = expected_hours(r.day, {i for _, _, i in r.in_topic})
    late_hours = {(e["origin"], hour_of(e)) for e in r.day.events if e["id"] in r.day.late}
    wrong = []
    checked = 0
    for key, (departures, delayed) in sorted(truth.items()):
        if (key in late_hours) != late:
            continue
        checked += 1
        found = r.board.get(key, [])
        # every value of an hour must be right (q3: no count later corrected); for the hours
        # with late departures (q4) the question is whether they count: the board's latest value
        judged = found[-1:] if late else found
        bad = [
            v
            for v in judged
            if not (_number(v.get("departures")) == departures and _number(v.get("delayed")) == delayed)
        ]
        if not found:
            wrong.append(
                f"{key[0]} {key[1]}:00: not on the board (expected {departures} departures, {delayed} delayed)"
            )
        elif bad:
            shown = ", ".join(f"{_number(v.get('departures'))}/{_number(v.get('delayed'))}" for v in found[:4])
            wrong.append(
                f"{key[0]} {key[1]}:00: expected {departures} departures/{delayed} delayed, the board says {shown}"
            )
    return wrong, checked


def _number(v):
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer() else v


@check("lab13-q3")
def exactly_once(ctx: Context) -> str:
    """every hour on the board, once final, with its right counts, after the job's crash"""
    r = pipeline_run(ctx)
    expect(
        not r.unreadable,
        f"{len(r.unreadable)} records on the board are not a result",
        expected='JSON: {"airport": "JFK", "hour": "2013-01-05T07:00:00Z", "departures": 31, "delayed": 7}',
        found=r.unreadable[:2],
        hint="Write each hour as JSON with the fields the brief names.",
    )
    wrong, checked = _board_verdict(r, late=False)
    expect(
        not wrong,
        f"{len(wrong)} of the {checked} hours without late departures are wrong on the board "
        f"(the job was killed and started again; {'; '.join(r.notes)})",
        found=wrong[:4],
        hint="A count that is too high was counted again after the restart; too low, its state was lost (a "
        "checkpoint that does not survive the restart); two different counts, an hour written before it was "
        "final (write each hour once, when the watermark passes it: append mode).",
    )
    return f"{checked} hours, each right, through a crash of the job ({r.job_starts} starts)"


@check("lab13-q4")
def late_counted(ctx: Context) -> str:
    """the hours that got late departures count them"""
    r = pipeline_run(ctx)
    wrong, checked = _board_verdict(r, late=True)
    expect(
        not wrong,
        f"{len(wrong)} of the {checked} hours that got departures {min(r.day.late.values())}-"
        f"{max(r.day.late.values())} minutes late are wrong on the board",
        found=wrong[:4],
        hint=f"Departures up to {LATENESS_MIN} minutes late must count: keep each hour open that long after its "
        "end (a watermark's delay, a window's grace) before writing it.",
    )
    return f"{checked} hours with {len(r.day.late)} late departures, each counted"
