"""`python -m autograder grade-all`: a class graded at once, the same scores as one grading at a
time, resumable, and an infrastructure failure is retried or reported, never scored."""

from __future__ import annotations

import csv
import os
import re
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


def test_a_grading_past_its_deadline_is_stopped_so_that_it_cleans_up(tmp_path, monkeypatch):
    """SIGTERM first (the grader deletes its Kafka user, topics, own cluster and folders on it),
    SIGKILL only after the grace: a SIGKILL alone left a lab 7 grading's brokers running."""
    import subprocess

    from autograder.grade_all import grading_deadline, run_to_deadline

    marker = tmp_path / "cleaned"
    (tmp_path / "slow_grading.py").write_text(
        "import signal, sys, time, pathlib\n"
        "def main(argv):\n"
        "    signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path(argv[0]).write_text('yes'), sys.exit(1)))\n"
        "    time.sleep(60)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # the forked grading runs with this process's sys.path
    with pytest.raises(subprocess.TimeoutExpired):
        run_to_deadline([str(marker)], deadline_s=1, module="slow_grading")
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


# Submission names an attacker chose: `...ipynb` is student "..", `gradebook.csv.ipynb` a folder in
# the gradebook's place, the others formulas when the gradebook is opened in a spreadsheet, and a
# name that `grade --student` would take for an option. ("/" cannot be in a file name.)
HOSTILE = ["..", "gradebook.csv", '=HYPERLINK("x","y")', "@SUM(1+1)", "-rf"]
FOLDER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
FORMULA = ("=", "+", "-", "@", "\t", "\r")


def test_student_folder_names_are_safe_distinct_and_the_same_in_every_run():
    """The name rule alone (no cluster, no grading)."""
    from autograder.grade_all import student_folders

    fine = ["ada", "bob-2", "j.smith", "Ada_Lovelace", "x" * 64]  # every hub login is one of these
    names = [*HOSTILE, *fine, "...", ".", ".hidden", "scores.png", "SCORES.PNG", "a b", "a?b", "a\tb", "a\udcffb"]
    names += ["x" * 65, "x" * 65 + "y", "José"]
    folders = student_folders(names)
    used = [folder for folder, _ in folders.values()]
    assert len(set(used)) == len(names), folders  # two names never share a folder
    for name, (folder, contested) in folders.items():
        assert FOLDER.match(folder) and folder not in (".", ".."), (name, folder)
        assert folder.casefold() not in ("gradebook.csv", "scores.png"), (name, folder)
        assert not contested, name
    assert all(folders[n] == (n, False) for n in fine)
    assert folders["..."][0].startswith("student-") and folders["@SUM(1+1)"][0].startswith("_SUM_1_1_-")
    for name in names:  # a name's folder depends on that name alone: a later run with others agrees
        assert student_folders([name, "ada"])[name] == folders[name]
    # a name crafted to be another's folder (its hash is public) keeps it; neither is ever kept from a run before
    crafted = folders["a b"][0]
    again = student_folders(["a b", crafted])
    assert again[crafted] == (crafted, True) and again["a b"][1] and again["a b"][0] != crafted
    assert FOLDER.match(again["a b"][0])


def test_the_gradebook_has_no_cell_a_spreadsheet_would_run(tmp_path):
    """The CSV quoting alone: every text cell (names, the original name, problems, the parts'
    labels) that starts as a formula gets a leading "'"; numbers are written as they are."""
    from autograder.grade_all import Graded, csv_text, write_gradebook

    assert [csv_text(v) for v in ["=1+1", "+1", "-1", "@SUM(1)", "\tx", "\rx", "ada", "", "1=1"]] == [
        "'=1+1",
        "'+1",
        "'-1",
        "'@SUM(1)",
        "'\tx",
        "'\rx",
        "ada",
        "",
        "1=1",
    ]
    graded = [
        Graded("ada", "graded", {"=q1": 2.0, "q2": 0.0}, 3.0, attempts=1),
        Graded("_HYPERLINK-1", "kept", {"=q1": 1.0}, submitted_as='=HYPERLINK("x","y")'),
        Graded("rf-2", "not graded", problem="-1+1 @me", attempts=2, submitted_as="-rf"),
        Graded("a_b-3", "graded", {}, submitted_as="a\udcffb"),  # not UTF-8: written, escaped
    ]
    write_gradebook(graded, ["=q1", "q2"], tmp_path / "gradebook.csv")
    with open(tmp_path / "gradebook.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["student", "submitted as", "status", "total", "'=q1", "q2", "seconds", "attempts", "problem"]
    assert not [cell for row in rows for cell in row if cell.startswith(FORMULA)], rows
    book = {row[0]: dict(zip(rows[0], row)) for row in rows[1:]}
    assert book["ada"]["submitted as"] == "" and book["ada"]["total"] == "2" and book["ada"]["seconds"] == "3.0"
    assert book["_HYPERLINK-1"]["submitted as"] == '\'=HYPERLINK("x","y")'
    assert book["rf-2"]["submitted as"] == "'-rf" and book["rf-2"]["problem"] == "'-1+1 @me"
    assert book["a_b-3"]["submitted as"] == "a\\udcffb"


def test_grade_all_never_writes_through_a_link_out_of_its_folder(tmp_path):
    """A student's folder or the gradebook that is a link (out of --out, or to another entry of
    it) is refused before anything is graded."""
    from autograder.grade_all import within

    out = tmp_path / "grades"
    out.mkdir()
    (tmp_path / "elsewhere").mkdir()
    assert within(out, out / "ada", "ada's") == out / "ada"
    (out / "ada").symlink_to(tmp_path / "elsewhere")
    (out / "gradebook.csv").symlink_to(out / "bob.csv")
    for link in ("ada", "gradebook.csv"):
        with pytest.raises(SystemExit, match="leads outside"):
            within(out, out / link, "a link")
    with pytest.raises(SystemExit, match="leads outside"):
        within(out, out / "..", "a parent")


@pytest.mark.timeout(600)
def test_hostile_submission_names_stay_in_out_and_out_of_the_formulas(cluster, tmp_path):
    """A real grade-all over blank lab 1 notebooks (seconds each) named by an attacker, beside a
    normal one: every file it writes is under --out, the gradebook is a file that parses, with the
    original names, and none of its cells starts as a formula; a second run finds the same folders."""
    submitted, out = tmp_path / "class" / "submitted", tmp_path / "class" / "grades"
    submitted.mkdir(parents=True)
    blank = nbformat.read(RELEASE / LAB / f"{LAB}.ipynb", as_version=4)
    for name in ["ada", *(n for n in HOSTILE if n != "..")]:
        nbformat.write(blank, submitted / f"{name}.ipynb")
    nbformat.write(blank, submitted / "...ipynb")  # its stem is ".."
    assert {p.stem for p in submitted.iterdir()} == {"ada", *HOSTILE}

    def outside() -> set[Path]:
        return {p for p in tmp_path.rglob("*") if out not in p.parents and p != out}

    before = outside()
    proc = grade_all(submitted, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outside() == before, "grade-all wrote outside --out"
    assert (out / "gradebook.csv").is_file() and (out / "scores.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(out / "gradebook.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert not [cell for row in rows for cell in row if cell.startswith(FORMULA)], rows
    book = gradebook(out)
    assert len(book) == len(HOSTILE) + 1 and all(row["status"] == "graded" for row in book.values()), book
    assert all(scores_of(row) == dict.fromkeys(PARTS, 0.0) for row in book.values())
    originals = {row["submitted as"].removeprefix("'") or s: s for s, row in book.items()}
    assert set(originals) == {"ada", *HOSTILE} and originals["ada"] == "ada"
    for name, folder in originals.items():
        assert FOLDER.match(folder) and (out / folder / "results.json").is_file(), (name, folder)
        if name != "ada":  # each change said once: original -> used
            assert proc.stdout.count(f"renamed: {name!r} -> {folder} ") == 1, proc.stdout
    assert {p.name for p in out.iterdir()} == {"gradebook.csv", "scores.png", *originals.values()}

    again = grade_all(submitted, out)
    assert again.returncode == 0 and f"0 to grade ({len(book)} kept" in again.stdout, again.stdout + again.stderr
    kept = gradebook(out)
    assert {s: (row["submitted as"], row["status"], scores_of(row)) for s, row in kept.items()} == {
        s: (row["submitted as"], "kept", scores_of(row)) for s, row in book.items()
    }
    assert outside() == before
