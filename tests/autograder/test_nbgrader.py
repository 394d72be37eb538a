"""Real nbgrader, in a course folder of its own: `nbgrader autograde` gives a submission the
points per part the corpus expects (as `python -m autograder grade` does in the self-test), for
honest work and for attacks (its
execution step is the grader's own sandboxed grading, see autograder/nbgrader_step.py).
The nbgrader side is the self-test's own (`selftest --via nbgrader`), on a few cases."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from staff.corpus import scenarios
from autograder.pipeline import SOLUTIONS, graded_parts
from staff.selftest import Case, run_via_nbgrader

# (lab 1's solution and a mistake go through nbgrader's whole loop in test_nbgrader_loop.py)
CASES = [
    ("lab2", "solution"),
    ("lab2", "no-message-key"),
    ("lab5", "duplicates-counted"),
    # attacks on nbgrader's own way of grading, and on ours
    ("lab1", "tampers-with-checks"),
    ("lab1", "runs-instructor-solutions"),
    ("lab1", "guesses-with-test-cell-copies"),
    ("lab1", "rewrites-course-code"),
    ("lab1", "notebook-of-many-megabytes"),
]


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


@pytest.mark.parametrize("lab,name", CASES, ids=[f"{lab}-{name}" for lab, name in CASES])
def test_nbgrader_autograde_gives_the_same_points(graded, lab, name):
    """nbgrader's points per part are the corpus's expected ones, which the self-test checks the
    CLI gives too (so the two ways agree without grading every case twice here)."""
    c, by_nbgrader = graded[(lab, name)]
    full = c.expected  # label -> points of the part
    expected = next((s for s in scenarios(lab) if s.name == name), None)
    fails = set(expected.fails) if expected is not None else set()
    assert set(by_nbgrader) == set(full)
    assert {k for k, v in by_nbgrader.items() if v == 0} == fails
    assert all(by_nbgrader[k] == full[k] for k in full if k not in fails)
    assert bool(fails) == (name != "solution")  # the wrong ones really lose points
