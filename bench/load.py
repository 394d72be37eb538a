"""A class on one shared cluster (make bench's `load` part): what the brokers hold and how the
students fare.

    python -m bench --only load [--students 200] [--active 30] [--load-seconds 90]

On a bench cluster of its own with the kit's settings (256 MB heaps), `students` namespaces
each get a login and the topics one student's lab holds (a lab's first cell deletes the
earlier lab's topics, so that is a student's footprint: see FOOTPRINT). Then `active` of them
work at once for `load_seconds`, each a process of its own that produces with acks=all and
consumes in a group, while grade-all grades a few submissions of lab 2 and, halfway, a broker
is killed (SIGKILL) and started again. The table gives what the brokers hold (heap after a
full GC, resident memory, open files), the students' p99 produce and end-to-end latencies,
the killed broker's time back (until students' logins work on it), and whether every grade
was the corpus's.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

# What one student's lab holds at most: topics and partitions (each on three brokers) left by
# each lab's solution, run as a student (staff/as_student.py reports it), largest of the ten.
FOOTPRINT = {"topics": 6, "partitions": 14}
RATE_PER_S = 20              # each active student's records per second (a lab's loops, slowed to a person's pace)
GRADED_LAB, GRADED = "lab2", 6


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def student_topics(ns: str) -> dict[str, int]:
    """The footprint as topics of 1-4 partitions, as the labs make them."""
    topics, left, i = {}, FOOTPRINT["partitions"], 0
    while left > 0:
        n = min(left, 4 if i % 2 == 0 else 1, left)
        topics[f"{ns}.t{i}"] = n
        left, i = left - n, i + 1
    return topics


def make_students(c, count: int) -> list[tuple[str, str]]:
    """(namespace, password) of `count` students, each with its ACLs and topics, made as itself."""
    from kafka.admin import KafkaAdminClient

    from cluster import accounts

    admin = c.admin()
    made = []
    try:
        for i in range(count):
            ns = f"s{i:03d}"
            account = accounts.Account(ns, accounts.new_password())
            accounts.grant(admin, account, ns)
            made.append((ns, account.password))
    finally:
        admin.close()
    for ns, password in made:
        mine = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers(), **accounts.Account(ns, password).kafka_python())
        try:
            mine.create_topics({t: {"num_partitions": n, "replication_factor": 3}
                                for t, n in student_topics(ns).items()})
        finally:
            mine.close()
    return made


def act(servers: str, ns: str, password: str, seconds: float) -> dict:
    """One student at work: a producer (acks=all) and a consumer in a group on the student's own
    topic, `seconds` long. Returns the produce latencies (send() to acknowledgement) and the
    end-to-end ones (the record's timestamp to the consumer), in seconds, and the errors seen."""
    from kafka import KafkaConsumer, KafkaProducer

    from cluster.accounts import Account

    login = {"bootstrap_servers": servers, **Account(ns, password).kafka_python()}
    topic = f"{ns}.t0"
    produced, e2e, errors = [], [], []
    producer = KafkaProducer(**login, acks="all", request_timeout_ms=30_000)
    consumer = KafkaConsumer(topic, **login, group_id=f"{ns}.readers", auto_offset_reset="latest",
                             fetch_max_wait_ms=100)
    stop = time.monotonic() + seconds

    def read():
        while time.monotonic() < stop + 5:
            for records in consumer.poll(timeout_ms=200).values():
                now = time.time()
                e2e.extend(now - r.timestamp / 1000 for r in records)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    next_at = time.monotonic()
    while time.monotonic() < stop:
        sent = time.monotonic()
        future = producer.send(topic, value=b"x" * 200)
        future.add_callback(lambda _, sent=sent: produced.append(time.monotonic() - sent))
        future.add_errback(lambda e: errors.append(type(e).__name__))
        next_at += 1 / RATE_PER_S
        time.sleep(max(0.0, next_at - time.monotonic()))
    producer.flush(timeout=60)
    reader.join()
    producer.close()
    consumer.close()
    return {"produced": produced, "e2e": e2e, "errors": errors}


def heap_after_gc_mb(pid: int) -> float:
    """A broker's live heap: a full GC (jcmd GC.run), then what is used (GC.heap_info)."""
    subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=60)
    out = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60).stdout
    used = [int(k) for k in re.findall(r"used (\d+)K", out)]
    # Serial GC: "def new generation total ..K, used ..K" and "tenured generation total ..K, used ..K"
    return sum(used[:2]) / 1024 if used else float("nan")


def write_class(tmp: Path, lab: str, size: int) -> dict[str, dict[str, float]]:
    """`size` submissions of `lab` in tmp/submitted, drawn in turn from its solution and its
    corpus's realistic work (not the attacks, built to be slow); student -> expected scores."""
    import nbformat

    from autograder.pipeline import SOLUTIONS, graded_parts
    from staff.corpus import SCENARIOS
    from staff.selftest import expected_scores

    solution = nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4)
    parts = graded_parts(solution)
    kinds = [(solution, dict(parts))] + [(s.notebook(), expected_scores(s, parts)) for s in SCENARIOS
                                         if s.lab == lab and s.base == "solution" and not s.note]
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

    subprocess.run([sys.executable, "-m", "autograder", "grade-all", lab, str(tmp / "submitted"),
                    "--out", str(tmp / "grades"), "--jobs", str(jobs), "--no-progress"], env=env,
                   timeout=6 * 3600, capture_output=True)
    try:
        with open(tmp / "grades" / "gradebook.csv") as f:
            book = {row["student"]: row for row in csv.DictReader(f)}
    except OSError:
        return len(expected)
    return sum(1 for s, want in expected.items()
               if book.get(s, {}).get("status") != "graded" or {p: float(book[s][p]) for p in want} != want)


def bench_load(students: int, active: int, seconds: float) -> list[tuple]:
    import psutil

    from .__main__ import running_cluster

    with tempfile.TemporaryDirectory(prefix="course-bench-load-") as tmp:
        tmp = Path(tmp)
        expected = write_class(tmp, GRADED_LAB, GRADED)
        with running_cluster(tmp, "load") as (c, env):
            t = time.perf_counter()
            made = make_students(c, students)
            setup_s = time.perf_counter() - t
            partitions = students * FOOTPRINT["partitions"]
            quiet = {n.id: heap_after_gc_mb(n.pid()) for n in c.nodes.values()}
            wrong: list[int] = []
            grading = threading.Thread(target=lambda: wrong.append(grade_class(tmp, GRADED_LAB, expected, 3, env)))
            grading.start()
            with ProcessPoolExecutor(active) as pool:
                work = [pool.submit(act, c.bootstrap_servers(), ns, pw, seconds) for ns, pw in made[:active]]
                time.sleep(seconds / 2)
                victim = max(c.nodes)
                c.kill_broker(victim)
                t = time.monotonic()
                c.start_broker(victim)     # returns once the cluster lists it and students' logins work
                back_s = time.monotonic() - t
                done = [w.result() for w in work]
            grading.join()
            dead = sum(n.process() is None for n in c.nodes.values())
            heap = [heap_after_gc_mb(n.pid()) for n in c.nodes.values() if n.pid()]
            rss = [n.rss_bytes() / 2**20 for n in c.nodes.values()]
            files = [psutil.Process(n.pid()).num_fds() for n in c.nodes.values() if n.pid()]
    produced = [x for d in done for x in d["produced"]]
    e2e = [x for d in done for x in d["e2e"]]
    errors = [x for d in done for x in d["errors"]]
    who = f"{students} students, {active} at work"
    return [
        (f"{who}: partitions held (RF 3; each student {FOOTPRINT['partitions']})", [float(partitions)], "", None),
        (f"{who}: logins, ACLs and topics made", [setup_s], "s", None),
        (f"{who}: broker heap after full GC, before the work", list(quiet.values()), "MB", None),
        (f"{who}: broker heap after full GC, after it", heap, "MB", 200.0),
        (f"{who}: broker resident memory", rss, "MB", None),
        (f"{who}: broker open files", [float(f) for f in files], "", None),
        (f"{who}: p99 produce latency, acks=all ({len(produced):,} sends)", [percentile(produced, 0.99)], "s", 1.0),
        (f"{who}: p50 produce latency, acks=all", [statistics.median(produced) if produced else float("nan")], "s", None),
        (f"{who}: p99 produce to consumer", [percentile(e2e, 0.99)], "s", None),
        (f"{who}: sends that failed", [float(len(errors))], "", 0.0),
        (f"{who}: a killed broker back (students' logins work)", [back_s], "s", 60.0),
        (f"{who}: brokers dead at the end", [float(dead)], "", 0.0),
        (f"{who}: {GRADED} {GRADED_LAB} grades beside it, different from the corpus's", [float(wrong[0] if wrong else GRADED)], "", 0.0),
    ]
