"""A class on one shared cluster (make bench's `load` part): what the brokers hold and how the
students fare, with the faults a class meets.

    python -m bench --only load [--students 200] [--active 30] [--load-seconds 90]

On a bench cluster of its own with the kit's settings (256 MB heaps), `students` namespaces
each get a login, the topics one student's lab holds (a lab's first cell deletes the earlier
lab's topics, so that is a student's footprint: cluster/capacity.py) and consumer groups left
behind. Then `active` of them work at once for `load_seconds`, each a process of its own that
produces numbered records with acks=all and reads them back in a group, while one more student
runs away (a loop creating and deleting topics), grade-all grades a few submissions of lab 2,
and, halfway, a broker is killed (SIGKILL) and started again. The table gives what the brokers
hold (heap after a full GC, resident memory, open files), the students' p99 produce and
end-to-end latencies, acknowledged records lost (none may be) or never read by their group,
the killed broker's time back (until students' logins work on it) and where its restart spent
it (from its log), the brokers' own produce time (JMX, beside the students'), and whether every
grade was the corpus's.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from cluster.capacity import FOOTPRINT_PARTITIONS, plan
from cluster.waiting import wait_for

RATE_PER_S = 20  # each active student's records per second (a lab's loops, slowed to a person's pace)
GRADED_LAB, GRADED = "lab2", 6
GROUPS_LEFT = 3  # consumer groups each student left behind (earlier runs of the labs)
FLUSH_WAIT_S = 120  # after the work, for the last sends to be acknowledged (or fail)


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def student_topics(ns: str) -> dict[str, int]:
    """The footprint as topics of 1-4 partitions, as the labs make them."""
    topics, left, i = {}, FOOTPRINT_PARTITIONS, 0
    while left > 0:
        n = min(left, 4 if i % 2 == 0 else 1)
        topics[f"{ns}.t{i}"] = n
        left, i = left - n, i + 1
    return topics


def make_students(c, count: int) -> list[tuple[str, str]]:
    """(namespace, password) of `count` students, each with its ACLs and topics, made as itself."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import (
        CoordinatorNotAvailableError,
        NotLeaderForPartitionError,
        RequestTimedOutError,
        TopicAlreadyExistsError,
        UnknownTopicOrPartitionError,
    )
    from kafka.structs import OffsetAndMetadata

    from cluster import accounts

    admin = c.admin()
    made, slow = [], set()
    try:
        for i in range(count):
            ns = f"s{i:03d}"
            account = accounts.Account(ns, accounts.new_password())
            accounts.grant(admin, account, ns)
            made.append((ns, account.password))
    finally:
        admin.close()
    for ns, password in made:
        login = accounts.Account(ns, password).kafka_python()
        with KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, **login) as mine:
            topics = student_topics(ns)
            for _attempt in range(5):  # a controller busy with thousands of partitions may answer late
                missing = {t: n for t, n in topics.items() if t not in mine.list_topics()}
                if not missing:
                    break
                try:
                    mine.create_topics({t: {"num_partitions": n, "replication_factor": 3} for t, n in missing.items()})
                except (RequestTimedOutError, TopicAlreadyExistsError):
                    slow.add(ns)
                    time.sleep(2)
            first = next(iter(topics))
            for g in range(GROUPS_LEFT):  # what a student's earlier runs leave: groups with offsets
                # a new cluster makes its offsets topic on first use
                left = wait_for(
                    lambda g=g, ns=ns, first=first: mine.alter_group_offsets(
                        f"{ns}.old-{g}", {TopicPartition(first, 0): OffsetAndMetadata(0, "", -1)}
                    ),
                    timeout_s=60,
                    until=lambda _: True,
                    every_s=0.5,
                    retry_on=(CoordinatorNotAvailableError, UnknownTopicOrPartitionError, NotLeaderForPartitionError),
                )
                if not left:
                    raise left.last
    if slow:
        print(
            f"load: {len(slow)} students' topic creations timed out at the controller and were asked again",
            file=sys.stderr,
        )
    return made


def act(servers: str, ns: str, password: str, seconds: float) -> dict:
    """One student at work: a producer (acks=all) of numbered records and a consumer in a group
    on the student's own topic, `seconds` long. Returns the produce latencies (send() to
    acknowledgement) and the end-to-end ones (the record's timestamp to the consumer), in
    seconds; the errors sends met; the acknowledged numbers missing from the topic afterwards
    (lost), and those the group never read."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaTimeoutError

    from cluster.accounts import Account

    login = {"bootstrap_servers": servers, **Account(ns, password).kafka_python()}
    topic = f"{ns}.t0"
    produced, e2e, errors, acked, read = [], [], [], set(), set()
    producer = KafkaProducer(**login, acks="all", request_timeout_ms=30_000)
    consumer = KafkaConsumer(
        topic, **login, group_id=f"{ns}.readers", auto_offset_reset="earliest", fetch_max_wait_ms=100
    )
    stop = time.monotonic() + seconds

    joined, flushed = threading.Event(), threading.Event()

    def take():
        while time.monotonic() < stop + 90 and not (flushed.is_set() and acked <= read):
            try:
                polled = consumer.poll(timeout_ms=200)
            except Exception as e:  # what would end a student's loop: counted, and the loop goes on
                errors.append(f"poll: {type(e).__name__}")
                continue
            if consumer.assignment():
                joined.set()
            for records in polled.values():
                now = time.time()
                e2e.extend(now - r.timestamp / 1000 for r in records)
                read.update(int(r.value[:10]) for r in records)

    def ok(n, sent, wall, _metadata):
        produced.append((wall, time.monotonic() - sent))
        acked.add(n)

    reader = threading.Thread(target=take, daemon=True)
    reader.start()
    joined.wait(30)  # the group has its partitions: latencies from here are the records' own
    stop = time.monotonic() + seconds
    next_at, n = time.monotonic(), 0
    while time.monotonic() < stop:
        sent = time.monotonic()
        future = producer.send(topic, value=f"{n:010d}".encode().ljust(200, b"x"))
        future.add_callback(ok, n, sent, time.time())
        future.add_errback(lambda e: errors.append(type(e).__name__))
        n += 1
        next_at += 1 / RATE_PER_S
        time.sleep(max(0.0, next_at - time.monotonic()))
    try:
        producer.flush(timeout=FLUSH_WAIT_S)
    except KafkaTimeoutError:  # counted below (sent, neither acknowledged nor failed): the run goes on
        pass
    flushed.set()
    reader.join()
    producer.close(timeout=5)
    consumer.close()
    # what the topic holds now, read from the start with no group
    check = KafkaConsumer(**login, enable_auto_commit=False)
    parts = [TopicPartition(topic, p) for p in check.partitions_for_topic(topic)]
    check.assign(parts)
    check.seek_to_beginning()
    ends, stored = check.end_offsets(parts), set()
    while any(check.position(tp) < ends[tp] for tp in parts):
        for records in check.poll(timeout_ms=1000).values():
            stored.update(int(r.value[:10]) for r in records)
    check.close()
    return {
        "produced": produced,
        "e2e": e2e,
        "errors": errors,
        "acked": len(acked),
        "pending": n - len(acked) - sum(1 for e in errors if not e.startswith("poll: ")),
        "lost": len(acked - stored),
        "unread": len(acked - read),
    }


def run_away(servers: str, ns: str, password: str, seconds: float) -> dict:
    """A student's runaway loop: create a topic, delete it, again, as fast as the brokers let it.
    The controller mutation quota and the partition budget are what hold it."""
    from kafka.admin import KafkaAdminClient

    from cluster.accounts import Account

    admin = KafkaAdminClient(bootstrap_servers=servers, **Account(ns, password).kafka_python())
    done, refused, stop, i = 0, 0, time.monotonic() + seconds, 0
    while time.monotonic() < stop:
        name = f"{ns}.loop-{i}"
        i += 1
        try:
            admin.create_topics({name: {"num_partitions": 4, "replication_factor": 3}})
            admin.delete_topics([name])
            done += 1
        except Exception:  # throttled or refused: what holds the loop
            refused += 1
    admin.close()
    return {"done": done, "refused": refused}


def heap_after_gc_mb(pid: int) -> float:
    """A broker's live heap: a full GC (jcmd GC.run), then what is used (GC.heap_info)."""
    subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=60)
    out = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60).stdout
    used = [int(k) for k in re.findall(r"used (\d+)K", out)]
    # Serial GC: "def new generation total ..K, used ..K" and "tenured generation total ..K, used ..K"
    return sum(used[:2]) / 1024 if used else float("nan")


def measured(measure, *args) -> dict:
    """A measurement that must not end the run it is part of: {} (a row left empty) if it fails."""
    try:
        return measure(*args)
    except Exception as e:  # reported, and the bench goes on
        print(f"load: {measure.__name__} failed ({type(e).__name__}: {e})", file=sys.stderr)
        return {}


def broker_produce_ms(pid: int) -> dict[str, float]:
    """The broker's own time for produce requests (Kafka's RequestMetrics TotalTimeMs, from the
    arrival of a request to its response sent: for acks=all, the followers' fetches included),
    read over JMX: p50 and p99 of its recent requests, and how many it has answered. Through
    the JVM's local management agent (jcmd; only this user can attach), not a JMX port."""
    from cluster import jars
    from cluster.java import java_executable

    subprocess.run(["jcmd", str(pid), "ManagementAgent.start_local"], capture_output=True, timeout=60)
    counters = subprocess.run(
        ["jcmd", str(pid), "PerfCounter.print"], capture_output=True, text=True, timeout=60
    ).stdout
    found = re.search(r'sun\.management\.JMXConnectorServer\.address="([^"]+)"', counters)
    if not found:
        return {}
    bean = "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce"
    attributes = ("50thPercentile", "99thPercentile", "Count")
    out = subprocess.run(
        [
            java_executable(),
            "-Xmx128m",
            "-cp",
            ":".join(map(str, jars.jars("kafka-tools"))),
            "org.apache.kafka.tools.JmxTool",
            "--jmx-url",
            found.group(1),
            "--object-name",
            bean,
            "--attributes",
            ",".join(attributes),
            "--one-time",
            "true",
            "--report-format",
            "csv",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    # One line per attribute: <bean>:<attribute>,"<value>" (and a first line with the time)
    found = {}
    for line in out.splitlines():
        key, _, value = line.rpartition(",")
        if ":" in key:
            try:
                found[key.rsplit(":", 1)[1]] = float(value.strip('"'))
            except ValueError:
                continue
    if "99thPercentile" not in found:
        return {}
    return {
        "p50_ms": found.get("50thPercentile", float("nan")),
        "p99_ms": found["99thPercentile"],
        "count": found.get("Count", float("nan")),
    }


# Marks in a broker's log of where a restart spends its time (Kafka's own lines, the same from 4.1 to 4.3).
STARTING = re.compile(r"^\[(\d\d):(\d\d):(\d\d),(\d{3})\] INFO  \[ControllerServer id=\d+\] Starting controller")
LOADING = re.compile(r"^\[(\d\d):(\d\d):(\d\d),(\d{3})\] INFO  Loading logs from log dirs")
LOADED = re.compile(r"^\[(\d\d):(\d\d):(\d\d),(\d{3})\] INFO  Loaded (\d+) logs in (\d+)ms")
STARTED = re.compile(r"^\[(\d\d):(\d\d):(\d\d),(\d{3})\] INFO  \[KafkaRaftServer nodeId=\d+\] Kafka Server started")


def restart_phases(log_file: Path) -> dict[str, float]:
    """The last start in a broker's log, in seconds from its first line: metadata replayed (until
    it loads logs), logs loaded, and the server started. (Times of day: a start that spans
    midnight is not expected in a bench of minutes.)"""

    def at(m) -> float:
        h, mi, sec, ms = (int(g) for g in m.groups()[:4])
        return h * 3600 + mi * 60 + sec + ms / 1000

    marks: dict[str, float] = {}
    logs = 0
    with open(log_file, errors="replace") as f:
        for line in f:
            if m := STARTING.match(line):
                marks, logs = {"start": at(m)}, 0
            elif "start" in marks and (m := LOADING.match(line)):
                marks["loading"] = at(m)
            elif "start" in marks and (m := LOADED.match(line)):
                marks["loaded"], logs = at(m), int(m.group(5))
            elif "start" in marks and (m := STARTED.match(line)):
                marks["started"] = at(m)
    if not {"start", "loading", "loaded", "started"} <= set(marks):
        return {}
    return {
        "metadata_s": marks["loading"] - marks["start"],
        "logs": float(logs),
        "logs_s": marks["loaded"] - marks["loading"],
        "started_s": marks["started"] - marks["start"],
    }


def write_class(tmp: Path, lab: str, size: int) -> dict[str, dict[str, float]]:
    """`size` submissions of `lab` in tmp/submitted, drawn in turn from its solution and its
    corpus's realistic work (not the attacks, built to be slow); student -> expected scores."""
    import nbformat

    from autograder.pipeline import SOLUTIONS, graded_parts
    from staff.corpus import SCENARIOS
    from staff.selftest import expected_scores

    solution = nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4)
    parts = graded_parts(solution)
    kinds = [(solution, dict(parts))] + [
        (s.notebook(), expected_scores(s, parts))
        for s in SCENARIOS
        if s.lab == lab and s.base == "solution" and not s.note
    ]
    (tmp / "submitted").mkdir()
    expected = {}
    for i in range(size):
        nb, scores = kinds[i % len(kinds)]
        student = f"student-{i:03d}"
        nbformat.write(nb, tmp / "submitted" / f"{student}.ipynb")
        expected[student] = scores
    return expected


def grade_class(tmp: Path, lab: str, expected: dict, jobs: int, env: dict) -> int:
    """grade-all on tmp/submitted; how many scores differ from the expected ones, or were not graded."""
    import csv

    subprocess.run(
        [
            sys.executable,
            "-m",
            "autograder",
            "grade-all",
            lab,
            str(tmp / "submitted"),
            "--out",
            str(tmp / "grades"),
            "--jobs",
            str(jobs),
            "--no-progress",
        ],
        env=env,
        timeout=6 * 3600,
        capture_output=True,
    )
    csv.field_size_limit(sys.maxsize)  # a part's message may be long
    try:
        with open(tmp / "grades" / "gradebook.csv") as f:
            book = {row["student"]: row for row in csv.DictReader(f)}
    except OSError:
        return len(expected)
    return sum(
        1
        for s, want in expected.items()
        if book.get(s, {}).get("status") != "graded" or {p: float(book[s][p]) for p in want} != want
    )


def bench_load(students: int, active: int, seconds: float) -> list[tuple]:
    import psutil

    from .__main__ import running_cluster

    with tempfile.TemporaryDirectory(prefix="course-bench-load-") as tmp:
        tmp = Path(tmp)
        expected = write_class(tmp, GRADED_LAB, GRADED)
        # the heap `python -m hub run` gives brokers for this class (cluster/capacity.py)
        heap_mb = plan(students).heap_mb
        with running_cluster(tmp, "load", heap=f"{heap_mb}m") as (c, env):
            t = time.perf_counter()
            made = make_students(c, students)
            setup_s = time.perf_counter() - t
            partitions = students * FOOTPRINT_PARTITIONS
            quiet = {n.id: heap_after_gc_mb(n.pid) for n in c.nodes.values()}
            wrong: list[int] = []
            grading = threading.Thread(target=lambda: wrong.append(grade_class(tmp, GRADED_LAB, expected, 3, env)))
            grading.start()
            with ProcessPoolExecutor(active + 1) as pool:
                work = [pool.submit(act, c.bootstrap_servers, ns, pw, seconds) for ns, pw in made[:active]]
                runaway = pool.submit(run_away, c.bootstrap_servers, *made[-1], seconds)
                time.sleep(seconds / 2)
                # the brokers' own view of the same sends, every broker up (read before the kill)
                own_view = [measured(broker_produce_ms, n.pid) for n in c.nodes.values() if n.pid]
                victim = max(c.nodes)
                killed_at = time.time()
                c.kill_broker(victim)
                t = time.monotonic()
                # returns once the cluster lists it and students' logins work; measured, not bounded
                # by the laptop's deadline (the target, 60 s, is the table's)
                rejoin = c.start_broker(victim, timeout=600)
                back_s = time.monotonic() - t
                phases = measured(restart_phases, c.nodes[victim].log_file)
                done = [w.result() for w in work]
                loop = runaway.result()
            grading.join()
            dead = sum(n.process() is None for n in c.nodes.values())
            heap = [heap_after_gc_mb(n.pid) for n in c.nodes.values() if n.pid]
            rss = [n.rss_bytes() / 2**20 for n in c.nodes.values()]
            files = [psutil.Process(n.pid).num_fds() for n in c.nodes.values() if n.pid]
    # sends acknowledged before the kill: their whole trip with every broker up
    quiet_sends = [latency for d in done for at, latency in d["produced"] if at + latency < killed_at]
    produced = [latency for d in done for _, latency in d["produced"]]
    e2e = [x for d in done for x in d["e2e"]]
    errors = [x for d in done for x in d["errors"] if not x.startswith("poll: ")]
    poll_errors = [x for d in done for x in d["errors"] if x.startswith("poll: ")]
    who = f"{students} students, {active} at work"
    refusals = (", ".join(f"{kind} {n}" for kind, n in rejoin.refused.items()) or "none") + (
        "; the users written again" if rejoin.users_rewritten else ""
    )
    groups = students * GROUPS_LEFT
    return [
        (
            f"{who}: partitions held (RF 3; {FOOTPRINT_PARTITIONS} each), {groups:,} groups left behind",
            [float(partitions)],
            "",
            None,
        ),
        (f"{who}: logins, ACLs and topics made", [setup_s], "s", None),
        (
            f"{who}: broker heap after full GC, before the work (of {heap_mb} MB, the hub's rule)",
            list(quiet.values()),
            "MB",
            None,
        ),
        (
            f"{who}: broker heap after full GC, after it (target: a quarter of the heap free)",
            heap,
            "MB",
            0.75 * heap_mb,
        ),
        (f"{who}: broker resident memory", rss, "MB", None),
        (f"{who}: broker open files", [float(f) for f in files], "", None),
        (
            f"{who}: p99 produce latency, acks=all, every broker up ({len(quiet_sends):,} sends)",
            [percentile(quiet_sends, 0.99)],
            "s",
            1.0,
        ),
        (f"{who}: p50 of the same", [percentile(quiet_sends, 0.5)], "s", None),
        (
            f"{who}: p99 of the brokers' own produce time (JMX TotalTimeMs: arrival to response, followers' "
            "copies included), every broker up",
            [v["p99_ms"] / 1000 for v in own_view if v],
            "s",
            1.0,
        ),
        (f"{who}: p50 of the same", [v["p50_ms"] / 1000 for v in own_view if v], "s", None),
        (
            f"{who}: p99 produce latency through the broker's kill and return ({len(produced):,} sends)",
            [percentile(produced, 0.99)],
            "s",
            None,
        ),
        (f"{who}: p99 produce to consumer, through the kill", [percentile(e2e, 0.99)], "s", None),
        (f"{who}: sends that failed (the producers' retries did not carry them)", [float(len(errors))], "", None),
        (
            f"{who}: sends neither acknowledged nor failed {FLUSH_WAIT_S} s after the work ended",
            [float(sum(d.get("pending", 0) for d in done))],
            "",
            0.0,
        ),
        (f"{who}: consumers' polls that raised (a student's loop would have died)", [float(len(poll_errors))], "", 0.0),
        (
            f"{who}: acknowledged records lost, of {sum(d['acked'] for d in done):,}",
            [float(sum(d["lost"] for d in done))],
            "",
            0.0,
        ),
        (f"{who}: acknowledged records their group never read", [float(sum(d["unread"] for d in done))], "", 0.0),
        (
            f"{who}: a runaway student's topics created and deleted (refused or throttled: {loop['refused']})",
            [float(loop["done"])],
            "",
            None,
        ),
        (f"{who}: a killed broker back (students' logins work)", [back_s], "s", 60.0),
        (
            f"{who}: ... its log: metadata replayed (from the JVM's start)",
            [phases["metadata_s"]] if phases else [],
            "s",
            None,
        ),
        (
            f"{who}: ... its log: {phases.get('logs', 0):,.0f} logs loaded",
            [phases["logs_s"]] if phases else [],
            "s",
            None,
        ),
        (
            f"{who}: ... its log: server started (from the JVM's start; the rest is waiting for the cluster to "
            "list it and for logins)",
            [phases["started_s"]] if phases else [],
            "s",
            None,
        ),
        (f"{who}: ... listed by the cluster again (from the kill)", [rejoin.listed_s], "s", None),
        (f"{who}: ... logins refused meanwhile ({refusals})", [float(sum(rejoin.refused.values()))], "", None),
        (f"{who}: brokers dead at the end", [float(dead)], "", 0.0),
        (
            f"{who}: {GRADED} {GRADED_LAB} grades beside it, different from the corpus's",
            [float(wrong[0] if wrong else GRADED)],
            "",
            0.0,
        ),
    ]
