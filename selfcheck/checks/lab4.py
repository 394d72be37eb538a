"""Lab 4, consumer groups: the grader runs the student's group member as several processes."""

from __future__ import annotations

import json
import time

from cluster.waiting import wait_for

from . import CheckFailed, Context, check, expect, expect_equal, partitions_wrong, prediction, prediction_feedback
from .kafka_state import committed_offsets, end_offsets, fill, graders_topic, read_all, short_name
from .scripts import CRASHED, ended_early, start, stop, wait

TOPIC, PARTITIONS = "departures", 4
MEMBER_SCRIPT = "group_member.py"
MEMBERS = 5  # one more than partitions: one must sit idle
MEMBER_IDLE_S = 10  # a member stops after this long without a message (a loaded machine can take
# several seconds to form a group of five: none may give up before)
STABLE_DEADLINE_S = 30
EXTRA_RECORDS = (20, 120)  # lab4-q2/q3: records the grader adds to each partition before the members start
GRADERS_RECORD = {
    "year": 2013,
    "month": 1,
    "day": 1,
    "dep_time": 600,
    "sched_dep_time": 600,
    "dep_delay": 0,
    "arr_time": 700,
    "sched_arr_time": 700,
    "arr_delay": 0,
    "carrier": "ZZ",
    "flight": 1,
    "tailnum": "N0GRADE",
    "origin": "JFK",
    "dest": "LGA",
    "air_time": 40,
    "distance": 94,
    "hour": 6,
    "minute": 0,
    "time_hour": "2013-01-01T11:00:00Z",
}  # shaped as the notebook's flights
CRASH_IDLE_S = 40  # the lone member of lab4-q3's crash test waits this long for a message: long
# after it has read everything, so only commits made in its loop count


def short_of_the_end(committed: dict, ends: dict) -> str:
    """A group's committed offsets, and which partitions fall short of (or past) their end: the
    group's own values, not the grader's ends (those count the grader's records)."""
    off = sorted(p for p in ends if committed.get(p) != ends[p])
    return f"{committed}: partitions {off} not at their end" if off else str(committed)


def group_state(ctx: Context, group: str) -> dict:
    return ctx.admin.describe_groups([ctx.group(group)])[ctx.group(group)]


def assignment(member: dict, topic: str) -> list[int]:
    parts = (member.get("member_assignment") or {}).get("assigned_partitions") or []
    return sorted(p for t in parts if t["topic"] == topic for p in t["partitions"])


@check("lab4-q1")
def two_groups_see_everything(ctx: Context) -> None:
    """two groups each read every message and commit to the end"""
    ends = end_offsets(ctx, TOPIC)
    total = sum(ends.values())
    for name, group in (("dashboard_count", "dashboard"), ("archive_count", "archive")):
        expect_equal(
            ctx.sub.value(name),
            total,
            f"{name}: messages read by group {ctx.group(group)}",
            hint="Each group keeps its own offsets: a new group with 'earliest' reads everything.",
        )
        expect_equal(
            committed_offsets(ctx, group, TOPIC),
            ends,
            f"offsets committed by {ctx.group(group)}",
            hint="A group's offsets are saved only when you commit: commit once the whole topic is read, "
            "before closing the consumer.",
        )
    # The notebook's counts are the dataset's size; the same function must count a topic of the
    # grader's own whose oldest messages are deleted (so end offsets overstate what is there).
    from kafka import TopicPartition

    topic = graders_topic(ctx, "count-check", 3)
    fill(ctx, topic, {p: ctx.rng.randrange(10, 60) for p in range(3)})
    theirs = end_offsets(ctx, short_name(topic))
    deleted = {p: ctx.rng.randrange(1, theirs[p]) for p in (0, 1)}
    ctx.admin.delete_records({TopicPartition(topic, p): o for p, o in deleted.items()})
    group = f"count-check-{ctx.rng.randrange(10**6)}"
    kept = sum(theirs.values()) - sum(deleted.values())
    got = ctx.sub.value(f"count_in_group({topic!r}, {group!r})")
    # How many the grader's topic holds is the answer: the message says only which way it is off.
    off = (
        " (more than it holds: deleted messages counted?)"
        if isinstance(got, int) and got > kept
        else " (fewer than it holds)"
        if isinstance(got, int)
        else ""
    )
    expect(
        got == kept,
        f"count_in_group({topic!r}, {group!r}) on a topic of the grader's whose oldest messages were deleted{off}",
        expected="the messages the topic still holds, each counted once",
        found=got,
        hint="Count the messages a consumer of the topic you are given reads, from the earliest offset "
        "still kept: end offsets count deleted messages too.",
    )
    committed = committed_offsets(ctx, group, short_name(topic))
    expect(
        committed == theirs,
        f"offsets committed by {ctx.group(group)} on the grader's topic",
        expected="the end offset of every partition",
        found=short_of_the_end(committed, theirs),
        hint="Read in lab.group(group), the group you are given, and commit before you close.",
    )


@check("lab4-q2")
def members_split_partitions(ctx: Context) -> str:
    """five copies of group_member.py split four partitions, one each and one idle"""
    try:
        owned = _members_split_partitions(ctx)
    except CheckFailed as e:
        ctx.scratch["member_error"] = e
        raise
    ctx.scratch["member_shares"] = owned  # what lab4-q2-prediction compares the prediction with
    return f"partitions per member, as the coordinator handed them out: {owned}"


def _members_split_partitions(ctx: Context) -> list[int]:
    group = f"members-{ctx.rng.randrange(10**6)}"
    # Records of the grader's after the notebook's, a seeded number per partition: how many the
    # members must read is known only by reading (or by the brokers), never from the dataset.
    extra = {p: ctx.rng.randint(*EXTRA_RECORDS) for p in range(PARTITIONS)}
    fill(ctx, ctx.topic(TOPIC), extra, value=json.dumps(GRADERS_RECORD).encode())
    runs = [
        start(ctx, MEMBER_SCRIPT, group, f"member-{i}", str(MEMBER_IDLE_S), tag=f"{group}-{i}") for i in range(MEMBERS)
    ]

    def formed(state: dict) -> bool:
        # Stable, everyone in, and the partitions handed out (a leader that has not yet seen the
        # topic's metadata hands out nothing, and a new rebalance follows at once).
        members = state.get("members", [])
        return (
            state.get("group_state") == "Stable"
            and len(members) == MEMBERS
            and sum(len(assignment(m, ctx.topic(TOPIC))) for m in members) >= PARTITIONS
        )

    def a_member_failed() -> bool:
        return any(r.proc.poll() not in (None, 0) for r in runs)

    from kafka.errors import CoordinatorLoadInProgressError, CoordinatorNotAvailableError

    waited = wait_for(
        lambda: group_state(ctx, group),
        timeout_s=STABLE_DEADLINE_S,
        until=formed,
        every_s=0.5,
        stop_if=a_member_failed,
        # a group no member has joined yet (they died first) may have no coordinator to ask
        retry_on=(CoordinatorNotAvailableError, CoordinatorLoadInProgressError),
    )
    if waited.stopped:
        bad = next(r for r in runs if r.proc.poll() not in (None, 0))
        raise ended_early(
            bad,
            f"before its group {ctx.group(group)} had formed",
            hint="Run it yourself in a terminal (python group_member.py g m 5) to see the whole error.",
        )
    state = waited.last or {}
    members = state.get("members", [])
    expect_equal(
        len(members),
        MEMBERS,
        f"members of group {ctx.group(group)} after {STABLE_DEADLINE_S} s",
        hint="Each copy must subscribe() with the group id it is given, and keep polling until it "
        "has been idle for the number of seconds it is given.",
    )
    topic = ctx.topic(TOPIC)
    owned = sorted(len(assignment(m, topic)) for m in members)
    covered = sorted(p for m in members for p in assignment(m, topic))
    expect_equal(
        covered,
        list(range(PARTITIONS)),
        "partitions assigned across the group (each exactly once)",
        hint="subscribe() lets the group assign partitions; assign() bypasses the group.",
    )
    expect_equal(owned, [0] + [1] * PARTITIONS, "partitions per member (five members, four partitions)")
    ctx.scratch["member_runs"] = (group, runs)
    return owned


@check("lab4-q2-prediction")
def shares_prediction(ctx: Context) -> str:
    """a prediction of how many partitions each of five members owns was written before the grader ran them"""
    predicted = prediction(
        ctx,
        "predicted_shares",
        lambda v: (
            isinstance(v, (list, tuple))
            and len(v) == MEMBERS
            and all(isinstance(n, int) and not isinstance(n, bool) for n in v)
        ),
        "[n, n, n, n, n]",
        "five numbers of partitions, one per member",
    )
    # What lab4-q2's five members were handed, when it ran in this grading and they formed a group;
    # a self-check runs each part alone, and lab4-q2's own line shows the shares.
    owned = ctx.scratch.get("member_shares")
    if owned is None:
        return "predicted_shares: made; lab4-q2 runs the five members and shows what each was handed"
    return prediction_feedback(
        "predicted_shares (in any order)",
        sorted(predicted),
        owned,
        "A partition is read by one member of a group at a time; with more members than "
        "partitions, some members get none.",
    )


@check("lab4-q3")
def members_commit_everything(ctx: Context) -> None:
    """when the members stop, their group has committed every offset, and nothing was lost"""
    if "member_error" in ctx.scratch:
        raise CheckFailed(f"this part needs the members of lab4-q2, which failed: {ctx.scratch['member_error'].what}")
    if "member_runs" not in ctx.scratch:
        _members_split_partitions(ctx)
    group, runs = ctx.scratch["member_runs"]
    codes = [wait(r) for r in runs]
    failed = next((r for r, c in zip(runs, codes) if c != 0), None)
    if failed is not None:
        raise ended_early(failed, hint=f"{MEMBER_SCRIPT} should exit 0 once idle (exits of the five: {codes}).")
    reports = []
    for r in runs:
        lines = [ln for ln in r.output().splitlines() if ln.startswith("{")]
        expect(bool(lines), f"{MEMBER_SCRIPT} should print one JSON line when it stops", found=r.output()[-300:])
        reports.append(json.loads(lines[-1]))
    ends = end_offsets(ctx, TOPIC)  # the grader's records included: never in a message
    committed = committed_offsets(ctx, group, TOPIC)
    expect(
        committed == ends,
        f"offsets committed by {ctx.group(group)}",
        expected="the end offset of every partition (the grader's records included)",
        found=short_of_the_end(committed, ends),
        hint="Commit after each batch you processed, so the group holds your offsets before a partition "
        "moves to another member and before the consumer closes.",
    )
    processed = sum(int(rep.get("records", 0)) for rep in reports)
    expect(
        processed >= sum(ends.values()),
        "records the members report having processed (fewer than the topic holds)",
        expected="at least the topic's records, the grader's included",
        found=processed,
        hint="Report the records your member's polls returned: the grader adds records of its own to the topic "
        "before it starts the members, so a count taken from the dataset or the demo is short.",
    )
    commits_while_running(ctx)


def commits_while_running(ctx: Context) -> None:
    """Offsets committed only once a member stops pass the check above: one member alone, with a
    long idle time, must have committed everything it read while it still runs; then the grader
    kills it (SIGKILL, as a crash would), which must lose nothing."""
    group = f"crash-{ctx.rng.randrange(10**6)}"
    ends = end_offsets(ctx, TOPIC)
    run = start(ctx, MEMBER_SCRIPT, group, "alone", str(CRASH_IDLE_S), tag=group)
    committed, since = {}, time.monotonic()
    try:
        while run.proc.poll() is None and time.monotonic() - since < CRASH_IDLE_S:
            committed = committed_offsets(ctx, group, TOPIC)
            if committed == ends:
                return
            time.sleep(0.5)
        if run.ended() and run.proc.returncode != 0:
            raise ended_early(run, f"alone in group {ctx.group(group)}, before it had committed to the end")
        raise CheckFailed(
            f"one {MEMBER_SCRIPT} alone in group {ctx.group(group)}, {time.monotonic() - since:.0f} s "
            "after it started and "
            + ("before it stopped" if run.proc.poll() is None else "until it stopped")
            + ", had committed less than the end",
            expected="the end offset of every partition (the grader's records included)",
            found=short_of_the_end(committed, ends),
            hint="Commit after each batch you processed, inside the poll loop: a member that commits "
            "only when it stops loses nothing on a clean exit, and everything on a crash.",
        )
    finally:
        stop(run.proc)  # the crash: SIGKILL, no close(), no last commit


@check("lab4-q4")
def lag_matches_the_broker(ctx: Context) -> None:
    """lag(group, topic) equals end offset minus committed offset, per partition"""
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    # A topic and group of the grader's own, with a lag it chose.
    topic = graders_topic(ctx, "lag-check", 3, protect=False)
    name = short_name(topic)
    group = ctx.group(name)
    ctx.protect(topics=[topic], groups=[group])  # the lag is the grader's: the student's code may only read it
    fill(ctx, topic, {p: ctx.rng.randrange(5, 30) for p in range(3)})
    ends = end_offsets(ctx, name)
    committed = {p: ctx.rng.randrange(0, ends[p]) for p in (0, 1)}  # partition 2: never committed
    ctx.admin.alter_group_offsets(
        group, {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in committed.items()}
    )
    truth = {p: ends[p] - committed.get(p, 0) for p in ends}
    got = ctx.sub.value(f"lag({group!r}, {topic!r})")
    # The lag the grader set is the answer: which partitions are wrong, with the notebook's values.
    expect(
        got == truth,
        f"lag({group!r}, {topic!r}) per partition" + partitions_wrong(truth, got),
        expected="{partition: its end offset minus the group's committed offset (0 if never committed)} "
        "for every partition of the topic",
        found=got,
        hint="Lag is how far the group's committed offset is behind the partition's end, for every partition "
        "of the topic (one never committed counts from 0); `group` is already a full group name.",
    )


# --- share groups (lab4-q5, lab4-q6) -------------------------------------------------------------

SHARE_MEMBERS, SHARE_PARTITIONS = 6, 2  # the demo: six members of each kind on a two-partition topic
WORKER_SCRIPT = "worker.py"
WORKERS = 3  # after the crash: more members than the jobs topic has partitions
JOB_COUNT = (18, 26)  # seeded: how many jobs the grader queues
JOB_SECONDS = (0.02, 0.12)  # the work of one job (the worker sleeps this long)
CRASH_AT = (2, 5)  # the first worker dies as it sends its N-th result (seeded)
WORKER_IDLE_S = 20  # a worker stops after this long without a job (its JVM's start and its joining
# the group count: 6 s was too short on a loaded machine, and 12 s in a CI run of November 29th on
# a slower machine, its light layer's gradings six at once: 4 of 23 lab 4 gradings found the first
# worker ended by itself, or 21 of 23 jobs without a result)
# A record held by a member that dies comes back at once: the brokers release it when the member's
# connection ends (measured: the next member had it 1.8 s after the kill, its own start included).


def receivers_form(v) -> bool:
    return (
        isinstance(v, dict)
        and set(v) == {"consumer group", "share group"}
        and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= SHARE_MEMBERS for n in v.values())
    )


@check("lab4-q5")
def share_prediction(ctx: Context) -> str:
    """a prediction of how many of six members receive records, in a consumer group and in a share group"""
    from . import shown_in_kernel

    predicted = prediction(
        ctx,
        "predicted_receivers",
        receivers_form,
        '{"consumer group": n, "share group": n}',
        f"how many of {SHARE_MEMBERS} members of each kind receive records (0 to {SHARE_MEMBERS})",
    )
    shown = shown_in_kernel(ctx, "receivers")
    if shown is None:
        return "predicted_receivers: made; run the side-by-side demo to compare"
    return prediction_feedback(
        "predicted_receivers",
        predicted,
        shown,
        "A consumer group hands out partitions, one member each; a share group hands out records, "
        "to any member that asks.",
    )


def jobs_of(ctx: Context, count: int) -> dict[int, dict]:
    """The grader's jobs: id -> {"id", "numbers", "seconds"}, ids seeded and distinct."""
    ids = ctx.rng.sample(range(10_000, 100_000), count)
    return {
        i: {
            "id": i,
            "numbers": [ctx.rng.randrange(-500, 500) for _ in range(ctx.rng.randrange(2, 6))],
            "seconds": round(ctx.rng.uniform(*JOB_SECONDS), 3),
        }
        for i in ids
    }


def share_group_lag(ctx: Context, group: str, topic: str) -> dict[int, int | None]:
    """partition -> the records of the topic the share group has not acknowledged, as the brokers
    have it (kafka-share-groups.sh --describe --offsets, run by the grader with its own login: its
    LAG column). Empty if the brokers know no such share group, or it never read the topic."""
    from cluster.errors import ClusterError
    from cluster.tools import kafka_cli

    try:
        text = kafka_cli("share-groups", "--describe", "--offsets", "--group", group, echo=False, connection=ctx.kafka)
    except ClusterError as e:
        if "does not exist" in str(e) or "GroupIdNotFound" in str(e) or "not a share group" in str(e):
            return {}
        raise
    lines = text.splitlines()
    header = next((ln.split() for ln in lines if ln.split()[:1] == ["GROUP"]), None)
    if header is None or "PARTITION" not in header or "LAG" not in header:
        return {}
    at_p, at_lag = header.index("PARTITION"), header.index("LAG")
    lags: dict[int, int | None] = {}
    for ln in lines:
        cols = ln.split()
        if len(cols) == len(header) and cols[0] == group and cols[1] == topic and cols[at_p].isdigit():
            lags[int(cols[at_p])] = int(cols[at_lag]) if cols[at_lag].isdigit() else None
    return lags


def is_share_group(ctx: Context, group: str) -> bool:
    return any(g.get("group_id") == group for g in ctx.admin.list_groups(types_filter=["share"]))


@check("lab4-q6")
def work_queue(ctx: Context) -> str:
    """worker.py as share-group members: one crashes mid-job, three more finish the queue, and every job is done once"""
    from cluster.share import member_classpath

    # Found (and compiled) here, where the jar cache is writable: the workers' sandbox only reads it.
    classpath = {"COURSE_SHARE_MEMBER_CLASSPATH": member_classpath()}
    jobs_topic = graders_topic(ctx, "jobs", SHARE_PARTITIONS)  # the student's code may only read it
    results_topic = graders_topic(ctx, "results", 1, protect=False)
    group = f"queue-{ctx.rng.randrange(10**6)}"
    jobs = jobs_of(ctx, ctx.rng.randint(*JOB_COUNT))
    from kafka import KafkaProducer

    with KafkaProducer(**ctx.kafka) as producer:
        for n, job in enumerate(jobs.values()):
            producer.send(jobs_topic, key=str(job["id"]).encode(), value=json.dumps(job).encode(), partition=n % 2)
        producer.flush()
    from cluster.tools import kafka_cli

    # A new share group starts at the end of the topic: the grader's starts at its beginning.
    kafka_cli(
        "share-groups",
        "--reset-offsets",
        "--to-earliest",
        "--execute",
        "--topic",
        jobs_topic,
        "--group",
        ctx.group(group),
        echo=False,
        connection=ctx.kafka,
    )
    args = (short_name(jobs_topic), short_name(results_topic), group)
    crash_at = ctx.rng.randint(*CRASH_AT)
    first = start(
        ctx,
        WORKER_SCRIPT,
        *args,
        "worker-0",
        str(WORKER_IDLE_S),
        tag=f"{group}-0",
        harness=["--crash-before-send", str(crash_at)],
        env=classpath,
    )
    code = wait(first)
    if code != CRASHED:
        if code != 0:
            joined_as_consumer = "InconsistentGroupProtocol" in (first.why() or "")
            raise ended_early(
                first,
                f"before the grader's planned crash (at its result {crash_at})",
                hint=f"{ctx.group(group)} is a share group's name: a KafkaConsumer cannot join it; use "
                "cluster.share.ShareConsumer."
                if joined_as_consumer
                else f"Run it yourself in a terminal (python {WORKER_SCRIPT} jobs results g w 5) to see the whole error.",
            )
        raise CheckFailed(
            f"the first {WORKER_SCRIPT} was to be killed as it sent its result {crash_at}, but it ended by itself",
            hint="Write each result with a KafkaProducer's send() (the grader crashes a worker there), one "
            "result per job you take from the queue.",
        )
    # It died holding a job, half done. Three more members, on a two-partition topic.
    runs = [
        start(ctx, WORKER_SCRIPT, *args, f"worker-{i}", str(WORKER_IDLE_S), tag=f"{group}-{i}", env=classpath)
        for i in range(1, WORKERS + 1)
    ]
    codes = [wait(r) for r in runs]
    failed = next((r for r, c in zip(runs, codes) if c != 0), None)
    if failed is not None:
        raise ended_early(failed, hint=f"{WORKER_SCRIPT} should exit 0 once idle (exits of the three: {codes}).")
    expect(
        is_share_group(ctx, ctx.group(group)),
        f"the brokers' share groups include {ctx.group(group)}",
        expected="a share group of that name",
        found="no share group of that name (a consumer group?)",
        hint="Join the queue with cluster.share.ShareConsumer: a KafkaConsumer's group hands out "
        "partitions, not records.",
    )
    done: dict[int, list] = {}
    for r in read_all(ctx, short_name(results_topic)):
        try:
            result = json.loads(r.value)
        except (TypeError, ValueError, RecursionError):
            continue
        if isinstance(result, dict) and isinstance(result.get("job"), int):
            done.setdefault(result["job"], []).append(result.get("total"))
    missing = sorted(set(jobs) - set(done))
    twice = sorted(j for j in jobs if len(done.get(j, ())) > 1)
    wrong = sorted(j for j in jobs if j in done and any(t != sum(jobs[j]["numbers"]) for t in done[j]))
    expect(
        not missing,
        f"jobs without a result on {results_topic}: {len(missing)} of {len(jobs)}",
        expected="a result for every job, the one the crashed worker held included",
        found=f"{len(missing)} missing",
        hint="Acknowledge a job only once its result is written (send(...).get() or flush()): a job "
        "acknowledged before it is done is lost when the worker dies halfway.",
    )
    expect(
        not twice,
        f"jobs with more than one result: {len(twice)} of {len(jobs)}",
        expected="one result per job",
        found=f"{len(twice)} done twice or more",
        hint="Acknowledge (accept) every job you finished: a job released, or never acknowledged, is handed out again.",
    )
    expect(not wrong, f"jobs whose result's total is wrong: {len(wrong)}", expected="the sum of the job's numbers")
    lags = share_group_lag(ctx, ctx.group(group), jobs_topic)
    expect(
        lags == {p: 0 for p in range(SHARE_PARTITIONS)},
        f"share group {ctx.group(group)}'s lag on the jobs topic, as the brokers have it",
        expected="0 on every partition: every job acknowledged",
        found=lags or "no share group's offsets on the jobs topic",
        hint="Acknowledge each job once it is done, before you take the next.",
    )
    return f"{len(jobs)} jobs, the first worker killed at its result {crash_at}, each job done once"
