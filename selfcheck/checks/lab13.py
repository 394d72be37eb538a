"""Lab 13, change data capture. One run of the grader's makes the stream every part is judged on
(`source_run`, once per grading, at the first part that needs it; docs/cdc-grading.md says why
each step is there and what was simplified):

1. a PostgreSQL server of the grader's, outside the sandbox (cluster/postgres.py), with a table of
   seeded columns and rows (REPLICA IDENTITY FULL), the publication lab13_pub, and two logins made
   for this grading that may read the table and replicate, nothing else: one for the grader's
   connector, one handed to the student's cdc_config;
2. two distributed Connect workers in the grading's sandbox, as the grading's Kafka user, their
   REST API answering the grader only; on them the grader's connector (its settings come from the
   grader, ctx.grader_only: the kit has none; a self-check uses the student's cdc_config and says
   so) and the student's (cdc_config's, refused before it reaches a worker if it is not Debezium's
   PostgreSQL source with the values handed in);
3. seeded changes (phase A: inserts, updates, deletes, a row updated twice in one transaction, a
   status that goes A -> B -> A, a key deleted and inserted again); phase B while the worker
   that ran the student's task lies SIGKILLed and its task moves; phase C while both connectors
   are stopped (PUT .../stop, then .../resume: a slot dropped on stop loses it); phase D after
   a column is added;
4. the grader's `select *` (as the owner) after phase C and after phase D: the sink's truth; then
   the database is stopped and removed, so nothing the student runs later can read it.

The grader models every change it makes (`Plan`): the events a connector must send are known
before any runs. Its own connector's topic is checked against that model (a difference is the
grader's failure, never the student's) and is what lab13-q2 and the sink read:

- lab13-q1 cdc_config: the student's topic holds one snapshot event per row that existed before
  the connector started, with its values, then every change of phases A-D once, in order, each
  with its row before and after (one partition, three replicas);
- lab13-q2 status_changes on the grader's topic's records: (id, old, new) for each change that
  moved a row's status, in order;
- lab13-q3-prediction the kill's outcome, predicted before the demo (its form only);
- lab13-q3 the grader's frozen copy of cdc_sink.py, run in the sandbox on a topic of the grader's
  holding phases A-C's records (a copy of its connector's topic): killed right after its first
  offset commit (as the brokers show it: see _cycle), run again; its SQLite table against the
  database's rows after phase C;
- lab13-q4 phase D's records appended, the sink killed at its first offset commit before the
  offsets are stored, run again; its table against the database's final rows, the added column
  included.
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
import shutil
import string
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.waiting import wait_for

from . import CheckFailed, Context, LabPolicy, check, expect, prediction, prediction_feedback, shown_in_kernel
from .kafka_state import committed_offsets, describe_topic, graders_topic, read_all, short_name
from .scripts import CRASHED, ScriptRun, ended_early, frozen, start, stop, wait

DEBEZIUM = "io.debezium.connector.postgresql.PostgresConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
PUBLICATION = "lab13_pub"  # the name the text gives
# Debezium's database.* settings, and the key of conninfo (as db.conninfo() gives it) each takes
DATABASE = {"hostname": "host", "port": "port", "user": "user", "password": "password", "dbname": "dbname"}
TABLE = "flight_status"
SCRIPT = "cdc_sink.py"
STUDENT_SLOT, GRADER_SLOT = "student", "grader"
STUDENT_ROLE, GRADER_ROLE = "student_cdc", "grader_cdc"
STUDENT_CONNECTOR, GRADER_CONNECTOR = "student-cdc", "grader-cdc"
STATUSES = ("scheduled", "boarding", "departed", "delayed", "cancelled", "diverted", "landed", "taxiing")
# Columns a table of the grader's may have besides id and status (ints and text only: Debezium
# encodes numeric, dates and times in ways the lab does not teach).
COLUMNS = (
    ("gate", "text"),
    ("stand", "text"),
    ("crew", "int"),
    ("fuel_kg", "int"),
    ("seats", "int"),
    ("cargo_kg", "int"),
    ("pilot", "text"),
    ("runway", "text"),
    ("terminal", "text"),
    ("bags", "int"),
    ("tail", "text"),
    ("delay_min", "int"),
)
WORKERS_START_S = 150  # two JVMs in the sandbox, next to the brokers and a kernel
RUNNING_S = 90  # a connector and its task running, from its creation
STREAM_S = 60  # the grader's topic holding a phase's changes
MOVE_S = 90  # a killed worker's task running on the other one (measured 12-14 s)
STUDENT_EXTRA_S = 30  # the student's topic catching up once the grader's has everything
STABLE_S = 6  # ... or not growing for this long
SLOTS_S = 60  # both connectors' replication slots made
SINK_IDLE_S = 5  # the sink's IDLE_SECONDS: the grader starts it once its group is empty
SINK_DEADLINE_S = 90  # one run of the sink
KILL_DELAY_S = (0.2, 1.0)  # the grader's own kill of a sink, seeded, after its group's first offset commit
GROUP_EMPTY_S = 60  # a killed sink's session ending (10 s in the template; kafka-python's default 45 s)
MAX_SINK_BYTES = 32 * 2**20  # the sink's SQLite file (a few hundred rows: kilobytes)
MAX_SINK_ROWS = 20_000
TASK_ANSWERS = (
    "moves to the other worker",
    "waits until the dead worker is started again",
    "fails and must be restarted by hand",
)
# Settings a connector of the student's may not have: they run SQL as the login handed in, read files or secrets through
# config providers, change the workers' clients, or send and receive signals (Debezium's).
REFUSED = (
    "database.initial.statements",
    "heartbeat.action.query",  # SQL run as the login, every heartbeat
    "snapshot.select.statement.overrides",  # the snapshot's SELECT, written by the connector's owner
    "signal.",
    "notification.",
    "producer.override.",
    "consumer.override.",
    "admin.override.",
)
POLICY = LabPolicy(
    # The run: the database and two workers started, snapshots, four phases, a task moved off a
    # killed worker, the connectors stopped and resumed; then four runs of the sink, two of them
    # after waiting out a killed member's session. Each wait is bounded; the solution's checks took
    # about 80 s (a grading 72-83 s alone, November 2026).
    checks_budget_s=WORKERS_START_S
    + 2 * RUNNING_S
    + 4 * STREAM_S
    + MOVE_S
    + STUDENT_EXTRA_S
    + 4 * SINK_DEADLINE_S
    + 2 * GROUP_EMPTY_S,
    # two Connect JVMs, PostgreSQL and the sink beside the kernel: 11-16 CPU s a grading of its own
    # processes over 40-135 s, mostly waiting (on the snapshot, a moved task, a killed member's
    # session), 1.8 GB at its peak with the brokers. Four at once: the self-test's 15 in 338 s,
    # every score the corpus's, the machine 43% busy (two at a time: about 14 minutes; November 2026)
    sandbox_processes=512,
    grading_cores=0.5,
    gradings_at_once=4,
    postgres=True,
)
IN_SANDBOX = ("sink_table",)


# --- the grader's table and its changes --------------------------------------------------------
@dataclass
class Change:
    phase: str
    op: str  # "c", "u", "d" as Debezium says
    id: int
    before: dict | None
    after: dict | None

    def event(self) -> tuple:
        return (self.op, self.id, self.before, self.after)


@dataclass
class Plan:
    """The grader's table, what it does to it, and what that must give, all from the seed."""

    columns: list[tuple[str, str]]  # besides id: (name, "int" | "text"), status among them
    added: tuple[str, str]  # the column phase D adds
    rows: dict[int, dict]  # before any connector starts
    # phase -> transactions -> statements: ("insert", id, row) | ("update", id, values) | ("delete", id)
    phases: dict[str, list[list[tuple]]] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    after_c: dict[int, dict] = field(default_factory=dict)
    final: dict[int, dict] = field(default_factory=dict)

    def count(self, upto: str) -> int:
        """Records of a connector's topic once it has sent the phases up to `upto`: the snapshot,
        each change, and a tombstone after each delete."""
        done = [c for c in self.changes if c.phase <= upto]
        return len(self.rows) + len(done) + sum(c.op == "d" for c in done)


def make_plan(seed: int) -> Plan:
    rng = random.Random(f"{seed}:lab13-run")  # the same whichever part starts the run
    extra = rng.sample(COLUMNS, 5)
    columns = [(name, kind) for name, kind in extra[:4]]
    columns.insert(rng.randrange(len(columns) + 1), ("status", "text"))
    added = extra[4]
    nullable = {name for name, _ in columns if name != "status" and rng.random() < 0.5}
    n = rng.randrange(150, 251)
    ids = rng.sample(range(1, 10_000), n + 40)
    fresh = iter(ids[n:])

    def value(name: str, kind: str):
        if name == "status":
            return rng.choice(STATUSES)
        if name in nullable and rng.random() < 0.2:
            return None
        if kind == "int":
            return rng.randrange(0, 5000)
        return rng.choice(string.ascii_uppercase) + str(rng.randrange(1, 100))

    def new_row(i: int, cols) -> dict:
        return {"id": i, **{name: value(name, kind) for name, kind in cols}}

    rows = {i: new_row(i, columns) for i in ids[:n]}
    plan = Plan(columns, added, rows)
    state = {i: dict(r) for i, r in rows.items()}
    cols = list(columns)

    def run(phase: str, transactions: list[list[tuple]]) -> None:
        plan.phases.setdefault(phase, []).extend(transactions)
        for tx in transactions:
            for st in tx:
                if st[0] == "insert":
                    state[st[1]] = dict(st[2])
                    plan.changes.append(Change(phase, "c", st[1], None, dict(st[2])))
                elif st[0] == "update":
                    before = dict(state[st[1]])
                    state[st[1]].update(st[2])
                    plan.changes.append(Change(phase, "u", st[1], before, dict(state[st[1]])))
                else:
                    plan.changes.append(Change(phase, "d", st[1], state.pop(st[1]), None))

    def live(k: int, avoid=()) -> list[int]:
        return rng.sample(sorted(set(state) - set(avoid)), k)

    def other_status(i: int) -> str:
        return rng.choice([s for s in STATUSES if s != state[i]["status"]])

    def other_values(i: int) -> dict:
        name, kind = rng.choice([c for c in cols if c[0] != "status"])
        new = value(name, kind)
        while new == state[i][name]:
            new = value(name, kind)
        return {name: new}

    # Phase A: every kind of change, with the cases that trip a sink or a reader up.
    twice, aba, reborn, deleted = live(4)
    first = other_status(twice)
    second = rng.choice([s for s in STATUSES if s not in (first, state[twice]["status"])])
    was = state[aba]["status"]
    txs: list[list[tuple]] = [[("insert", i, new_row(i, cols))] for i in (next(fresh) for _ in range(4))]
    run("A", txs)
    busy = (twice, aba, reborn, deleted)
    updates: list[list[tuple]] = []
    for i in live(8, busy):
        values = other_values(i) if len(updates) % 3 == 2 else {"status": other_status(i), **other_values(i)}
        updates.append([("update", i, values)])
    run("A", updates)
    run("A", [[("update", twice, {"status": first}), ("update", twice, {"status": second})]])  # one transaction
    run("A", [[("update", aba, {"status": other_status(aba)})]])
    run("A", [[("delete", reborn)]])
    run("A", [[("delete", i)] for i in [deleted, *live(2, busy)]])
    run("A", [[("update", aba, {"status": was})]])  # back where it was: two changes, no net one
    run("A", [[("insert", reborn, new_row(reborn, cols))]])  # the key back, with other values
    x, y = live(2, busy)
    j = next(fresh)
    run("A", [[("insert", j, new_row(j, cols)), ("update", x, {"status": other_status(x)}), ("delete", y)]])
    # Phase B: while the student's task has no worker.
    b: list[list[tuple]] = [[("update", i, {"status": other_status(i)})] for i in live(8)]
    run("B", b)
    j = next(fresh)
    run("B", [[("delete", live(1)[0])], [("insert", j, new_row(j, cols))]])
    # Phase C: while the connectors are stopped.
    run("C", [[("update", i, {"status": other_status(i), **other_values(i)})] for i in live(4)])
    j = next(fresh)
    run("C", [[("delete", live(1)[0])], [("insert", j, new_row(j, cols))]])
    plan.after_c = {i: dict(r) for i, r in state.items()}
    # Phase D: a column added, then changes that set it, and some that do not.
    for r in state.values():
        r[added[0]] = None
    cols.append(added)
    d: list[list[tuple]] = []
    for k, i in enumerate(live(5)):
        values = {added[0]: value(*added)}
        if k % 2 == 0:
            values["status"] = other_status(i)
        d.append([("update", i, values)])
    run("D", d)
    i = live(1)[0]
    run("D", [[("update", i, {"status": other_status(i)})]])
    j = next(fresh)
    run("D", [[("insert", j, new_row(j, cols))], [("delete", live(1)[0])]])
    plan.final = {i: dict(r) for i, r in state.items()}
    return plan


def execute(db, plan: Plan, phase: str) -> None:
    """Run a phase's transactions on the database, as its owner, one transaction each."""
    if phase == "D":
        name, kind = plan.added
        with db.connect() as conn:
            conn.execute(f'alter table {TABLE} add column "{name}" {kind}')
    for tx in plan.phases[phase]:
        with db.connect(autocommit=False) as conn:
            for st in tx:
                if st[0] == "insert":
                    row = st[2]
                    quoted = ", ".join(f'"{column}"' for column in row)
                    conn.execute(
                        f"insert into {TABLE} ({quoted}) values ({', '.join(['%s'] * len(row))})", list(row.values())
                    )
                elif st[0] == "update":
                    sets = ", ".join(f'"{n}" = %s' for n in st[2])
                    conn.execute(f"update {TABLE} set {sets} where id = %s", [*st[2].values(), st[1]])
                else:
                    conn.execute(f"delete from {TABLE} where id = %s", [st[1]])


def table_rows(db) -> dict[int, dict]:
    """The table as its owner reads it: the truth a sink is compared with."""
    with db.connect() as conn:
        cur = conn.execute(f"select * from {TABLE}")
        names = [c.name for c in cur.description]
        return {row[names.index("id")]: dict(zip(names, row)) for row in cur.fetchall()}


# --- reading a connector's topic ---------------------------------------------------------------
# The grader compares a topic with its model (Plan) by digests of (op, key, before, after): what it
# reads is nothing a reader of change events could use in place of its own parsing (lab13-q2).
@dataclass
class Seen:
    snapshot: list[str]  # a digest of each "r" event
    changes: list[str]  # a digest of each "c", "u", "d" event, in the topic's order
    tombstones: int
    unreadable: int


def as_json(raw: bytes | None):
    value = json.loads(raw) if raw is not None else None
    if isinstance(value, dict) and set(value) == {"schema", "payload"}:  # a converter with schemas
        value = value["payload"]
    return value


def digest(op: str, ident: Any, before: Any, after: Any) -> str:
    text = json.dumps([op, ident, before, after], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def seen_on(records: list[tuple[bytes | None, bytes | None]]) -> Seen:
    seen = Seen([], [], 0, 0)
    for key, raw in records:
        try:
            k, v = as_json(key), as_json(raw)
            if v is None:
                seen.tombstones += 1
                continue
            op = v["op"]
            d = digest(op, k.get("id") if isinstance(k, dict) else None, v.get("before"), v.get("after"))
            (seen.snapshot if op == "r" else seen.changes).append(d)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            seen.unreadable += 1
    return seen


def stream_differences(plan: Plan, seen: Seen) -> list[str]:
    """What differs between a topic and the grader's model, said without its values."""
    said = []
    if seen.unreadable:
        said.append(f"{seen.unreadable} records that are not a change event (JSON with op, before, after)")
    rows = Counter(digest("r", i, None, row) for i, row in plan.rows.items())
    have = Counter(seen.snapshot)
    if have != rows:
        said.append(
            f"{len(seen.snapshot)} snapshot events for the {len(plan.rows)} rows the table had ("
            f"{sum((rows - have).values())} rows without one that has their values, "
            f"{sum((have - rows).values())} events that are not one of those rows, or repeat one)"
        )
    want = [digest(*c.event()) for c in plan.changes]
    if seen.changes != want:
        found, need = Counter(seen.changes), Counter(want)
        lost = need - found
        twice = sum((found - need).values())
        phases = Counter(c.phase for c, d in zip(plan.changes, want) if lost.get(d, 0) > 0)
        if lost:
            where = ", ".join(f"{n} of phase {p} ({PHASES[p]})" for p, n in sorted(phases.items()))
            said.append(f"{sum(lost.values())} of the {len(want)} changes missing or different: {where}")
        if twice:
            said.append(f"{twice} change events that are not one of the grader's changes, or repeat one")
        if not lost and not twice:
            said.append("every change there once, but not in the order the database committed them")
    return said


PHASES = {
    "A": "made while the connectors ran",
    "B": "made while the worker that ran your task was dead",
    "C": "made while the connectors were stopped",
    "D": "made after a column was added",
}


# --- the run -------------------------------------------------------------------------------------
@dataclass
class Run:
    plan: Plan
    graders_topic: str
    records: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)  # the grader's connector's
    # each record's offset, timestamp, timestamp type, headers and leader epoch (lab13-q2's records)
    meta: list[tuple] = field(default_factory=list)
    # whose settings made `records`: "grader" (the course's grader, autograder/grader_only.py) or
    # "student" (a self-check: the kit has no grader's settings, so cdc_config's stand in)
    source: str = "grader"
    boundary: int = 0  # records[:boundary] are the snapshot and phases A-C
    after_c: dict[int, dict] = field(default_factory=dict)  # the owner's select * after phase C
    final: dict[int, dict] = field(default_factory=dict)  # ... after phase D
    student_topic: str = ""
    student_error: CheckFailed | None = None  # the config refused, or the connector failed
    student_records: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)
    student_partitions: int = 0
    student_replicas: int = 0
    killed: str = ""
    notes: list[str] = field(default_factory=list)
    config: dict | None = None
    probe: Any = None  # a self-check's: what cdc_config returned for made-up arguments


_runs: dict[tuple, Any] = {}  # a self-check's run, in the student's kernel: one per config


def source_run(ctx: Context) -> Run:
    """The run, once per grading (ctx.scratch); in a self-check once per cdc_config's settings."""
    key = ("lab13-run", ctx.namespace, ctx.seed)
    found = ctx.scratch.get(key) or (_runs.get(key) if ctx.sandbox is None else None)
    if found is not None and ctx.sandbox is None and ctx.label == "lab13-q1" and isinstance(found, Run):
        if found.probe != _config_now(ctx):
            found = None  # the student changed cdc_config: its connector runs again
    if found is None:
        try:
            found = make_run(ctx)
        except Exception as e:  # one run a grading, however it ended: each part says it
            found = e
        ctx.scratch[key] = found
        if ctx.sandbox is None:
            _runs.clear()
            _runs[key] = found
    if isinstance(found, CheckFailed):
        raise CheckFailed(f"the grader's run stopped: {found.what}", found.expected, found.found, found.hint)
    if isinstance(found, Exception):
        raise found
    return found


def _config_now(ctx: Context) -> Any:
    try:
        return ctx.sub.value(
            "cdc_config({'host': 'h', 'port': 1, 'user': 'u', 'password': 'p', 'dbname': 'd'}, 'p', 's')"
        )
    except CheckFailed:
        return None


def student_config(ctx: Context, conninfo: dict, prefix: str, slot: str = STUDENT_SLOT) -> dict:
    """cdc_config's settings for the grader's database, checked before any worker sees them."""
    expr = f"cdc_config({conninfo!r}, {prefix!r}, {slot!r})"
    config = ctx.sub.value(expr)
    shown = f"cdc_config(conninfo, prefix, {slot!r})"
    expect(isinstance(config, dict), f"{shown} should return a dict of settings", found=type(config).__name__)
    config = {str(k): v for k, v in config.items()}
    expect(
        all(isinstance(v, (str, int, float, bool)) for v in config.values()),
        f"{shown}: each setting's value should be a string, a number or a boolean",
        found={k: type(v).__name__ for k, v in config.items() if not isinstance(v, (str, int, float, bool))},
    )
    text = {k: str(v) for k, v in config.items()}
    expect(
        text.get("connector.class") in (DEBEZIUM, "PostgresConnector", "Postgres"),  # Connect's aliases too
        f"connector.class of {shown}",
        expected=DEBEZIUM,
        found=text.get("connector.class"),
        hint="The grader runs Debezium's PostgreSQL source only (the workers list it under /connector-plugins).",
    )
    given = {f"database.{name}": str(conninfo[key]) for name, key in DATABASE.items()}
    given.update({"topic.prefix": prefix, "slot.name": slot})
    wrong = sorted(k for k, v in given.items() if text.get(k) != v)
    expect(
        not wrong,
        f"{shown}: settings that are not the values handed in",
        expected="database.* from conninfo, topic.prefix = prefix, slot.name = slot",
        found={k: text.get(k) for k in wrong if k != "database.password"},
        hint="Take each from the arguments: conninfo['host'], conninfo['port'], ..., prefix, slot.",
    )
    refused = sorted(k for k in text if k.startswith(REFUSED) or "${" in text[k])
    expect(
        not refused,
        f"{shown} has settings the grader does not run",
        expected=f"none of {', '.join(REFUSED)}, nor ${{...}} values",
        found=refused,
    )
    converters = {k: v for k, v in text.items() if k in ("key.converter", "value.converter") and v != JSON_CONVERTER}
    expect(not converters, f"{shown}: the converters", expected=JSON_CONVERTER, found=converters)
    config.pop("name", None)
    return config


def graders_settings(ctx: Context, conninfo: dict, prefix: str) -> tuple[dict, str]:
    """The settings of the connector whose topic lab13-q2 to q4 read, and whose they are. The course's
    grader has its own (ctx.grader_only, from autograder/, which neither the kit nor the sandbox
    shows: they are lab13-q1's answer); a self-check in the kit has none, and uses the student's
    cdc_config (checked as lab13-q1 checks it), and says so in what it finds."""
    own = ctx.grader_only.get("lab13-connector")
    if own is not None:
        return own(conninfo, prefix, GRADER_SLOT, PUBLICATION, TABLE), "grader"
    try:
        return student_config(ctx, conninfo, prefix, GRADER_SLOT), "student"
    except CheckFailed as e:
        raise CheckFailed(
            f"{SELF_CHECK} {e.what}", e.expected, e.found, e.hint or "lab13-q1's check says more."
        ) from None


# The kit has no connector settings of the grader's: a self-check makes the stream the other parts
# read with the student's own cdc_config, and every message it gives says so.
SELF_CHECK = (
    "(this self-check makes the stream lab13-q2 to q4 read with your cdc_config; the course's grader uses a "
    "connector of its own)"
)


def setup_database(db, plan: Plan, passwords: dict[str, str]) -> None:
    cols = ", ".join(f'"{name}" {kind}' + (" not null" if name == "status" else "") for name, kind in plan.columns)
    with db.connect() as conn:
        conn.execute(f"create table {TABLE} (id int primary key, {cols})")
        conn.execute(f"alter table {TABLE} replica identity full")
        conn.execute(f"create publication {PUBLICATION} for table {TABLE}")
        for role, password in passwords.items():
            conn.execute(f"create role {role} login replication password '{password}'")  # made by the grader
            conn.execute(f"grant select on {TABLE} to {role}")
    rows = list(plan.rows.values())
    rng = random.Random(len(rows))
    rng.shuffle(rows)  # stored in no order a copy of the ids could guess
    with db.connect(autocommit=False) as conn:
        names = ["id", *(n for n, _ in plan.columns)]
        conn.cursor().executemany(
            f"insert into {TABLE} ({', '.join(chr(34) + n + chr(34) for n in names)}) values ({', '.join(['%s'] * len(names))})",
            [[r[n] for n in names] for r in rows],
        )


def count_records(ctx: Context, topic: str) -> int:
    if topic not in ctx.admin.list_topics():
        return 0
    return len(read_all(ctx, short_name(topic), isolation_level="read_committed"))


def make_run(ctx: Context) -> Run:
    from cluster.accounts import Account
    from cluster.connect_cluster import ConnectCluster
    from cluster.errors import ClusterError
    from cluster.postgres import Postgres
    from cluster.process import free_port

    plan = make_plan(ctx.seed)
    tag = secrets.token_hex(3)
    r = Run(plan, ctx.topic(f"cdc-g{tag}.public.{TABLE}"))
    grader_prefix, student_prefix = ctx.topic(f"cdc-g{tag}"), ctx.topic(f"cdc-{secrets.token_hex(3)}")
    r.student_topic = f"{student_prefix}.public.{TABLE}"
    # In a self-check there is no private folder: a temporary one of the kernel's.
    base = ctx.private_dir or Path(tempfile.mkdtemp(prefix="lab13-grader-"))
    db_folder, connect_folder = base / f"pg-{tag}", base / f"connect-{tag}"
    db = Postgres(db_folder, port=free_port())
    passwords = {STUDENT_ROLE: secrets.token_urlsafe(18), GRADER_ROLE: secrets.token_urlsafe(18)}
    env = ctx.env or {}
    login = Account(env["KAFKA_USERNAME"], env["KAFKA_PASSWORD"]) if env.get("KAFKA_USERNAME") else None
    launch = None
    if ctx.sandbox is not None:  # the workers in the sandbox, as the grading's Kafka user
        connect_folder.mkdir(mode=0o700)  # grader-only: a new folder in the grader's private folder
        sandbox = ctx.sandbox.with_writable(connect_folder)
        launch = lambda argv, **kw: sandbox.popen(argv, dict(env), **kw)
    connect = ConnectCluster(
        connect_folder,
        ports=[0, 0],
        group=ctx.group(f"cdc-workers-{tag}"),
        login=login,
        namespace_=ctx.namespace,
        launch=launch,
        private_rest=True,
    )

    def conninfo(role: str) -> dict:
        return {"host": "127.0.0.1", "port": db.port, "user": role, "password": passwords[role], "dbname": "postgres"}

    def clean_up() -> None:
        connect.stop()
        db.stop()
        shutil.rmtree(db_folder, ignore_errors=True)  # grader-only: the grader's database

    ctx.cleanup.append(clean_up)
    try:
        # The student's settings first, read before anything of the grader's runs.
        try:
            r.config = student_config(ctx, conninfo(STUDENT_ROLE), student_prefix)
        except CheckFailed as e:
            r.student_error = e
        r.probe = _config_now(ctx) if ctx.sandbox is None else None
        graders, r.source = graders_settings(ctx, conninfo(GRADER_ROLE), grader_prefix)
        db.start()
        setup_database(db, plan, passwords)
        try:
            connect.start(WORKERS_START_S)
        except ClusterError as e:
            raise RuntimeError(f"the grader's Connect workers did not start: {e}") from None
        # the grader's topic made by the grader: one partition, three replicas
        ctx.admin.create_topics({r.graders_topic: {"num_partitions": 1, "replication_factor": 3, "configs": {}}})
        ctx.admin.wait_for_topics([r.graders_topic])
        connect.put(GRADER_CONNECTOR, graders)
        if r.config is not None:
            try:
                connect.put(STUDENT_CONNECTOR, r.config)
            except ClusterError as e:
                r.student_error = CheckFailed(
                    "the workers refused your connector's settings",
                    found=str(e)[:800],
                    hint="Connect's message says which setting; try your settings on your own workers.",
                )
        _running(connect, GRADER_CONNECTOR)
        if r.student_error is None:
            try:
                connect.wait_running(STUDENT_CONNECTOR, RUNNING_S)
            except ClusterError as e:
                r.student_error = CheckFailed(
                    "your connector did not run on the grader's workers",
                    found=str(e)[:1200],
                    hint="Its trace says why; the login handed in may read the table and replicate, and "
                    "nothing else (it cannot create or change a publication).",
                )
        # Changes after a slot is made are streamed, not part of the snapshot: both slots first.
        wanted = {GRADER_SLOT} | ({STUDENT_SLOT} if r.student_error is None else set())
        wait_for(lambda: wanted <= _slots(db), timeout_s=SLOTS_S, every_s=0.5)
        _stream(ctx, r, "0")
        if r.student_error is None:  # its snapshot read before the changes (or its wait is up)
            wait_for(lambda: count_records(ctx, r.student_topic) >= len(plan.rows), timeout_s=STUDENT_EXTRA_S)
        execute(db, plan, "A")
        _stream(ctx, r, "A")
        # Phase B: the worker that runs the student's task (or the grader's) killed mid-stream.
        victim_name = STUDENT_CONNECTOR if r.student_error is None else GRADER_CONNECTOR
        tasks = connect.status(victim_name)["tasks"]
        worker_id = tasks[0][1] if tasks else connect.status(GRADER_CONNECTOR)["tasks"][0][1]
        victim = connect.worker_of(int(worker_id.rsplit(":", 1)[1]))
        connect.kill(victim)
        r.killed = worker_id
        execute(db, plan, "B")
        # Moved: each connector's task running, none on the dead worker (the group has noticed).
        watched = [GRADER_CONNECTOR] + ([STUDENT_CONNECTOR] if r.student_error is None else [])

        def placed() -> list:
            return [connect.status(n)["tasks"] for n in watched]

        moved = wait_for(
            placed,
            timeout_s=MOVE_S,
            until=lambda all_tasks: all(t and t[0][0] == "RUNNING" and t[0][1] != worker_id for t in all_tasks),
            every_s=1,
            retry_on=(OSError, ValueError, ClusterError),
        )
        if not moved:
            raise RuntimeError(f"the tasks did not move off the killed worker within {MOVE_S} s: {moved.last}")
        _stream(ctx, r, "B")
        # Phase C: both connectors stopped (their tasks end cleanly), changes made, then resumed.
        names = [GRADER_CONNECTOR] + ([STUDENT_CONNECTOR] if r.student_error is None else [])
        for name in names:
            _rest(connect, "PUT", f"/connectors/{name}/stop")
        for name in names:

            def state(n: str = name) -> dict:
                return connect.status(n)

            wait_for(
                state,
                timeout_s=RUNNING_S,
                until=lambda s: s["connector"] == "STOPPED" and not s["tasks"],
                every_s=0.5,
                retry_on=(OSError, ValueError, ClusterError),
            )
        execute(db, plan, "C")
        for name in names:
            _rest(connect, "PUT", f"/connectors/{name}/resume")
        _running(connect, GRADER_CONNECTOR)
        _stream(ctx, r, "C")
        r.after_c = table_rows(db)
        r.boundary = plan.count("C")
        execute(db, plan, "D")
        _stream(ctx, r, "D")
        r.final = table_rows(db)
        if r.after_c != plan.after_c or r.final != plan.final:
            raise RuntimeError("the grader's table is not what its model of its own changes says")
        records = read_all(ctx, short_name(r.graders_topic), isolation_level="read_committed")
        r.records = [(x.key, x.value) for x in records]
        r.meta = [(x.offset, x.timestamp, x.timestamp_type, list(x.headers or []), x.leader_epoch) for x in records]
        problems = stream_differences(plan, seen_on(r.records))
        if problems or len(r.records) != plan.count("D"):
            whose = (
                "your cdc_config's connector's topic" if r.source == "student" else "the grader's own connector's topic"
            )
            raise RuntimeError(f"{whose} is not the table's changes: {'; '.join(problems)}")
        if r.student_error is None:
            _student_stream(ctx, connect, r)
    except RuntimeError as e:
        if r.source != "student":
            raise
        raise CheckFailed(
            f"{SELF_CHECK}: {e}",
            hint="Your connector's own topic, in lab13-q1's check, says what it missed; the course's grader "
            "judges lab13-q2 to q4 on its own connector's topic.",
        ) from None
    finally:
        connect.stop()
        db.stop()  # nothing the student runs later can read it: its rows are in r
        shutil.rmtree(db_folder, ignore_errors=True)  # grader-only: the grader's database
        shutil.rmtree(connect_folder, ignore_errors=True)  # grader-only: the grader's workers' folder
        if ctx.private_dir is None:
            shutil.rmtree(base, ignore_errors=True)  # grader-only: the self-check's own temporary folder
    if ctx.sandbox is None:  # a self-check, on the student's own cluster: its partition budget is theirs
        _delete_topics(
            ctx, [r.graders_topic, r.student_topic, *(f"{connect.group}-{k}" for k in ("configs", "offsets", "status"))]
        )
    return r


def _rest(connect, method: str, path: str) -> None:
    """A request the workers may need a moment for (a new leader, a request forwarded to it)."""
    from cluster.errors import ClusterError

    done = wait_for(
        lambda: connect.rest(method, path) is not None, timeout_s=RUNNING_S, every_s=1, retry_on=(OSError, ClusterError)
    )
    if not done:
        raise RuntimeError(f"the grader's workers did not take {method} {path}: {done.last}")


def _slots(db) -> set[str]:
    with db.connect() as conn:
        return {row[0] for row in conn.execute("select slot_name from pg_replication_slots").fetchall()}


def _running(connect, name: str) -> None:
    from cluster.errors import ClusterError

    try:
        connect.wait_running(name, RUNNING_S)
    except ClusterError as e:
        raise RuntimeError(f"the grader's own connector does not run: {e}") from None


def _stream(ctx: Context, r: Run, upto: str) -> None:
    """Until the grader's topic holds the snapshot and the phases up to `upto` ("0": the snapshot)."""
    want = r.plan.count(upto) if upto != "0" else len(r.plan.rows)
    from kafka.errors import KafkaError

    waited = wait_for(
        lambda: count_records(ctx, r.graders_topic),
        timeout_s=STREAM_S,
        until=lambda n: n >= want,
        every_s=1,
        retry_on=(KafkaError, CheckFailed),
    )
    if not waited:
        whose = "a second connector with your settings" if r.source == "student" else "the grader's connector"
        stage = "the snapshot" if upto == "0" else f"phase {upto}'s changes ({PHASES[upto]})"
        raise RuntimeError(
            f"the topic of {whose} held {waited.last} records, not {want}, after {STREAM_S} s waiting for {stage}"
        )


def _student_stream(ctx: Context, connect, r: Run) -> None:
    """The student's topic once it holds as many change events as the grader's (or its wait is up)."""
    from kafka.errors import KafkaError

    want = len(r.plan.rows) + len(r.plan.changes)

    def events() -> int:
        return sum(v is not None for _, v in _student_records(ctx, r))

    def failed() -> bool:
        try:
            state = connect.status(STUDENT_CONNECTOR)
        except Exception:
            return False
        return "FAILED" in [state["connector"], *(t[0] for t in state["tasks"])]

    # Up to STUDENT_EXTRA_S for the rest; a topic that has not grown for STABLE_S is done (a
    # connector that lost changes never sends them).
    seen: list[tuple[float, int]] = []

    def done(n: int) -> bool:
        seen.append((time.monotonic(), n))
        stable = [m for t, m in seen if t >= seen[-1][0] - STABLE_S]
        return n >= want or (seen[-1][0] - seen[0][0] >= STABLE_S and len(set(stable)) == 1)

    wait_for(events, timeout_s=STUDENT_EXTRA_S, until=done, every_s=1, retry_on=(KafkaError,), stop_if=failed)
    time.sleep(2)  # a change sent twice would come now
    if failed():
        trace = connect.status(STUDENT_CONNECTOR)["trace"]
        first = trace.splitlines()[0] if trace else ""
        if "no longer available" in trace:
            r.student_error = CheckFailed(
                "your connector's task failed when it was resumed after a stop: the changes since its stored "
                "position are no longer available on the server (phase C: made while the connectors were stopped)",
                found=first[:200] + (" ... " + first[-200:] if len(first) > 400 else first[200:400]),
                hint="The slot must outlive a stopped task (slot.drop.on.stop false): the server keeps the WAL for a "
                "slot until its reader confirms it.",
            )
        else:
            r.student_error = CheckFailed(
                "your connector's task failed on the grader's workers",
                found=first[:200] + (" ... " + first[-200:] if len(first) > 400 else first[200:400]),
                hint="Its trace (the message above) says why.",
            )
    r.student_records = _student_records(ctx, r)
    if r.student_topic in ctx.admin.list_topics():
        meta = describe_topic(ctx, short_name(r.student_topic))
        r.student_partitions = len(meta["partitions"])
        r.student_replicas = min(len(p["replica_nodes"]) for p in meta["partitions"])


def _student_records(ctx: Context, r: Run) -> list[tuple[bytes | None, bytes | None]]:
    if r.student_topic not in ctx.admin.list_topics():
        return []
    return [(x.key, x.value) for x in read_all(ctx, short_name(r.student_topic), isolation_level="read_committed")]


def _delete_topics(ctx: Context, topics: list[str]) -> None:
    try:
        present = set(ctx.admin.list_topics())
        ctx.admin.delete_topics([t for t in topics if t in present])
    except Exception as e:  # the verdicts stand; the student can delete them by hand
        print(f"(the grader's topics {', '.join(topics)} could not be deleted: {e})")


# --- the parts -----------------------------------------------------------------------------------
@check("lab13-q1")
def captures_changes(ctx: Context) -> str:
    """cdc_config: Debezium sends the grader's table, every row once, then every change once, in order, through a worker's death and a stop"""
    r = source_run(ctx)
    if r.student_error is not None:
        raise r.student_error
    plan = r.plan
    seen = seen_on(r.student_records)
    problems = stream_differences(plan, seen)
    hints = []
    if not seen.snapshot:
        hints.append("snapshot.mode must send the rows that exist before the first change (initial)")
    if any("phase C" in p for p in problems):
        hints.append(
            "the slot must outlive a stopped task (slot.drop.on.stop false), or the changes made meanwhile are lost"
        )
    expect(
        not problems,
        f"the topic of your connector: {'; '.join(problems)}",
        expected=f"{len(plan.rows)} snapshot rows, then {len(plan.changes)} changes, each once, in commit order",
        found=f"{len(seen.snapshot)} snapshot events and {len(seen.changes)} change events",
        hint=("; ".join(hints) + ". " if hints else "")
        + "Read the topic of your own connector after changes, a stop and a resume, and compare it with the table.",
    )
    expect(
        r.student_partitions == 1 and r.student_replicas == 3,
        "the topic your connector made",
        expected="1 partition, 3 replicas",
        found=f"{r.student_partitions} partition(s), {r.student_replicas} replica(s)",
        hint="topic.creation.default.partitions and topic.creation.default.replication.factor.",
    )
    return (
        f"{len(plan.rows)} snapshot rows and {len(plan.changes)} changes, each once and in order, through the death "
        f"of worker {r.killed} and a stop of the connector"
    )


@check("lab13-q2")
def status_moves(ctx: Context) -> str:
    """status_changes: (id, old, new) for each change of a row's status on the grader's topic, in order"""
    r = source_run(ctx)
    want = [
        (c.id, c.before["status"] if c.before else None, c.after["status"] if c.after else None)
        for c in r.plan.changes
        if (c.before or {}).get("status") != (c.after or {}).get("status")
    ]
    # kafka-python's own ConsumerRecord, each field as the grader read it (what lab.read gives)
    records = [(o, ts, tt, k, v, h, e) for (k, v), (o, ts, tt, h, e) in zip(r.records, r.meta)]
    expr = (
        "status_changes([__import__('kafka.consumer.fetcher', fromlist=['_']).ConsumerRecord("
        f"{r.graders_topic!r}, 0, e, o, ts, tt, k, v, h, None, -1 if k is None else len(k), "
        f"-1 if v is None else len(v), -1) for o, ts, tt, k, v, h, e in {records!r}])"
    )
    got = ctx.sub.value(expr, timeout=60)
    expect(isinstance(got, (list, tuple)), "status_changes(records) should return a list", found=type(got).__name__)
    found = [tuple(x) if isinstance(x, (list, tuple)) else x for x in got]
    whose = f" {SELF_CHECK}" if r.source == "student" else ""
    if found == want:
        return f"{len(want)} status changes of {len(r.plan.changes)} row changes, in order{whose}"
    said = []
    if sum(1 for x in found if isinstance(x, tuple) and len(x) == 3 and x[1] is None) > len(r.plan.rows) // 2:
        said.append("snapshot rows among them (op 'r': not changes)")
    if not any(isinstance(x, tuple) and len(x) == 3 and x[2] is None for x in found):
        said.append("no delete (a deleted row moves to None)")
    missing = len([w for w in want if w not in found])
    extra = len([x for x in found if x not in want])
    if not said and not missing and not extra:
        said.append("the right entries, in another order or repeated")
    expect(
        False,
        f"status_changes(<the grader's {len(records)} records>): {len(found)} entries, "
        f"{missing} of the grader's {len(want)} missing, {extra} not among them"
        + (f"; {', '.join(said)}" if said else "")
        + whose,
        expected="(id, old, new) for each insert, update and delete that changed the status, in the topic's order",
        found=found[:3],
        hint="Skip tombstones (value None) and snapshot rows (op 'r'); old from before, new from after (None where "
        "null); one entry per change, none for an update that kept the status.",
    )
    return ""


@check("lab13-q3-prediction")
def kill_prediction(ctx: Context) -> str:
    """a prediction of what a worker's death does to the task and its ten changes was written before the demo"""
    task = prediction(
        ctx,
        "predicted_task",
        lambda v: v in TASK_ANSWERS,
        " or ".join(repr(a) for a in TASK_ANSWERS),
        "one of the three sentences",
    )
    numbers = []
    for name in ("predicted_lost", "predicted_duplicated"):
        numbers.append(
            prediction(
                ctx,
                name,
                lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer() and v >= 0,
                "a whole number, e.g. 0",
                "how many of the ten changes it expects",
            )
        )
    shown = shown_in_kernel(ctx, "(len(set(range(10, 20)) - set(ids)), len(ids) - len(set(ids)))")
    truth = ("moves to the other worker", 0, 0) if not isinstance(shown, (list, tuple)) else (TASK_ANSWERS[0], *shown)
    return prediction_feedback(
        "(predicted_task, predicted_lost, predicted_duplicated)",
        (task, int(numbers[0]), int(numbers[1])),
        tuple(truth),
        "The group notices the dead worker when its session times out; the task starts on the other worker from the "
        "LSN in the offsets topic, and the slot kept the WAL meanwhile; exactly-once support writes records and "
        "offsets in one transaction.",
    )


# --- the sink ------------------------------------------------------------------------------------
@dataclass
class SinkRun:
    first: dict | None = None  # the sink's table after phases A-C (a crash after its first offset commit)
    second: dict | None = None  # ... after phase D (a crash before its first offset commit)
    first_error: CheckFailed | None = None
    second_error: CheckFailed | None = None
    first_how: str = ""  # how the crash went, as the grader saw it
    second_how: str = ""
    columns_c: list[str] = field(default_factory=list)
    columns_d: list[str] = field(default_factory=list)


def sink_table(path: str) -> dict:
    """In the sandbox: the sink's table flight_status, read-only, bounded."""
    import os
    import sqlite3
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise CheckFailed(
            f"{SCRIPT} wrote no file at the SINK_FILE it was given",
            hint="Open the SINK_FILE argument with sqlite3.connect.",
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise CheckFailed("the sink's file is not an ordinary file (a link or a pipe)")
    if st.st_size > MAX_SINK_BYTES:
        raise CheckFailed(
            "the sink's file is larger than a few hundred rows take",
            expected=f"at most {MAX_SINK_BYTES:,} bytes",
            found=f"{st.st_size:,} bytes",
        )
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        cur = conn.execute(f"select * from {TABLE} limit {MAX_SINK_ROWS + 1}")
    except sqlite3.Error as e:
        raise CheckFailed(
            f"the sink's file has no readable table {TABLE} ({e})", hint=f"Create the table {TABLE} in SINK_FILE."
        ) from None
    columns = [c[0] for c in cur.description]
    rows = [list(row) for row in cur.fetchall()]
    conn.close()
    if len(rows) > MAX_SINK_ROWS:
        raise CheckFailed(f"the sink's table holds more than {MAX_SINK_ROWS:,} rows", hint="One row per key: upsert.")
    return {"columns": columns, "rows": rows}


def _norm(v):
    if v is None:
        return None
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v)


def compare(truth: dict[int, dict], columns: list[str], table: dict) -> tuple[list[str], list[str]]:
    """(what differs, said without the grader's values; columns missing from the sink)."""
    have = table["columns"]
    lower = {c.lower(): i for i, c in enumerate(have)}
    missing_cols = [c for c in columns if c.lower() not in lower]
    if "id" not in lower:
        return [f"the sink's table has no column id (its columns: {have[:12]})"], missing_cols
    rows: dict[Any, list] = {}
    repeated = 0
    for row in table["rows"]:
        k = _norm(row[lower["id"]])
        repeated += k in rows
        rows[k] = row
    want = {_norm(i): r for i, r in truth.items()}
    missing = [k for k in want if k not in rows]
    extra = [k for k in rows if k not in want]
    differ = [
        k
        for k in want
        if k in rows
        and any(_norm(want[k][c]) != _norm(rows[k][lower[c.lower()]]) for c in columns if c.lower() in lower)
    ]
    said = []
    if missing_cols:
        said.append(f"columns {missing_cols} missing")
    if missing or extra or differ or repeated:
        said.append(
            f"{len(rows)} rows for the database's {len(want)}: {len(missing)} missing, {len(extra)} that the database "
            f"no longer has (or never had), {len(differ)} with other values"
            + (f", {repeated} keys twice" if repeated else "")
        )
    return said, missing_cols


def _committed(ctx: Context, group: str, topic: str) -> int | None:
    """The group's committed offset on the topic's one partition, as the brokers hold it."""
    return committed_offsets(ctx, group, short_name(topic)).get(0)


def _kill_after_commit(ctx: Context, run: ScriptRun, group: str, topic: str, before: int | None, delay: float) -> bool:
    """Watch the brokers while the sink runs; `delay` s after its group's committed offset first moves,
    kill the sink's sandbox from outside (whatever client it commits with). Whether the grader killed it."""
    moved_at = None
    deadline = time.monotonic() + SINK_DEADLINE_S
    while run.proc.poll() is None and time.monotonic() < deadline:
        if moved_at is None:
            try:
                now = _committed(ctx, group, topic)
            except Exception:  # a coordinator moving: asked again
                now = before
            if now is not None and now != before:
                moved_at = time.monotonic()
        elif time.monotonic() - moved_at >= delay and run.proc.poll() is None:
            stop(run.proc)
            return True
        time.sleep(0.05)
    return False


def run_sink(ctx: Context, topic: str, file: str, group: str, tag: str) -> tuple[ScriptRun, int]:
    run = start(ctx, SCRIPT, short_name(topic), file, group, str(SINK_IDLE_S), tag=tag)
    return run, wait(run, SINK_DEADLINE_S)


def _group_empty(ctx: Context, group: str) -> None:
    def members():
        state = ctx.admin.describe_groups([ctx.group(group)])[ctx.group(group)]
        return state.get("members") or []

    wait_for(members, timeout_s=GROUP_EMPTY_S, until=lambda m: not m, every_s=0.5, retry_on=(Exception,))


def _copy(ctx: Context, topic: str, records: list) -> None:
    from kafka import KafkaProducer

    with KafkaProducer(**ctx.kafka, acks="all") as producer:
        for k, v in records:
            producer.send(topic, key=k, value=v, partition=0)
        producer.flush(timeout=60)


def _cycle(
    ctx: Context, topic: str, file: str, group: str, when: str, name: str, truth: dict, columns: list[str]
) -> str:
    """The sink crashed, its group's session waited out, then run again to its end; how the crash went.

    when="after": killed right after its first offset commit, "before": at it, before the offsets are
    stored. Two ways, both judged by what the brokers show, never by the exit status alone: the
    harness kills it in the process at kafka-python's commit (precisely there, which is what catches
    a batch committed before it is written); any other client (confluent-kafka, ...) the grader
    kills from outside, a seeded moment after the group's committed offset first moves. A sink that
    commits nothing the brokers see (its offsets kept with its rows, say) is not killed, and its
    table is judged when it ends, and again after a second run."""
    before = _committed(ctx, group, topic)
    delay = ctx.rng.uniform(*KILL_DELAY_S)
    crash = f"--crash-{when}-offset-commit"
    run = start(
        ctx, SCRIPT, short_name(topic), file, group, str(SINK_IDLE_S), harness=[crash, "1"], tag=f"{name}-crash"
    )
    killed = _kill_after_commit(ctx, run, group, topic, before, delay)
    code = wait(run, SINK_DEADLINE_S)
    after = _committed(ctx, group, topic)
    moved = after is not None and after != before
    if killed:
        how = f"killed by the grader {delay:.1f} s after its group's first offset commit"
    elif code == CRASHED:
        # A SIGKILL from inside the sandbox: the harness's at a kafka-python commit, or one the script
        # sent itself. Believed only if the brokers show what that commit did.
        if moved != (when == "after"):
            raise CheckFailed(
                f"{SCRIPT} died of a SIGKILL the grader did not send, with "
                + ("no new offset commit of its group on the brokers" if when == "after" else "its offsets stored"),
                expected="the sink running until the grader kills it "
                + ("right after its first offset commit" if when == "after" else "at its first offset commit"),
                found=f"exit status -9; the group's committed offset {after} (before the run: {before})",
                hint="A sink ends by itself only when it has been idle for IDLE_SECONDS.",
            )
        how = f"killed {when} its first offset commit"
    elif code == 0:
        table = _read_sink(ctx, file)
        said, _ = compare(truth, columns, table)
        if said:
            raise CheckFailed(
                f"{SCRIPT} ended by itself before the grader killed it (it committed no offset the brokers "
                f"showed), and its table then: {'; '.join(said)}",
                expected=f"the database's {len(truth)} rows, each with its values",
                found=f"{len(table['rows'])} rows, columns {table['columns'][:10]}",
                hint="Read the topic from its first record (or from offsets you stored yourself) and apply every "
                "event before you stop.",
            )
        how = "not killed: it committed no offset the brokers showed, its table right when it ended"
    else:
        raise ended_early(
            run,
            hint="Run it on your own topic in the notebook (the cell after it) and read its error.",
            found=run.output()[-600:],
        )
    _group_empty(ctx, group)
    again, code = run_sink(ctx, topic, file, group, f"{name}-again")
    if code != 0:
        raise ended_early(
            again, hint="Run it on your own topic in the notebook and read its error.", found=again.output()[-600:]
        )
    return how


_sinks: dict[tuple, SinkRun] = {}  # a self-check's sink runs, in the student's kernel


def sink_run(ctx: Context) -> tuple[Run, SinkRun]:
    r = source_run(ctx)
    # once per grading; in a self-check once per run and version of the script
    key = ("lab13-sink", ctx.namespace, ctx.seed, id(r), frozen(ctx).digest() if ctx.sandbox is None else "")
    found = ctx.scratch.get(key) or (_sinks.get(key) if ctx.sandbox is None else None)
    if found is None:
        found = ctx.scratch[key] = SinkRun()
        if ctx.sandbox is None:
            _sinks.clear()
            _sinks[key] = found
        tag = secrets.token_hex(3)
        topic = graders_topic(ctx, f"cdc-copy-{tag}", 1)
        file, group = f"sink-{tag}.db", f"sink-{tag}"
        if ctx.sandbox is None:  # a self-check: the student's folder keeps no file of the grader's run
            from cluster.safe_files import remove

            ctx.cleanup.append(lambda: remove(ctx.workdir, file))
        found.columns_c = ["id", *(n for n, _ in r.plan.columns)]
        found.columns_d = [*found.columns_c, r.plan.added[0]]
        try:
            _copy(ctx, topic, r.records[: r.boundary])
            found.first_how = _cycle(ctx, topic, file, group, "after", "sink-1", r.after_c, found.columns_c)
            found.first = _read_sink(ctx, file)
        except CheckFailed as e:
            found.first_error = found.second_error = e
        if found.first_error is None:
            try:
                _copy(ctx, topic, r.records[r.boundary :])
                found.second_how = _cycle(ctx, topic, file, group, "before", "sink-2", r.final, found.columns_d)
                found.second = _read_sink(ctx, file)
            except CheckFailed as e:
                found.second_error = e
        if ctx.sandbox is None:
            _delete_topics(ctx, [topic])
    return r, found


def _read_sink(ctx: Context, file: str) -> dict:
    from . import in_sandbox

    return in_sandbox.call(ctx, "selfcheck.checks.lab13:sink_table", str(ctx.workdir / file))


@check("lab13-q3")
def sink_in_step(ctx: Context) -> str:
    """cdc_sink.py keeps a SQLite table in step with the grader's topic, through a crash right after its first offset commit"""
    r, s = sink_run(ctx)
    if s.first_error is not None:
        raise s.first_error
    assert s.first is not None
    said, _ = compare(r.after_c, s.columns_c, s.first)
    expect(
        not said,
        f"the sink's table after the snapshot and {sum(c.phase <= 'C' for c in r.plan.changes)} changes "
        f"({s.first_how}, then run again): {'; '.join(said)}",
        expected=f"the database's {len(r.after_c)} rows, each with its values",
        found=f"{len(s.first['rows'])} rows, columns {s.first['columns'][:10]}",
        hint="Upsert the row of every snapshot, insert and update event, delete on op 'd', in the topic's order; "
        "write the rows before you commit the offsets (a crash between the two then replays, harmlessly).",
    )
    whose = f" {SELF_CHECK}" if r.source == "student" else ""
    return f"{len(r.after_c)} rows, each as the database has it ({s.first_how}, then run again){whose}"


@check("lab13-q4")
def sink_follows_column(ctx: Context) -> str:
    """cdc_sink.py follows a column added at the source, through a crash before its first offset commit"""
    r, s = sink_run(ctx)
    if s.second_error is not None:
        raise s.second_error
    assert s.second is not None
    added = r.plan.added[0]
    said, missing = compare(r.final, s.columns_d, s.second)
    expect(
        not said,
        f"the sink's table after a column ({added}) was added and {sum(c.phase == 'D' for c in r.plan.changes)} more "
        f"changes ({s.second_how}, then run again): {'; '.join(said)}",
        expected=f"the database's {len(r.final)} rows with its {len(s.columns_d)} columns",
        found=f"{len(s.second['rows'])} rows, columns {s.second['columns'][:12]}",
        hint="When an event's row has a column the table does not, add it (alter table ... add column); rows "
        "that never set it keep NULL.",
    )
    whose = f" {SELF_CHECK}" if r.source == "student" else ""
    return (
        f"the new column {added} followed: {len(r.final)} rows, each as the database has it ({s.second_how}, then "
        f"run again){whose}"
    )
