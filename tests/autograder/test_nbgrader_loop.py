"""An instructor's term with nbgrader's own exchange, end to end: generate and release a lab, two
students fetch and submit it (one right, one with a mistake), the instructor collects,
autogrades (the grader's sandboxed grading on the live cluster), makes and releases feedback,
the students fetch it, and the gradebook is exported as CSV."""

from __future__ import annotations

import csv

import nbformat
import pytest

from staff.corpus import scenarios
from autograder.pipeline import SOLUTIONS, graded_parts
from nbgrader_course import released, run

LAB = "lab1"
MISTAKE = "counter-overwrites"  # lab1-q1 wrong, everything else right


@pytest.mark.timeout(900)
def test_release_submit_collect_autograde_feedback_export(cluster, tmp_path):
    course = released(tmp_path, LAB)
    common, nbgrader = course.common, course.nbgrader

    # two students fetch the lab, do it (or not quite), and submit
    work = {
        "alice": nbformat.read(SOLUTIONS / LAB / f"{LAB}.ipynb", as_version=4),
        "bob": next(s for s in scenarios(LAB) if s.name == MISTAKE).notebook(),
    }
    homes, envs = {}, {}
    for student, nb in work.items():
        home, envs[student] = course.student_env(student)
        homes[student] = home
        run([nbgrader, "fetch_assignment", LAB, *common, f"--student={student}"], home, envs[student])
        fetched = nbformat.read(home / LAB / f"{LAB}.ipynb", as_version=4)
        assert "### BEGIN SOLUTION" not in "".join(c.source for c in fetched.cells), "the release holds no solution"
        nbformat.write(nb, home / LAB / f"{LAB}.ipynb")
        run([nbgrader, "submit", LAB, *common, f"--student={student}"], home, envs[student])

    course.instructor("collect", LAB, *common)
    assert sorted(p.name for p in (course.folder / "submitted").iterdir()) == ["alice", "bob"]
    course.instructor("autograde", LAB, "--force", "--log-level=WARN")
    course.instructor("generate_feedback", LAB, "--force", "--log-level=WARN")
    course.instructor("release_feedback", LAB, *common)
    course.instructor("export", "--to=grades.csv", "--log-level=WARN")

    parts = graded_parts(work["alice"])
    with open(course.folder / "grades.csv") as f:
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
