"""Real nbgrader, in a course folder of its own: `nbgrader autograde` gives a submission the
same points per part as `python -m autograder grade`, for honest work and for attacks (its
execution step is the grader's own sandboxed grading, see autograder/nbgrader_step.py).
The nbgrader side is the self-test's own (`selftest --via nbgrader`), on a few cases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.corpus import scenarios
from autograder.pipeline import SOLUTIONS, graded_parts
from autograder.selftest import Case, run_via_nbgrader, student_id

CASES = [("lab1", "solution"), ("lab1", "rpc-returns-amount"), ("lab2", "no-message-key"),
         ("lab5", "duplicates-counted"),
         # attacks on nbgrader's own way of grading, and on ours
         ("lab1", "tampers-with-checks"), ("lab1", "runs-instructor-solutions"),
         ("lab1", "guesses-with-test-cell-copies"), ("lab1", "rewrites-course-code")]


def case(lab: str, name: str, folder: Path) -> Case:
    solution = nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4)
    nb = solution if name == "solution" else next(s for s in scenarios(lab) if s.name == name).notebook()
    path = folder / f"{lab}-{name}.ipynb"
    nbformat.write(nb, path)
    return Case(name, lab, path, graded_parts(solution))


@pytest.fixture(scope="module")
def graded(cluster, tmp_path_factory) -> dict:
    """Every case through one `nbgrader autograde` per lab: (lab, name) -> (case, nbgrader's points)."""
    folder = tmp_path_factory.mktemp("nbgrader")
    cases = [case(lab, name, folder) for lab, name in CASES]
    outcomes = run_via_nbgrader(cases, folder)
    assert all(o.exit_code == 0 for o in outcomes), outcomes[0].output
    return {(o.case.lab, o.case.name): (o.case, o.scores) for o in outcomes}


def cli_points(c: Case, out: Path) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", c.lab, str(c.notebook), "--json", str(out),
                           "--student", student_id(c)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {t["name"]: float(t["score"]) for t in json.loads(out.read_text())["tests"] if t["visibility"] == "visible"}


@pytest.mark.parametrize("lab,name", CASES, ids=[f"{lab}-{name}" for lab, name in CASES])
def test_nbgrader_autograde_gives_the_same_points(graded, lab, name, tmp_path):
    c, by_nbgrader = graded[(lab, name)]
    by_cli = cli_points(c, tmp_path / "r.json")
    assert by_nbgrader == by_cli
    assert (0 in by_cli.values()) == (name != "solution")  # the wrong ones really lose points
    expected = next((s for s in scenarios(lab) if s.name == name), None)
    if expected is not None:
        assert {k for k, v in by_nbgrader.items() if v == 0} == set(expected.fails)
