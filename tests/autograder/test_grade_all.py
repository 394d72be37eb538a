"""`python -m autograder grade-all`: a class graded at once, the same scores as one grading at a
time, resumable, and an infrastructure failure is retried or reported, never scored."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

from staff.corpus import scenarios
from autograder.pipeline import RELEASE, SOLUTIONS, graded_parts
from staff.selftest import expected_scores

LAB = "lab1"
PARTS = graded_parts(nbformat.read(SOLUTIONS / LAB / f"{LAB}.ipynb", as_version=4))


def class_folder(root: Path) -> dict[str, dict[str, float]]:
    """Three students in the two layouts grade-all reads; student -> the scores they must get."""
    root.mkdir()
    nbformat.write(nbformat.read(SOLUTIONS / LAB / f"{LAB}.ipynb", as_version=4), root / "ada.ipynb")
    wrong = next(s for s in scenarios(LAB) if s.name == "counter-overwrites")
    (root / "bob" / LAB).mkdir(parents=True)  # nbgrader's submitted/<student>/<lab>/ layout
    nbformat.write(wrong.notebook(), root / "bob" / LAB / f"{LAB}.ipynb")
    nbformat.write(nbformat.read(RELEASE / LAB / f"{LAB}.ipynb", as_version=4), root / "cy.ipynb")
    return {"ada": dict(PARTS), "bob": expected_scores(wrong, PARTS), "cy": dict.fromkeys(PARTS, 0.0)}


def grade_all(folder: Path, out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "autograder",
        "grade-all",
        LAB,
        str(folder),
        "--out",
        str(out),
        "--jobs",
        "2",
        "--no-progress",
        *extra,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)


def gradebook(out: Path) -> dict[str, dict]:
    with open(out / "gradebook.csv") as f:
        return {row["student"]: row for row in csv.DictReader(f)}


def scores_of(row: dict) -> dict[str, float]:
    return {p: float(row[p]) for p in PARTS}


@pytest.mark.timeout(900)
def test_a_class_is_graded_through_a_broker_crash_then_resumed(healthy, tmp_path):
    """One run with broker 2 killed and restarted in the middle (the gradings it hit are graded
    again, no score changes), then a run that keeps everything, then one that regrades a resubmission."""
    expected = class_folder(tmp_path / "submitted")
    out, cluster = tmp_path / "grades", healthy

    def crash_and_recover():
        time.sleep(6)  # the first gradings are running their notebooks
        cluster.kill_broker(2)
        time.sleep(4)
        cluster.start_broker(2)

    chaos = threading.Thread(target=crash_and_recover)
    chaos.start()
    first = grade_all(tmp_path / "submitted", out)
    chaos.join()
    assert first.returncode == 0, first.stdout + first.stderr
    book = gradebook(out)
    assert {s: scores_of(row) for s, row in book.items()} == expected
    assert all(row["status"] == "graded" for row in book.values())
    assert float(book["ada"]["total"]) == sum(PARTS.values())
    retried = [s for s, row in book.items() if int(row["attempts"]) > 1]
    assert retried, "the kill fell during a grading: the grader should have noticed it and graded that one again"
    log = (out / retried[0] / "grading.log").read_text()
    # the kill falls in a grading's notebook, or just before one (the controller lists a killed
    # broker for some seconds): either way the grading says the cluster's fault, not ours
    assert "went down during the grading" in log or "was down when the grading began" in log, log
    assert "===== attempt 2: exit 0" in log
    for student in expected:
        assert (out / student / "results.json").exists()
    assert (out / "scores.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    again = grade_all(tmp_path / "submitted", out)  # nothing new: nothing graded
    assert "0 to grade (3 kept" in again.stdout, again.stdout
    assert {s: scores_of(row) for s, row in gradebook(out).items()} == expected

    os.utime(tmp_path / "submitted" / "bob" / LAB / f"{LAB}.ipynb")  # bob hands in again
    third = grade_all(tmp_path / "submitted", out)
    assert "1 to grade (2 kept" in third.stdout, third.stdout
    assert gradebook(out)["bob"]["status"] == "graded"


def test_a_retry_waits_for_a_broker_that_is_down_until_it_is_back(healthy):
    """grade-all retries a grading once the cluster works: a broker still down when the
    grading failed is waited for, not taken as a cluster that cannot start."""
    from concurrent.futures import ThreadPoolExecutor, wait

    from autograder.grade_all import wait_for_cluster

    healthy.kill_broker(2)
    with ThreadPoolExecutor(1) as pool:
        waited = pool.submit(wait_for_cluster, 120)
        wait([waited], timeout=3)
        assert not waited.done(), f"grade-all gave up on a cluster with a broker down: {waited.result()}"
        healthy.start_broker(2)
        assert waited.result(timeout=150) == ""


def test_a_grading_that_begins_as_a_broker_dies_is_the_clusters_fault(healthy):
    """Killed just now, a broker is still listed by the controller (for its session timeout): the
    grading's cluster check passes, and its watch is what says the broker is down."""
    from autograder.cluster_watch import ClusterWatch

    watch = ClusterWatch(healthy.admin_connection()).start()
    assert watch.problem == "", watch.problem
    watch.stop()
    healthy.kill_broker(2)
    watch = ClusterWatch(healthy.admin_connection()).start()
    assert watch.stop() == "broker 2 was down when the grading began"


def test_a_cluster_that_is_down_scores_nobody(tmp_path):
    class_folder(tmp_path / "submitted")
    env = {**os.environ, "COURSE_CLUSTER_HOME": str(tmp_path / "no-cluster"), "COURSE_PORT_BASE": "30492"}
    proc = grade_all(tmp_path / "submitted", tmp_path / "grades", "--retries", "0", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    book = gradebook(tmp_path / "grades")
    assert all(row["status"] == "not graded" and row["total"] == "" and row["problem"] for row in book.values()), book
    assert not list((tmp_path / "grades").glob("*/results.json"))  # no zero written anywhere
    assert "NOT GRADED ada" in proc.stdout and "run grade-all again" in proc.stdout


def test_a_grading_past_its_deadline_is_stopped_so_that_it_cleans_up(tmp_path):
    """SIGTERM first (the grader deletes its Kafka user, topics, own cluster and folders on it),
    SIGKILL only after the grace: a SIGKILL alone left a lab 7 grading's brokers running."""
    import subprocess

    from autograder.grade_all import grading_deadline, run_to_deadline

    marker = tmp_path / "cleaned"
    code = (
        "import signal, sys, time, pathlib\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(marker)!r}).write_text('yes'), sys.exit(1)))\n"
        "time.sleep(60)\n"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        run_to_deadline([sys.executable, "-c", code], deadline_s=1)
    assert marker.read_text() == "yes"
    assert grading_deadline("lab9") > grading_deadline("lab1") >= 300 + 120


def test_the_score_plot_counts_totals_and_parts(tmp_path):
    """scores.png's numbers: totals first (every level up to the lab's maximum, gaps included),
    then each part; a student not graded counts nowhere."""
    from autograder.grade_all import Graded, plot_scores, score_counts

    parts = {"q1": 2.0, "q2": 1.5}
    graded = [
        Graded("ada", "graded", {"q1": 2.0, "q2": 1.5}),
        Graded("bob", "kept", {"q1": 2.0, "q2": 0.0}),
        Graded("cy", "graded", {"q1": 0.0, "q2": 0.0}),
        Graded("dee", "not graded"),
    ]
    counts = score_counts(graded, parts)
    assert list(counts) == ["total", "q1", "q2"]
    assert counts["total"] == [(0.0, 1), (1.0, 0), (2.0, 1), (3.0, 0), (3.5, 1)]
    assert counts["q1"] == [(0.0, 1), (1.0, 0), (2.0, 2)]
    assert counts["q2"] == [(0.0, 2), (1.0, 0), (1.5, 1)]
    plot_scores(graded, parts, tmp_path / "scores.png", "lab1")
    assert (tmp_path / "scores.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
