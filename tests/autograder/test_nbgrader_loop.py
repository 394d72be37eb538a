"""An instructor's term with nbgrader's own exchange, end to end: generate and release a lab, two
students fetch and submit it (one right, one with a mistake), the instructor collects,
autogrades (the grader's sandboxed grading on the live cluster), makes and releases feedback,
the students fetch it, and the gradebook is exported as CSV."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from staff.corpus import scenarios
from autograder.pipeline import SOLUTIONS, graded_parts
from cluster.settings import ROOT

LAB, COURSE_ID = "lab1", "kafka-course"
MISTAKE = "counter-overwrites"  # lab1-q1 wrong, everything else right


def run(cmd: list[str], cwd: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{' '.join(cmd[:2])} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


@pytest.mark.timeout(900)
def test_release_submit_collect_autograde_feedback_export(cluster, tmp_path):
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    exchange.chmod(0o777)
    common = [f"--Exchange.root={exchange}", f"--CourseDirectory.course_id={COURSE_ID}", "--log-level=WARN"]
    nbgrader = str(bin_dir / "nbgrader")

    # the instructor's course folder: the repository's config and sources
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(SOLUTIONS, course / "solutions")
    (course / ".nbgrader").mkdir()
    run([nbgrader, "generate_assignment", LAB, "--force", "--log-level=WARN"], course, env)
    run([nbgrader, "release_assignment", LAB, *common], course, env)

    # two students fetch the lab, do it (or not quite), and submit
    work = {
        "alice": nbformat.read(SOLUTIONS / LAB / f"{LAB}.ipynb", as_version=4),
        "bob": next(s for s in scenarios(LAB) if s.name == MISTAKE).notebook(),
    }
    homes, envs = {}, {}
    for student, nb in work.items():
        home = homes[student] = tmp_path / f"home-{student}"
        home.mkdir()
        # a home of their own, as on a hub: nbgrader keeps each student's submissions in it
        envs[student] = {**env, "HOME": str(home), "JUPYTER_DATA_DIR": str(home / ".local/share/jupyter")}
        run([nbgrader, "fetch_assignment", LAB, *common, f"--student={student}"], home, envs[student])
        fetched = nbformat.read(home / LAB / f"{LAB}.ipynb", as_version=4)
        assert "### BEGIN SOLUTION" not in "".join(c.source for c in fetched.cells), "the release holds no solution"
        nbformat.write(nb, home / LAB / f"{LAB}.ipynb")
        run([nbgrader, "submit", LAB, *common, f"--student={student}"], home, envs[student])

    run([nbgrader, "collect", LAB, *common], course, env)
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["alice", "bob"]
    run([nbgrader, "autograde", LAB, "--force", "--log-level=WARN"], course, env)
    run([nbgrader, "generate_feedback", LAB, "--force", "--log-level=WARN"], course, env)
    run([nbgrader, "release_feedback", LAB, *common], course, env)
    run([nbgrader, "export", "--to=grades.csv", "--log-level=WARN"], course, env)

    parts = graded_parts(work["alice"])
    with open(course / "grades.csv") as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f) if row["assignment"] == LAB}
    assert float(grades["alice"]["score"]) == sum(parts.values()) == float(grades["alice"]["max_score"])
    assert float(grades["bob"]["score"]) == sum(parts.values()) - parts["lab1-q1"]

    # each student fetches their own feedback: bob's says what lab1-q1 expected and found
    for student in work:
        run([nbgrader, "fetch_feedback", LAB, *common, f"--student={student}"], homes[student], envs[student])
        pages = list((homes[student] / LAB / "feedback").rglob(f"{LAB}.html"))
        assert len(pages) == 1, f"{student}'s feedback: {pages}"
        html = pages[0].read_text()
        assert "lab1-q1" in html
        if student == "bob":
            assert "expected" in html and "found" in html
