"""Lab 15, the capstone: an operations board of the student's own design, graded end to end
under faults.

The student delivers three scripts and the choices inside them (partitions, replicas, keys, acks,
the job and its checkpoint); the grader runs them once, on a three-broker cluster of the
grading's own (cluster/own.py, as lab 7), and breaks things while they run:

    board_setup.py EVENTS BOARD          makes the topics
    board_job.py EVENTS BOARD STATE      departures per airport and hour, EVENTS -> BOARD
    board_producer.py EVENTS [VERSION]   the grader's departures (JSON lines on stdin) -> EVENTS,
                                         printing "acked <id>" once the brokers acknowledged one

The run (`pipeline_run`, once per grading; every part reads what it measured):
1. a broker is stopped while the producer writes: every departure given meanwhile must be
   acknowledged (the pipeline goes on with one broker down), and be in the topic once reported so;
2. the job is killed (SIGKILL) a seeded moment after its first result, and started again with
   the same STATE;
3. the two followers of the leader of most partitions are frozen (SIGSTOP) while 1 s of
   departures is written, that leader is killed, the followers go on: what the leader
   acknowledged alone is lost (acks=1), what all replicas had is kept (acks="all");
4. the producer's input ends, and it is started again for version 2 of the events (the delay
   in seconds instead of minutes, and the gate), for the rest of the day; the bytes its first
   departures take on the brokers' disks are measured, then 8,000 made-up departures (ZY) of
   one hour come at once, a burst;
5. at up to three hour boundaries, the departures of the hour's last 3 minutes are held back
   until the hour has ended, then come 20-30 minutes behind the latest one (30 are allowed); before
   them, every hour that ended 30 minutes before the latest departure given must be on the board
   within 30 s; then a departure two hours after the day's last, at each airport, closes the day.

The truth is the grader's own: a seeded share of a day of January 2013 with its delays dealt out
again, plus made-up planes (ZZ) that fly from every airport; which departures come late, where, is
drawn from the seed too. The board is compared with the departures that are in EVENTS (the
producer's part is judged by lab15-q1), by their ids, so a board worked out from the public
dataset cannot match: nearly every hour has other counts.

- lab15-q1 durable: with a broker stopped, writes go on; no acknowledged departure is lost;
- lab15-q2 in order: each plane's departures in one partition, in the order they were reported;
- lab15-q3 exactly once: every hour on the board in time, once final, with its right counts
  (repeats of the same counts are harmless: the board is read as a table), after the job's crash;
- lab15-q4 late departures: the hours that got late departures count them;
- lab15-q5 a compatible upgrade: every record still reads as version 1 (a reader of the
  dashboard team's), and version 2's records carry its new fields;
- lab15-q6 fresh: from version 2's first acknowledgement on, each hour on the board with its right
  counts within 15 s of being due (a departure 30 minutes past its end given), at the 99th
  percentile, the hours after the burst among them; and every hour due before late departures
  on the board within 30 s (a job that writes at the end of the stream, or not at all after its
  crash, fails here; the hours still open when the job was killed are lab15-q3's, which judges
  whether the crash changed them, so that this part does not depend on where the kill landed);
- lab15-q7 storage: the events topic keeps departures a week, and they take at most 300 bytes
  each on the brokers' disks, every replica counted (measured on version 2's first departures).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import secrets
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cluster.waiting import wait_for

from . import CheckFailed, Context, LabPolicy, check, expect
from .kafka_state import read_all, short_name
from .own_cluster import BROKERS, all_up, cluster_of, described, partitions, retried, stop_one, wait_until
from .scripts import ScriptRun, ended_early, frozen, start, stop, wait

SETUP, PRODUCER, JOB = "board_setup.py", "board_producer.py", "board_job.py"
LATENESS_MIN = 30  # the brief: departures up to this late are counted
DELAYED_MIN = 15  # the brief: a departure this late or more is "delayed"
KEPT = 0.85  # the share of the public day's flights the grader's day keeps
FEED_PER_S = 100  # the grader's departures arrive at this rate (a day: about 10 s)
SETUP_DEADLINE_S = 60
ACK_WAIT_S = 30  # for every departure given to be acknowledged
JOB_FIRST_RESULT_S = 90  # from the job's start to its first hour on the board (a Spark driver starts)
BOARD_DEADLINE_S = 60  # after the last departure, for every hour to be on the board
LATE_PAUSE_S = 4  # before late departures: long enough for a job's micro-batch to read what came first
FROZEN_S = 1.0  # the departures given while the followers are frozen: this many seconds of them (a session: 3 s)
JOB_RESTARTS = 2  # a job that exits by itself is started again (an orchestrator would), this often
IN_TIME_S = 30  # an hour is due on the board this long after a departure LATENESS_MIN past its end came
BURST_N = 8000  # made-up departures given at once, at the start of an hour late in the day
BURST_AFTER = 120  # version 2's departures given before the burst (the storage is measured on them)
LATENCY_P99_S = 15  # the brief: an hour on the board within this many seconds of being due, at the 99th percentile
BYTES_PER_DEPARTURE = 300  # the brief: bytes on the brokers' disks per departure, every replica counted
RETENTION_DAYS = 7  # the brief: every departure kept this long
DAY_DEPARTURES = 1000  # the brief: about this many departures a day
MAX_BOARD_RECORDS = 100_000  # the board records the grader keeps as they come
MAX_BOARD_VALUE = 512  # bytes of each kept (a result is about 100)
MEASURE_GRACE_S = 10  # latencies count from version 2's first acknowledgement, at most this long after its first line
MAX_LOG_BYTES = 64 * 2**20  # of the producer's output, read for its "acked" lines
ACKED = re.compile(r"^acked (.+)$", re.M)
MAX_ACK_LINE = 4096  # bytes: an "acked" line is an id and perhaps a partition and an offset
AIRPORTS = ("EWR", "JFK", "LGA")
POLICY = LabPolicy(
    own_cluster=True,
    # Its deadlines, each the most it waits: the set-up, the first result, the acknowledgements
    # of three phases, three pauses before late departures, the producer's end, the board, and
    # about a minute of brokers stopping and starting, the storage's waits. A sound pipeline
    # takes about 100 s.
    checks_budget_s=SETUP_DEADLINE_S
    + JOB_FIRST_RESULT_S
    + 3 * ACK_WAIT_S
    + 3 * (IN_TIME_S + LATE_PAUSE_S)
    + 2 * ACK_WAIT_S
    + BOARD_DEADLINE_S
    + 3 * ACK_WAIT_S  # the storage: replicas in sync (twice), the sample acknowledged
    + 60,
    # A Spark driver in the job, and maybe one in the kernel: lab 9's bound (its note says why)
    sandbox_processes=768,
    # Three brokers, a Spark driver and the kernel: about 3 GB and a core a grading (1.06 cores
    # measured alone); two at a time, every corpus verdict held.
    grading_cores=1.0,
    gradings_at_once=2,
)


# --- the grader's day --------------------------------------------------------------------------
def when(iso: str) -> datetime:
    """A time of the grader's own, "2013-01-05T06:12:00Z" (strptime is ten times slower: a day is
    thousands of these)."""
    return datetime.fromisoformat(iso)


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def hour_of(event: dict) -> str:
    return event["dep_time"][:13]  # "2013-01-05T07"


@dataclass
class Day:
    events: list[dict]  # in the order they are fed
    late: dict[str, int]  # id -> minutes behind the latest departure fed before it
    closing: set[str]  # ids of the departures that close the day (their hours are not checked)
    pauses: dict[str, datetime]  # id -> the latest departure time given before it (the grader pauses there)
    v2: dict[str, dict] = field(default_factory=dict)  # id -> version 2's new fields (dep_delay_s, gate)
    burst: set[str] = field(default_factory=set)  # ids of the departures given at once
    burst_hour: str = ""


def graders_day(ctx: Context) -> Day:
    """A seeded day of January 2013 (2-31): a seeded share of its flights with their delays dealt
    out again, made-up planes of ZZ flying from all three airports, some departures fed late, and
    one departure per airport two hours after the day's last."""
    from cluster.lab import departures

    rng = ctx.rng
    day = rng.randrange(2, 32)
    # Not the public day: a seeded KEPT share of its flights, their delays dealt out again among
    # them, so no hour's departures or delayed count can be read off datasets/ (each hour loses
    # some flights, and its delayed count is a fresh draw).
    events = [e for e in departures(day=day) if rng.random() < KEPT]
    for e, delay in zip(events, rng.sample([e["dep_delay"] for e in events], len(events))):
        e["dep_delay"] = delay
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
    # Late: at up to three hour boundaries b of the day's second half, the departures of the 3
    # minutes before b are held back until the stream has reached 20-27 minutes past b; then, after
    # a pause (the job has read what came before), they come, 20-30 minutes behind the latest
    # departure given. Their hour has ended: only a job that keeps an hour open about 30 minutes
    # counts them (a watermark of 20 minutes or less drops them).
    half = when(events[len(events) // 2 + 3 * FEED_PER_S // 2]["dep_time"])
    hours = sorted({when(e["dep_time"]).replace(minute=0, second=0) for e in events})

    def latest_before(b: datetime) -> datetime | None:
        fed = [when(e["dep_time"]) for e in events if when(e["dep_time"]) <= b + timedelta(minutes=27)]
        return fed[-1] if fed and fed[-1] >= b + timedelta(minutes=20) else None

    usable = [
        h
        for h in hours
        if half + timedelta(minutes=20) < h < hours[-2]
        and latest_before(h)
        and any(h - timedelta(minutes=3) <= when(e["dep_time"]) < h for e in events)
    ]
    late: dict[str, int] = {}
    pauses: dict[str, datetime] = {}
    order = list(events)
    for b in sorted(rng.sample(usable, min(3, len(usable)))):
        held = [e for e in order if b - timedelta(minutes=3) <= when(e["dep_time"]) < b]
        reached = latest_before(b)
        assert reached is not None
        order = [e for e in order if e not in held]
        at = next((i for i, o in enumerate(order) if when(o["dep_time"]) > reached), len(order))
        order[at:at] = held
        pauses[held[0]["id"]] = reached
        late.update({e["id"]: int((reached - when(e["dep_time"])).total_seconds() // 60) for e in held})
    # The burst: BURST_N made-up departures (ZY, one plane each, from the three airports) in the
    # first 10 minutes of a seeded hour of the run's last part, given at once: the hours due just
    # after it show how fast the job catches up (lab15-q6). Before it, at least BURST_AFTER
    # departures of version 2, on which the storage is measured (lab15-q7).
    rest_start = (len(order) + len(closing)) // 2 + int(FEED_PER_S * FROZEN_S)  # as _faults splits the day

    def burst_at(h: datetime) -> int:
        return next((i for i in range(rest_start, len(order)) if when(order[i]["dep_time"]) >= h), len(order))

    fits = [h for h in hours if burst_at(h) - rest_start >= BURST_AFTER and len(order) - burst_at(h) >= 10]
    if not fits:  # not seen in 200 seeds: a day the grader cannot use, said as the grader's fault
        raise RuntimeError(f"the grader's day (January {day}) has no hour for the burst; grade with another seed")
    hour = rng.choice(fits)
    burst: list[dict] = [
        {
            "id": f"2013-01-{day:02d} ZY{k} {AIRPORTS[k % 3]}",
            "carrier": "ZY",
            "origin": AIRPORTS[k % 3],
            "dest": "ORD",
            "tailnum": f"N{k}ZY",
            "dep_delay": rng.randrange(-10, 120),
            "dep_time": iso(hour + timedelta(seconds=rng.randrange(600))),
        }
        for k in range(1, BURST_N + 1)
    ]
    at = burst_at(hour)
    order[at:at] = burst
    # Version 2 of the airports' events: the delay in seconds (the minutes of version 1 are its
    # floor: 60 * dep_delay + 0-59 s) and the gate, drawn from the seed.
    v2 = {
        e["id"]: {
            "dep_delay_s": 60 * e["dep_delay"] + rng.randrange(60),
            "gate": f"{rng.choice('ABCD')}{rng.randrange(1, 40)}",
        }
        for e in order + closing
    }
    return Day(order + closing, late, {e["id"] for e in closing}, pauses, v2, {e["id"] for e in burst}, iso(hour))


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
    values: dict[str, dict] = field(default_factory=dict)  # id -> its record's value (the first copy)
    given_as_v2: list[str] = field(default_factory=list)
    board: dict[tuple[str, str], list[dict]] = field(default_factory=dict)  # (airport, hour) -> values, oldest first
    unreadable: list[str] = field(default_factory=list)  # board values that are no result
    early_acks: list[str] = field(default_factory=list)  # reported acknowledged, not yet in the topic
    lost_at_kill: list[str] = field(default_factory=list)  # acknowledged before the leader's death, gone after
    not_in_time: list[str] = field(default_factory=list)  # hours due on the board that were not there
    late_hours: list[tuple[str, str]] = field(default_factory=list)  # the (airport, hour) of not_in_time
    # Hours with departures given before the job was killed and not yet on the board then: what the
    # job held in its state at the crash. Whether it kept them is lab15-q3's (a crash changes nothing),
    # not lab15-q6's: how many there are depends on where the kill landed, not on the job's speed.
    open_at_kill: set[tuple[str, str]] = field(default_factory=set)
    job_starts: int = 0
    job_exits: list[str] = field(default_factory=list)
    job_failed: str = ""  # why the job's part of the run could not go on (q3, q4 and q6 say it)
    job_hint: str = ""  # what to do about it, when its run says (a template not written yet)
    crashed: bool = False  # the job was killed mid-stream and started again
    notes: list[str] = field(default_factory=list)
    given_at: dict[str, float] = field(default_factory=dict)  # id -> when its line was given (monotonic)
    measured_from: float = 0.0  # latencies count from here: version 2's producer has acknowledged a departure
    board_seen: list[tuple] = field(default_factory=list)  # every board record as it came (BoardWatch)
    watch_error: str = ""
    storage_sample: list[str] = field(default_factory=list)  # version 2's departures before the burst
    disk_at_start: int = 0  # bytes of EVENTS on the brokers' disks (every replica) as version 2 starts
    disk_before_burst: int = 0  # ... once the sample is acknowledged, before the burst
    disk_at_end: int = 0  # ... once the producer has ended (the burst and the rest of the day written)
    storage_error: str = ""
    events_config: dict[str, str] = field(default_factory=dict)  # EVENTS's settings, as the brokers apply them
    replicas: int = 0  # of EVENTS's partitions
    events_partitions: int = 0


class Feeder:
    """The producer script and what the grader gave it."""

    def __init__(self, ctx: Context, topic: str, day: Day):
        self.ctx, self.topic, self.day = ctx, topic, day
        self.version = 1
        self.earlier: set[str] = set()  # acknowledged by the producer's runs before this one
        self.given_at: dict[str, float] = {}
        # What the producer may claim: the day's ids. A claim of any other is counted, not kept,
        # so a flood of claims costs the grader no memory (the log is read in chunks, its lines
        # at most MAX_ACK_LINE long).
        self.known = {e["id"] for e in day.events}
        self.unknown_claims = 0
        self.run = start(ctx, PRODUCER, topic, tag="producer", stdin=True)
        self._reset()

    def _reset(self) -> None:
        """A new run of the producer: its log is read from the start."""
        self._read, self._partial, self._overlong = 0, b"", False
        self._acked: set[str] = set()
        self.first_ack_at: float | None = None

    def line(self, event: dict) -> dict:
        """What the airports send: version 1's event, or version 2's (the delay in seconds instead of
        minutes, and the gate)."""
        if self.version == 1:
            return event
        v2 = {k: v for k, v in event.items() if k != "dep_delay"}
        return {**v2, **self.day.v2[event["id"]]}

    def finish(self) -> None:
        """Close the producer's input; it must send what it has and end by itself."""
        if self.run.proc.stdin is not None:
            self.run.proc.stdin.close()
        code = wait(self.run, ACK_WAIT_S * 2)
        if code != 0:
            raise ended_early(
                self.run,
                "once its input ended",
                hint="It should end by itself (exit 0) once its input ends: flush() the producer and return.",
            )

    def upgrade(self) -> None:
        """The airports move to version 2: the producer is stopped (its input closed) and started
        again as `board_producer.py EVENTS 2`."""
        self.finish()
        self.earlier |= self.acked()
        self.version = 2
        self.run = start(self.ctx, PRODUCER, self.topic, "2", tag="producer-v2", stdin=True)
        self._reset()

    def acked(self) -> set[str]:
        """The ids the producer reported: "acked <id>", the id's three words first (quotes and
        anything after them, a partition or an offset, are ignored). Its whole output, read in
        steps (a burst's thousands of lines are more than a message's tail), up to MAX_LOG_BYTES."""
        from cluster.safe_files import read_chunk

        while self._read < MAX_LOG_BYTES:
            chunk = read_chunk(self.run.log.parent, self.run.log.name, self._read)
            if not chunk:
                break
            self._read += len(chunk)
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            if self._overlong and lines:  # the end of a line too long to be a claim
                lines, self._overlong = lines[1:], False
            if len(self._partial) > MAX_ACK_LINE:
                self._partial, self._overlong = b"", True
            self._take(b"\n".join(lines))
        if self._partial and self.run.proc.poll() is not None:  # its last line, without a newline
            self._take(self._partial)
            self._partial = b""
        if self._acked and self.first_ack_at is None:
            self.first_ack_at = time.monotonic()
        return self.earlier | self._acked

    def _take(self, text: bytes) -> None:
        for rest in ACKED.findall(text.decode(errors="replace")):
            claimed = " ".join(rest[:MAX_ACK_LINE].replace("'", " ").replace('"', " ").split()[:3])
            if claimed in self.known:
                self._acked.add(claimed)
            else:
                self.unknown_claims += 1

    def give(self, events: list[dict], per_s: float = FEED_PER_S) -> None:
        """Each line at the feed's pace, flushed; the burst's at once."""
        stdin = self.run.proc.stdin
        assert stdin is not None  # started with stdin=True
        for n, e in enumerate(events):
            burst = e["id"] in self.day.burst
            try:
                self.given_at[e["id"]] = time.monotonic()
                stdin.write((json.dumps(self.line(e)) + "\n").encode())
                if not burst:
                    stdin.flush()
            except (BrokenPipeError, OSError):
                hint = (
                    "Read departures from sys.stdin until it ends; a failed send should be retried, not end the script."
                )
                if self.run.ended():
                    raise ended_early(self.run, "while the grader still gave it departures", hint) from None
                raise CheckFailed(
                    f"{PRODUCER} stopped reading its input",
                    found=self.run.output()[-500:],
                    hint="Read departures from sys.stdin until it ends; a failed send should be retried, not end the script.",
                ) from None
            if burst:
                continue
            if n % 20 == 0 and self.first_ack_at is None:
                self.acked()  # when the first acknowledgement came (latencies count from there)
            if per_s:
                time.sleep(1 / per_s)
        try:
            stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the next line given says it

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
        """Start the job again if it exited by itself (a crash of its own), at most JOB_RESTARTS
        times; after that the run goes on without it (the producer's parts are still judged)."""
        assert self.proc is not None
        code = self.proc.proc.poll()
        if code is None or self.r.job_failed:
            return
        self.proc.ended()
        self.r.job_exits.append(self.proc.why())
        if self.proc.not_written():  # the template: starting it again changes nothing
            self.r.job_failed = self.r.job_exits[-1]
            self.r.job_hint = ended_early(self.proc).hint
            return
        if len(self.r.job_exits) > JOB_RESTARTS:
            self.r.job_failed = (
                f"{JOB} exited by itself {len(self.r.job_exits)} times; the last: {self.r.job_exits[-1]}"
            )
            return
        self.start()


def own_view(ctx: Context) -> Context:
    """The same grading, reading the grading's own cluster as its admin."""
    return dataclasses.replace(ctx, kafka=cluster_of(ctx).admin_connection())


class BoardWatch:
    """Every committed record of the board as it comes, with the moment the grader saw it: a thread
    that reads from the start until closed. A compacted board keeps only each hour's latest value;
    what it showed before is judged too (lab15-q3), and when (lab15-q6)."""

    def __init__(self, view: Context, topic: str):
        self.view, self.topic = view, topic
        self.seen: list[tuple[int, int, int, bytes, float]] = []  # partition, offset, timestamp, value, seen at
        self.error = ""
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._read, name="board-watch", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        from .bounded_reads import bounded_poll

        try:
            with KafkaConsumer(
                **self.view.kafka,
                enable_auto_commit=False,
                max_partition_fetch_bytes=2**20,
                isolation_level="read_committed",
                fetch_max_wait_ms=100,
            ) as consumer:
                tps = [TopicPartition(self.topic, p) for p in sorted(consumer.partitions_for_topic(self.topic) or ())]
                consumer.assign(tps)
                consumer.seek_to_beginning(*tps)
                while not self._closed.is_set():
                    for batch in bounded_poll(consumer, self.topic, timeout_ms=100).values():
                        now = time.monotonic()
                        for rec in batch:
                            if len(self.seen) >= MAX_BOARD_RECORDS:
                                self.error = f"the board holds more than {MAX_BOARD_RECORDS:,} records"
                                return
                            self.seen.append(
                                (rec.partition, rec.offset, rec.timestamp, (rec.value or b"")[:MAX_BOARD_VALUE], now)
                            )
        except Exception as e:  # said by the parts that need it
            self.error = f"reading the board as it came failed: {e}"

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=10)


def board_records(
    view: Context,
    topic: str,
    also: list[tuple] = (),  # type: ignore[assignment]
) -> tuple[dict[tuple[str, str], list[dict]], list[str]]:
    """The board's committed records, and those seen earlier (`also`: BoardWatch's), as
    (airport, "YYYY-MM-DDTHH") -> values in the order they were written."""
    records = {(p, o): (ts, value) for p, o, ts, value, *_ in also}
    for r in read_all(view, short_name(topic), isolation_level="read_committed"):
        records[(r.partition, r.offset)] = (r.timestamp, r.value)
    found: dict[tuple[str, str], list[tuple[int, int, dict]]] = defaultdict(list)
    bad = []
    for (_, offset), (ts, raw) in records.items():
        try:
            value = json.loads(raw)
            found[(str(value["airport"]), _hour(value["hour"]))].append((ts, offset, value))
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            bad.append(f"{(raw or b'')[:120]!r} ({type(e).__name__})")
    # each hour's values in the order they were written (by the records' timestamps)
    return {k: [v for _, _, v in sorted(vs, key=lambda x: x[:2])] for k, vs in found.items()}, bad


def _hour(raw) -> str:
    """An hour as "YYYY-MM-DDTHH" from an ISO string ("2013-01-05T07:00:00Z", "...T07:00:00.000Z",
    "+00:00") or epoch seconds or milliseconds."""
    try:
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):  # seconds or milliseconds
            return datetime.fromtimestamp(raw if abs(raw) < 1e11 else raw / 1000, UTC).strftime("%Y-%m-%dT%H")
    except (ArithmeticError, OSError) as e:
        raise ValueError(f"not a time: {raw!r}") from e
    t = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    if t.tzinfo is not None:
        t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H")


_runs: dict[tuple, Run | Exception] = {}  # a self-check's runs, in the student's kernel


def pipeline_run(ctx: Context) -> Run:
    """The run, once per grading (ctx.scratch), of the grader's copy of the scripts (taken at the
    first part: a script the kernel rewrites between parts is not run again); in a self-check,
    once per version of the scripts."""
    key = ("lab15-run", ctx.namespace, ctx.seed, frozen(ctx).digest() if ctx.sandbox is None else "")
    found = ctx.scratch.get(key) or (_runs.get(key) if ctx.sandbox is None else None)
    if found is None:
        try:
            found = run_pipeline(ctx)
        except Exception as e:  # one run a grading, however it ended: each part says it
            found = e
        ctx.scratch[key] = found
        if ctx.sandbox is None:
            _runs.clear()
            _runs[key] = found
    if isinstance(found, CheckFailed):
        raise CheckFailed(f"the pipeline's run stopped: {found.what}", found.expected, found.found, found.hint)
    if isinstance(found, Exception):
        raise found
    return found


def run_pipeline(ctx: Context) -> Run:
    all_up(ctx)
    # new names every run (a self-check runs again on the same cluster), unrelated to each other:
    # the producer, which is given the events' name, cannot work out the board's
    tag = secrets.token_hex(3)
    day = graders_day(ctx)
    r = Run(day, ctx.topic(f"events-{tag}"), ctx.topic(f"board-{secrets.token_hex(3)}"))
    view = own_view(ctx)
    job: Job | None = None
    feeder: Feeder | None = None
    watch: BoardWatch | None = None
    try:
        _setup(ctx, r)
        watch = BoardWatch(view, r.board_topic)
        job = Job(ctx, r, r.events_topic, r.board_topic, f"board-state-{tag}")
        feeder = Feeder(ctx, r.events_topic, day)
        _faults(ctx, r, day, feeder, job, view)
        _board_complete(r, job, view)
    finally:
        runs = [job.proc if job else None, feeder.run if feeder else None]
        for run in runs:
            if run is not None:
                stop(run.proc)
        if watch is not None:
            watch.close()
            r.board_seen, r.watch_error = watch.seen, watch.error
        if feeder is not None:
            r.given_at = feeder.given_at
        all_up(ctx)
    # (EVENTS was read by _board_complete)
    r.board, r.unreadable = board_records(view, r.board_topic, also=r.board_seen)
    _settings(ctx, r)  # as they are at the end (a script may change them)
    if ctx.sandbox is None:  # a self-check, on the student's own cluster: its partition budget is theirs
        _delete_topics(ctx, [r.events_topic, r.board_topic])
    return r


def _delete_topics(ctx: Context, topics: list[str]) -> None:
    try:
        retried(ctx, lambda a: a.delete_topics(topics), f"deleting {', '.join(topics)}")
    except Exception as e:  # the run's verdicts stand; the student can delete them by hand
        print(f"(the run's topics {', '.join(topics)} could not be deleted: {e})")


def _setup(ctx: Context, r: Run) -> None:
    setup = start(ctx, SETUP, r.events_topic, r.board_topic, tag="setup")
    code = wait(setup, SETUP_DEADLINE_S)
    if code != 0:
        raise ended_early(
            setup,
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


def _settings(ctx: Context, r: Run) -> None:
    """EVENTS's settings as the brokers apply them (defaults included), and its replicas."""
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = r.events_topic
    res = retried(
        ctx,
        lambda a: a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"),
        f"reading {topic}'s settings",
    )
    r.events_config = {k: v["value"] for k, v in res["topic"][topic].items()}
    desc = described(ctx, topic)
    r.events_partitions = len(desc["partitions"])
    r.replicas = min(len(p["replica_nodes"]) for p in desc["partitions"])


def _disk_bytes(ctx: Context, topic: str) -> int:
    """The bytes of the topic's logs on the brokers' disks, every replica counted (the brokers'
    own count: DescribeLogDirs), once every replica is in sync."""

    def in_sync() -> bool:  # a follower catching up would count bytes of earlier departures
        desc = described(ctx, topic)
        return all(set(p["isr_nodes"]) >= set(p["replica_nodes"]) for p in desc["partitions"])

    if not wait_for(in_sync, timeout_s=ACK_WAIT_S, every_s=0.5):
        raise RuntimeError(f"the replicas of {topic} were not all in sync within {ACK_WAIT_S} s")

    def ask(_) -> list[dict]:
        # A new client, asking every broker by its id: one made while a broker was stopped does
        # not know that broker, and would ask the others only.
        client = cluster_of(ctx).admin(request_timeout_ms=15_000)
        try:
            answers = client.describe_log_dirs(brokers=list(BROKERS))
        finally:
            client.close()
        told = {a["broker"] for a in answers if a["log_dirs"]}
        if told != set(BROKERS):
            raise RuntimeError(f"only brokers {sorted(told)} told their logs' sizes")
        return answers

    answers = retried(ctx, ask, "asking every broker for its logs' sizes")
    return sum(
        p["partition_size"]
        for a in answers
        for log_dir in a["log_dirs"]
        for t in log_dir.get("topics", [])
        if t.get("name") == topic
        for p in t["partitions"]
    )


def _faults(ctx: Context, r: Run, day: Day, feeder: Feeder, job: Job, view: Context) -> None:
    # The phases are cut from the day without the burst (it comes in the last: graders_day put it there).
    events = [e for e in day.events if e["id"] not in day.burst]
    n = len(events)
    first, down, during_crash = events[: n // 4], events[n // 4 : n // 4 + n // 5], events[n // 4 + n // 5 : n // 2]
    frozen = events[n // 2 : n // 2 + int(FEED_PER_S * FROZEN_S)]
    before = {e["id"] for e in events[: n // 2 + int(FEED_PER_S * FROZEN_S)]}
    rest = [e for e in day.events if e["id"] not in before]

    feeder.give(first)
    acked = feeder.wait_acked({e["id"] for e in first})
    if not acked and feeder.run.ended():
        raise ended_early(
            feeder.run,
            f"before it reported the first {len(first)} departures as acknowledged",
            hint="It reads departures from stdin until the input ends, printing 'acked <id>' for each.",
        )
    expect(
        acked,
        f"{PRODUCER} did not report the first {len(first)} departures as acknowledged within {ACK_WAIT_S} s "
        "(every broker up)",
        expected=f"a line 'acked {first[0]['id']}' per departure, printed as soon as it is acknowledged",
        found=feeder.run.output()[-600:] or "(no output)",
        hint="Print 'acked <id>' from the send's callback once the broker has acknowledged it, without waiting "
        "for more input (confluent-kafka calls callbacks only in poll(): call it from a thread).",
    )
    job.keep_alive()

    # 1. A broker stops cleanly; the producer's writes must go on, and what it reports as
    # acknowledged must be in the topic at once (an acknowledged record is below the high watermark).
    r.broker_stopped = ctx.rng.choice(BROKERS)
    stop_one(ctx, r.broker_stopped)
    feeder.give(down)
    r.given_while_down = [e["id"] for e in down]
    feeder.wait_acked(set(r.given_while_down))
    reported = feeder.acked()
    r.acked_while_down = reported & set(r.given_while_down)
    r.early_acks = sorted(reported - _ids_in(view, r.events_topic))
    all_up(ctx)
    job.keep_alive()

    # 2. The job dies a seeded moment after its first result, and is started again.
    day_hours = set(expected_hours(day, {e["id"] for e in events}))

    def first_result() -> bool:
        job.keep_alive()
        return bool(r.job_failed) or bool(day_hours & set(board_records(view, r.board_topic)[0]))

    crash_in = ctx.rng.uniform(0.3, 1.5)
    if not wait_for(first_result, timeout_s=JOB_FIRST_RESULT_S, every_s=1) and not r.job_failed:
        r.not_in_time.append(
            f"no hour of the day on the board {JOB_FIRST_RESULT_S} s after the job's start, though "
            f"{len(first) + len(down)} departures over several hours were in the events topic (so the job "
            "was not killed mid-stream)"
        )
        feeder.give(during_crash)
    elif r.job_failed:
        feeder.give(during_crash)
    else:
        feeding = threading.Thread(target=feeder.give, args=(during_crash,), daemon=True)
        feeding.start()
        time.sleep(crash_in)
        given = feeder.given_at.copy()  # (one step under the GIL: the feeding thread adds to it)
        job.kill()
        r.crashed = True
        on_board = set(board_records(view, r.board_topic)[0])  # the job dead, its next start seconds away
        r.open_at_kill = set(expected_hours(day, set(given))) - on_board
        r.notes.append(f"the job killed {crash_in:.1f} s after its first result, started again")
        feeding.join()

    # 3. The followers of the leader of most partitions freeze; 1 s of departures; the leader dies.
    leaders = [lead for lead, _ in partitions(ctx, r.events_topic).values()]
    r.leader_killed = max(BROKERS, key=lambda b: (leaders.count(b), -b))
    followers = [b for b in BROKERS if b != r.leader_killed]
    own = ctx.own  # the verbs that break brokers (cluster_of(ctx) has asserted it runs)
    for b in followers:
        own.pause_broker(b)
    try:
        # At the feed's pace, in many small batches: a frozen follower still gets the answer to
        # the fetch it had asked before it froze (the kernel takes it in), so the first batch
        # reaches it; the next ones only the leader has.
        feeder.give(frozen)
        time.sleep(0.3)  # the last answers reach the producer
        acked_before = feeder.acked()
        own.kill_broker(r.leader_killed)
    finally:
        for b in followers:
            own.resume_broker(b)
    wait_until(lambda: r.leader_killed not in _live(ctx), f"broker {r.leader_killed} leaving the live brokers")
    all_up(ctx)
    # new leaders, the dead one back as a follower of theirs: what it alone had is gone now
    r.lost_at_kill = sorted(acked_before - _ids_in(view, r.events_topic))
    job.keep_alive()

    # 4. The airports move to version 2 (the producer too); the rest of the day, late departures
    # and the burst among them, and the departures that close it. The storage is measured from
    # here to the burst; latencies count from version 2's first acknowledgement.
    feeder.upgrade()
    try:
        r.disk_at_start = _disk_bytes(ctx, r.events_topic)
    except Exception as error:
        r.storage_error = str(error)
    r.given_as_v2 = [e["id"] for e in rest]
    burst_at = next(i for i, e in enumerate(rest) if e["id"] in day.burst)
    r.storage_sample = [e["id"] for e in rest[:burst_at]]
    start_at = 0
    for i, e in enumerate(rest):
        if e["id"] in day.pauses or i == burst_at:
            feeder.give(rest[start_at:i])
            start_at = i
        if i == burst_at:
            _storage_before_burst(ctx, r, feeder, view)
        if e["id"] in day.pauses:
            _caught_up(r, job, view, set(feeder.given_at))
    feeder.give(rest[start_at:])
    # From version 2's first acknowledgement (the producer has started), or MEASURE_GRACE_S after
    # its first line if that is sooner (a producer that holds its acknowledgements back is late too).
    first_given = min(feeder.given_at[e["id"]] for e in rest)
    r.measured_from = min(feeder.first_ack_at or math.inf, first_given + MEASURE_GRACE_S)
    feeder.finish()
    r.acked = feeder.acked()
    if not r.storage_error:  # the second window: the burst and the rest, for a producer that changed its ways
        try:
            r.disk_at_end = _disk_bytes(ctx, r.events_topic)
        except Exception as e:
            r.storage_error = str(e)


def _storage_before_burst(ctx: Context, r: Run, feeder: Feeder, view: Context) -> None:
    """The bytes version 2's first departures took on the brokers' disks, once acknowledged and in
    the topic (an "acked" line is the producer's word; the topic is the brokers')."""
    if r.storage_error:
        return
    sample = set(r.storage_sample)
    if not feeder.wait_acked(sample):
        r.storage_error = (
            f"the {len(r.storage_sample)} departures given before the burst were not all acknowledged "
            f"within {ACK_WAIT_S} s"
        )
        return
    if not wait_for(lambda: sample <= _ids_in(view, r.events_topic, quiet_s=0.5), timeout_s=ACK_WAIT_S, every_s=1):
        r.storage_error = (
            f"{PRODUCER} reported the {len(sample)} departures given before the burst as acknowledged, and "
            f"{ACK_WAIT_S} s later not all of them were in the topic"
        )
        return
    try:
        r.disk_before_burst = _disk_bytes(ctx, r.events_topic)
    except Exception as e:
        r.storage_error = str(e)


def _ids_in(view: Context, topic: str, quiet_s: float = 2.0, deadline_s: float = 20.0) -> set[str]:
    """The departures the topic's partitions hold now, up to their high watermarks: what a consumer
    can read, so what the brokers count as written. Read from offset 0 until nothing more comes for
    quiet_s (not up to the end offsets: with fewer replicas in sync than min.insync.replicas, Kafka
    4 leaves the high watermark where it is and will not tell the end offset)."""
    from kafka import KafkaConsumer, TopicPartition

    from .bounded_reads import bounded_poll

    ids: set[str] = set()
    with KafkaConsumer(**view.kafka, enable_auto_commit=False, max_partition_fetch_bytes=2**20) as consumer:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline, last = time.monotonic() + deadline_s, time.monotonic()
        while time.monotonic() - last < quiet_s and time.monotonic() < deadline:
            for batch in bounded_poll(consumer, topic, timeout_ms=300).values():
                last = time.monotonic()
                for rec in batch:
                    try:
                        ids.add(str(json.loads(rec.value)["id"]))
                    except (TypeError, ValueError, KeyError):
                        pass
    return ids


def _caught_up(r: Run, job: Job, view: Context, given: set[str]) -> None:
    """Before late departures: every hour that ended LATENESS_MIN before the latest departure given
    from its airport is due on the board (a job meeting the brief writes it once it has read that
    far: with one watermark for all, or a window that closes per airport), within IN_TIME_S; those
    missing are noted (q6). Then a pause, for a job that reads in micro-batches to finish its batch,
    so the late departures come after it."""
    latest: dict[str, datetime] = {}
    for e in r.day.events:
        if e["id"] in given:
            latest[e["origin"]] = max(latest.get(e["origin"], when(e["dep_time"])), when(e["dep_time"]))
    # (not the hours open when the job was killed: whether it kept them is lab15-q3's)
    due = {
        k
        for k in expected_hours(r.day, {e["id"] for e in r.day.events})
        if k[0] in latest
        and when(k[1] + ":00:00Z") + timedelta(hours=1, minutes=LATENESS_MIN) <= latest[k[0]]
        and k not in r.open_at_kill
    }

    def written() -> bool:
        job.keep_alive()
        return bool(r.job_failed) or due <= set(board_records(view, r.board_topic)[0])

    # Once an hour was late, q6 has failed: the next ones are only looked at, not waited for.
    wait_for(written, timeout_s=IN_TIME_S if not r.not_in_time else 1, every_s=0.5)
    if not r.job_failed:
        missing = sorted(due - set(board_records(view, r.board_topic)[0]))
        r.late_hours.extend(missing)
        r.not_in_time.extend(
            f"{a} {h}:00, due once a departure from {a} at {iso(latest[a])} had come, not there {IN_TIME_S} s later"
            for a, h in missing
        )
    time.sleep(LATE_PAUSE_S)


def _live(ctx: Context) -> set[int]:
    from cluster.brokers import live_brokers

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


def _board_complete(r: Run, job: Job, view: Context) -> None:
    """Until every hour of the day is on the board (whatever its counts), or the deadline."""
    _read_events(view, r)
    want = set(expected_hours(r.day, {i for _, _, i in r.in_topic}))

    def complete() -> bool:
        job.keep_alive()
        return bool(r.job_failed) or want <= set(board_records(view, r.board_topic)[0])

    if not wait_for(complete, timeout_s=BOARD_DEADLINE_S, every_s=2) and not r.job_failed:
        r.notes.append(f"the board still lacked hours {BOARD_DEADLINE_S} s after the last departure")


def _read_events(view: Context, r: Run) -> None:
    given = {e["id"] for e in r.day.events}
    r.in_topic, r.strangers, r.values = [], [], {}
    for rec in read_all(view, short_name(r.events_topic)):
        try:
            value = json.loads(rec.value)
            event_id = value["id"]
        except (TypeError, ValueError, KeyError):
            event_id = None
        if isinstance(event_id, str) and event_id in given:
            r.in_topic.append((rec.partition, rec.offset, event_id))
            r.values.setdefault(event_id, value)
        else:
            r.strangers.append(repr((rec.value or b"")[:120]))


# --- the parts -------------------------------------------------------------------------------------
@check("lab15-q1")
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
    expect(
        not r.early_acks,
        f"with broker {r.broker_stopped} stopped, {PRODUCER} reported {len(r.early_acks)} departures as "
        "acknowledged that were not in the topic",
        expected="'acked <id>' only once the brokers have it",
        found=r.early_acks[:3],
        hint="Print from the send's callback (or its future's result), never right after send().",
    )
    lost = sorted(set(r.lost_at_kill) | (r.acked - {i for _, _, i in r.in_topic}))
    expect(
        not lost,
        f"{len(lost)} departures reported as acknowledged are not in the topic, after broker {r.leader_killed}, "
        "the leader of most partitions, died while its followers were frozen",
        expected="none lost",
        found=lost[:3],
        hint="The leader acknowledged writes its followers did not have yet: with acks=1 (or 0) they die with it. "
        "acks='all' waits for every in-sync replica.",
    )
    kept = {i for _, _, i in r.in_topic}
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


@check("lab15-q2")
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
        if [i for _, _, i in sorted(recs)] != sorted((i for _, _, i in recs), key=lambda i: reported[i])
    )
    expect(
        not wrong,
        f"{len(wrong)} planes' departures are in their partition out of the order they were given to {PRODUCER}",
        found={t: [i for _, _, i in sorted(flying[t])] for t in wrong[:2]},
        hint="A retried send overtook a later one: use an idempotent producer (or one request in flight).",
    )
    return f"{len(flying)} planes that flew more than once, each in one partition, in order"


def _board_verdict(r: Run, late: bool, kinds: dict[str, list[str]] | None = None) -> tuple[list[str], int]:
    """What is wrong on the board: for the hours without late departures (late=False) every value
    must be right; for those with late departures, the latest value. kinds, if given, gets the
    hours of each kind of wrong the check saw (_wrong_kind)."""
    truth = expected_hours(r.day, {i for _, _, i in r.in_topic})
    in_topic = _copies(r)
    copies = Counter((e["origin"], hour_of(e)) for e in r.day.events for _ in range(in_topic[e["id"]] - 1))
    late_hours = {(e["origin"], hour_of(e)) for e in r.day.events if e["id"] in r.day.late}
    wrong = []
    checked = 0
    for key, (departures, delayed) in sorted(truth.items()):
        if (key in late_hours) != late:
            continue
        checked += 1
        found = r.board.get(key, [])
        judged = found[-1:] if late else found
        bad = [
            v
            for v in judged
            if not (_number(v.get("departures")) == departures and _number(v.get("delayed")) == delayed)
        ]
        # The counts are of the grader's day: the board's values are shown, and which way each is off.
        if (not found or bad) and kinds is not None:
            kinds.setdefault(_wrong_kind(r, key, found, (departures, delayed)), []).append(f"{key[0]} {key[1]}:00")
        if not found:
            wrong.append(f"{key[0]} {key[1]}:00: not on the board")
        elif bad:
            shown = ", ".join(f"{_number(v.get('departures'))}/{_number(v.get('delayed'))}" for v in found[:4])
            why = f" ({copies[key]} of its departures are in the events topic twice)" if copies[key] else ""
            wrong.append(
                f"{key[0]} {key[1]}:00: the board says {shown} departures/delayed ({_off(bad[-1], departures, delayed)})"
                f"{why}"
            )
    return wrong, checked


def _wrong_kind(r: Run, key: tuple[str, str], found: list[dict], right: tuple[int, int]) -> str:
    """What the board's values of a wrong hour show: "lost" (open when the job was killed, and
    missing or too low), "missing", "again" (right first, other counts later), "early" (other
    counts first, right at last), "high" or "low" (its counts, not the right ones)."""
    counts = [(_number(v.get("departures")), _number(v.get("delayed"))) for v in found]
    low = bool(counts) and all(isinstance(a, int) and a <= right[0] for a, _ in counts)
    if key in r.open_at_kill and (not counts or (low and counts[-1] != right)):
        return "lost"
    if not counts:
        return "missing"
    if counts[0] == right:
        return "again"
    if counts[-1] == right:
        return "early"
    return "high" if any(isinstance(a, int) and a > right[0] for a, _ in counts) else "low"


# What each kind of wrong hour (_wrong_kind) says of its cause; a hint names those seen, in this order.
WRONG_HOURS = {
    "lost": "Hours still open when the job was killed (departures given, the hour not yet on the board: {}) "
    "are missing or too low: the restarted job lost what it had counted. Keep the job's state (its checkpoint) "
    "in STATE, the folder it is given, which the restart finds again; a temporary folder, or memory, dies with "
    "the process.",
    "missing": "Hours never came on the board ({}): the job never counted their departures (a job started "
    "with a new checkpoint reads from the topic's end unless told earliest), or dropped them as late.",
    "again": "Hours right at first were written again with other counts ({}): the restarted job lost what it had "
    "counted, and read again departures it had counted before (from its last commit) without their hour's "
    "count. Keep the job's state in STATE with its offsets (Spark's checkpoint holds both), so a restart goes on "
    "from both together.",
    "early": "Hours were written before they were final, then corrected ({}): write each hour once, when the "
    "watermark passes its end (append mode).",
    "high": "Hours are too high ({}): departures were counted again after the restart.",
    "low": "Hours are too low ({}): departures were dropped as late (a window whose time one partition moved "
    "on while another's earlier departures were still to come: lab 12), or lost with the job's state.",
}


def _off(value: dict, departures: int, delayed: int) -> str:
    """Which way a board record's counts are off, without the right ones."""
    said = []
    for name, right in (("departures", departures), ("delayed", delayed)):
        v = _number(value.get(name))
        if v != right:
            said.append(
                f"{name} {'too high' if isinstance(v, int) and v > right else 'too low' if isinstance(v, int) else 'not a number'}"
            )
    return ", ".join(said)


def _copies(r: Run) -> Counter:
    return Counter(i for _, _, i in r.in_topic)


def _number(v):
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer() else v


def _job_ran(r: Run) -> None:
    expect(
        not r.job_failed,
        r.job_failed or "",
        hint=r.job_hint
        or "Run the job on your own cluster from the notebook (the rehearsal) and read the board; a streaming "
        "job runs until it is stopped, and lets its Kafka client retry while a broker is down.",
    )


@check("lab15-q3")
def exactly_once(ctx: Context) -> str:
    """every hour on the board once final, with its right counts, through the job's crash"""
    r = pipeline_run(ctx)
    _job_ran(r)
    expect(
        not r.unreadable,
        f"{len(r.unreadable)} records on the board are not a result",
        expected='JSON: {"airport": "JFK", "hour": "2013-01-05T07:00:00Z", "departures": 31, "delayed": 7}',
        found=r.unreadable[:2],
        hint="Write each hour as JSON with the fields the brief names.",
    )
    closing = {(e["origin"], hour_of(e)) for e in r.day.events if e["id"] in r.day.closing}
    truth = expected_hours(r.day, {e["id"] for e in r.day.events})
    invented = sorted(k for k in r.board if k not in truth and k not in closing)
    expect(
        not invented,
        f"the board has {len(invented)} airport-hours in which no departure the grader gave left",
        found=[f"{a} {h}:00" for a, h in invented[:4]],
        hint="Count the departures of the events topic, per airport (origin) and hour of dep_time (UTC).",
    )
    expect(
        r.crashed,
        f"the job could not be killed mid-stream: no hour of the day was on the board {JOB_FIRST_RESULT_S} s after "
        "its start, so its results could not be checked through a crash",
        found=r.not_in_time[:1] or None,
        hint=f"Write each hour once it is final, while the stream goes on: an hour is final once a departure more "
        f"than {LATENESS_MIN} minutes past its end has been read.",
    )
    kinds: dict[str, list[str]] = {}
    wrong, checked = _board_verdict(r, late=False, kinds=kinds)
    expect(
        not wrong,
        f"{len(wrong)} of the {checked} hours without late departures are wrong on the board "
        f"(the job was killed and started again; {'; '.join(r.notes)})",
        found=wrong[:4],
        hint=" ".join(
            text.format(f"{len(kinds[k])}, e.g. {kinds[k][0]}") for k, text in WRONG_HOURS.items() if k in kinds
        ),
    )
    return f"{checked} hours, each right, through a crash of the job ({r.job_starts} starts)"


@check("lab15-q4")
def late_counted(ctx: Context) -> str:
    """the hours that got late departures count them"""
    r = pipeline_run(ctx)
    _job_ran(r)
    expect(bool(r.day.late), "the grader's day has no late departures", hint="A problem of the grader's: tell staff.")
    wrong, checked = _board_verdict(r, late=True)
    expect(
        not wrong,
        f"{len(wrong)} of the {checked} hours that got departures {min(r.day.late.values())}-"
        f"{max(r.day.late.values())} minutes behind the latest one, after the hour had ended, are wrong on the board",
        found=wrong[:4],
        hint=f"Departures up to {LATENESS_MIN} minutes late must count: keep each hour open that long after its "
        "end (a watermark's delay, a window's grace) before writing it.",
    )
    return f"{checked} hours with {len(r.day.late)} late departures, each counted"


V1_TYPES: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "carrier": str,
    "origin": str,
    "dest": str,
    "tailnum": (str, type(None)),
    "dep_time": str,
}


@check("lab15-q5")
def compatible_upgrade(ctx: Context) -> str:
    """after the upgrade to version 2, every record still reads as version 1, and carries version 2's fields"""
    r = pipeline_run(ctx)
    truth = {e["id"]: e for e in r.day.events}
    v1_broken, v2_missing = [], []
    for i, value in r.values.items():
        e = truth[i]
        problems = [k for k, kind in V1_TYPES.items() if not isinstance(value.get(k), kind) or value.get(k) != e[k]]
        delay = value.get("dep_delay")
        if not (isinstance(delay, int) and not isinstance(delay, bool) and delay == e["dep_delay"]):
            problems.append(f"dep_delay={delay!r} (whole minutes: {e['dep_delay']})")
        if problems:
            v1_broken.append(f"{i}: {', '.join(problems)}")
        if i in set(r.given_as_v2) and any(value.get(k) != v for k, v in r.day.v2[i].items()):
            v2_missing.append(f"{i}: { ({k: value.get(k) for k in r.day.v2[i]}) } (given {r.day.v2[i]})")
    expect(
        not v1_broken,
        f"{len(v1_broken)} records of the events topic no longer read as version 1: a reader written for it "
        "(the dashboard team's) finds a field missing, of another type, or with another meaning",
        found=sorted(v1_broken)[:3],
        hint="A compatible change adds fields and keeps the old ones as they were: keep dep_delay in whole minutes "
        "(dep_delay_s // 60) beside the new dep_delay_s.",
    )
    expect(
        not v2_missing,
        f"{len(v2_missing)} of the {len(r.given_as_v2)} departures given as version 2 lack its new fields on the topic",
        found=sorted(v2_missing)[:3],
        hint="Version 2 adds dep_delay_s and gate: write them too (readers of version 2 need them).",
    )
    return f"{len(r.values)} records read as version 1; {len(r.given_as_v2)} carry version 2's fields"


# --- latency and storage ---------------------------------------------------------------------------
def latencies(r: Run) -> dict[tuple[str, str], float]:
    """(airport, hour) -> seconds from the moment the hour was due to the first board record with
    its right counts (inf if none came). An hour is due when the first departure from its airport
    that left LATENESS_MIN past its end is given (then every job's time has passed it: one
    watermark for all airports, or windows that close per airport); only hours
    due once version 2's producer had acknowledged a departure count (before, the grader was
    breaking things). For an hour with late departures, its count without them is right too (that
    they count is lab15-q4's)."""
    in_topic = {i for _, _, i in r.in_topic}
    truth = expected_hours(r.day, in_topic)
    without_late = expected_hours(r.day, in_topic - set(r.day.late))
    # with the topic's copies counted again (a duplicate is lab15-q1's and q3's, not a delay)
    copies = _copies(r)
    counted: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for e in r.day.events:
        c = counted[(e["origin"], hour_of(e))]
        c[0] += copies[e["id"]]
        c[1] += copies[e["id"]] * (e["dep_delay"] >= DELAYED_MIN)
    first_right: dict[tuple[str, str], float] = {}
    for _, _, _, raw, seen_at in sorted(r.board_seen, key=lambda rec: rec[4]):
        try:
            value = json.loads(raw)
            key = (str(value["airport"]), _hour(value["hour"]))
            counts = (_number(value.get("departures")), _number(value.get("delayed")))
        except (TypeError, ValueError, KeyError, AttributeError):
            continue
        if key in truth and counts in (truth[key], without_late.get(key), tuple(counted[key])):
            first_right.setdefault(key, seen_at)
    given = sorted(
        (t, when(e["dep_time"]), e["origin"]) for e in r.day.events if (t := r.given_at.get(e["id"])) is not None
    )
    found = {}
    for key in truth:
        end = when(key[1] + ":00:00Z") + timedelta(hours=1, minutes=LATENESS_MIN)
        due = next((t for t, left, origin in given if origin == key[0] and left >= end), None)
        if due is None or due < r.measured_from:
            continue
        seen = first_right.get(key)
        found[key] = max(0.0, seen - due) if seen is not None else math.inf
    return found


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value at least q% of them do not exceed."""
    ranked = sorted(values)
    return ranked[max(0, math.ceil(q * len(ranked) / 100) - 1)]


def _seconds(v: float) -> str:
    return "never" if v == math.inf else f"{v:.1f} s"


@check("lab15-q6")
def fresh(ctx: Context) -> str:
    """each hour on the board within seconds of being due, through a burst"""
    r = pipeline_run(ctx)
    _job_ran(r)
    never = [k for k in r.late_hours if k not in r.board]  # not late: never written at all
    expect(
        not r.not_in_time,
        f"{len(r.not_in_time)} hours were not on the board in time",
        found=r.not_in_time[:3],
        hint=f"{len(never)} of them never came on the board at all, e.g. {never[0][0]} {never[0][1]}:00: the job "
        "never counted their departures, though they were given after its first result (after its crash, it "
        "started reading past them: a new checkpoint reads from the topic's end unless told earliest), or "
        "dropped them as late."
        if r.crashed and never and len(never) == len(r.late_hours)
        else f"Write an hour once a departure more than {LATENESS_MIN} minutes past its end has been read, within "
        f"seconds: a job that waits for the end of the stream, or a long trigger, is late."
        + (
            " After the grader killed your job, a consumer group's new member first waits for the killed one's "
            "session to expire (kafka-python's session_timeout_ms: 45 s by default)."
            if r.crashed
            else ""
        ),
    )
    expect(
        not r.watch_error,
        "the grader could not follow the board as it was written",
        found=r.watch_error,
        hint="Write one small JSON record per airport and hour (a result is about 100 bytes).",
    )
    lat = latencies(r)
    expect(
        bool(lat),
        "no hour came due after version 2's producer acknowledged its first departure, so no latency was measured",
        hint=f"Print 'acked <id>' as each departure is acknowledged, not at the end: {PRODUCER} is part of the "
        "latency too.",
    )
    p99 = percentile(list(lat.values()), 99)
    slowest = sorted(lat.items(), key=lambda kv: -kv[1])[:3]
    burst = f"{BURST_N:,} departures given at once at {r.day.burst_hour[:13]}:00"
    expect(
        p99 <= LATENCY_P99_S,
        f"the 99th percentile of the time from an hour being due to its right counts on the board is "
        f"{_seconds(p99)}, over {len(lat)} hours (a burst of {burst} among them)",
        expected=f"at most {LATENCY_P99_S} s",
        found=[f"{a} {h}:00: {_seconds(v)}" for (a, h), v in slowest],
        hint="An hour is due once a departure 30 minutes past its end has come: write it then. A trigger every "
        "few seconds or as fast as it can, and a job that reads a burst in one go (not one record at a time), "
        "keep up; so does a producer that batches (linger) instead of waiting for each send.",
    )
    return (
        f"{len(lat)} hours, each on the board within {_seconds(p99)} of being due at the 99th percentile "
        f"(median {_seconds(percentile(list(lat.values()), 50))}), through a burst of {burst}"
    )


@check("lab15-q7")
def storage(ctx: Context) -> str:
    """a week of departures kept, in at most 300 bytes each on the brokers' disks"""
    r = pipeline_run(ctx)
    config = r.events_config
    policy = config.get("cleanup.policy", "")
    expect(
        "compact" not in policy,
        f"the events topic is compacted (cleanup.policy={policy}): it keeps each key's latest departure only",
        hint="Every departure must stay for the retention: cleanup.policy=delete.",
    )
    retention_ms = int(config.get("retention.ms") or 0)
    week = RETENTION_DAYS * 24 * 3600 * 1000
    expect(
        retention_ms < 0 or retention_ms >= week,
        f"the events topic keeps its departures {retention_ms / 3600_000:g} hours (retention.ms={retention_ms})",
        expected=f"at least {RETENTION_DAYS} days: retention.ms >= {week}",
        hint="Set retention.ms on the topic (or leave the brokers' default, 7 days).",
    )
    expect(not r.storage_error, f"the storage could not be measured: {r.storage_error}")
    # Two windows of version 2: its first departures, paced (a batch holds what lingered), and the
    # burst with the rest of the day (a producer that changed its ways later is measured too).
    # The larger cost a departure is the one judged.
    written = {i for _, _, i in r.in_topic}
    first = set(r.storage_sample) & written
    later = (set(r.given_as_v2) - set(r.storage_sample)) & written
    windows = [
        ("before the burst", first, r.disk_before_burst - r.disk_at_start),
        ("from the burst to the day's end", later, r.disk_at_end - r.disk_before_burst),
    ]
    for name, sample, grew in windows:
        expect(bool(sample), f"none of version 2's departures {name} are in the events topic")
        expect(
            grew > 0,
            f"the events topic's logs did not grow while {len(sample)} departures were written to it {name} "
            f"({grew:,} bytes)",
            hint="Records written stay on the disks for the retention: nothing may delete them meanwhile.",
        )
    name, sample, grew = max(windows, key=lambda w: w[2] / len(w[1]))
    per = grew / len(sample)
    expect(
        per <= BYTES_PER_DEPARTURE,
        f"{len(sample)} departures {name} took {grew:,} bytes on the brokers' disks: {per:.0f} bytes each, "
        f"every replica counted ({r.replicas} replicas)",
        expected=f"at most {BYTES_PER_DEPARTURE} bytes a departure",
        found=f"{per:.0f} bytes a departure",
        hint="A departure is about 200 bytes of JSON, and each replica keeps a copy with a record's overhead. "
        "Compress the producer's batches (compression_type), and let them fill (linger_ms): a batch of "
        "several departures compresses far better than one.",
    )
    # retention.bytes bounds each partition: the fullest one (keys need not spread evenly) must
    # hold its share of the retention's departures, at the cost measured.
    limit = int(config.get("retention.bytes") or -1)
    held = Counter(p for p, _, _ in r.in_topic)
    share = max(held.values()) / sum(held.values())
    needed = math.ceil(RETENTION_DAYS * DAY_DEPARTURES * share * per / max(1, r.replicas))
    expect(
        limit < 0 or limit >= needed,
        f"retention.bytes={limit} deletes a partition's oldest departures before they are {RETENTION_DAYS} days old",
        expected=f"at least {needed:,} bytes a partition: the fullest of its {r.events_partitions} partitions holds "
        f"{share:.0%} of the departures, {RETENTION_DAYS} days of {DAY_DEPARTURES:,} a day, at "
        f"{per / max(1, r.replicas):.0f} bytes a copy",
        hint="Leave retention.bytes at -1 (no limit by size), or set it from what a partition holds in the retention.",
    )
    days = "no limit" if retention_ms < 0 else f"{retention_ms / (24 * 3600_000):g} days"
    return (
        f"{per:.0f} bytes a departure on disk at most, every replica counted ({len(first)} departures measured "
        f"before the burst, {len(later)} from it on); retention {days}"
    )
