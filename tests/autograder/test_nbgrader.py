"""Real nbgrader, in a course folder of its own: `nbgrader autograde` gives a submission the
points per part the corpus expects (as `python -m autograder grade` does in the self-test), for
honest work and for attacks (its
execution step is the grader's own sandboxed grading, see autograder/nbgrader_step.py).
The nbgrader side is the self-test's own (`selftest --via nbgrader`), on a few cases."""

from __future__ import annotations

import json
import re
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
    ("lab1", "javascript-links-for-the-instructor"),  # and nothing of it runs in the formgrader: below
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
    return {(o.case.lab, o.case.name): (o.case, o.scores) for o in outcomes} | {"course": folder / "nbgrader-course"}


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
    # the wrong ones really lose points (the links' attack is the solution's work: full marks)
    assert bool(fails) == (name not in ("solution", "javascript-links-for-the-instructor"))


def test_no_script_of_the_student_runs_in_the_formgrader_after_autograde(graded):
    """Issue 41's javascript: links, through real `nbgrader autograde` (its own preprocessors, the
    grader's execution and SanitizeMarkup as nbgrader_config.py sets them): the autograded notebook,
    rendered with nbgrader's formgrade and feedback templates, holds no live script, no javascript:
    or data: URL and no event handler, in the markdown note or in the outputs the grading made."""
    from test_sanitize import formgrade_page, notebook_part, what_runs  # the pages as nbgrader makes them

    name = "javascript-links-for-the-instructor"
    submitted = next(s for s in scenarios("lab1") if s.name == name).notebook()
    assert len(what_runs(formgrade_page(submitted))) >= 5, "the note alone, not cleaned, runs scripts"
    autograded = graded["course"] / "autograded" / name.replace("-", "_") / "lab1" / "lab1.ipynb"
    nb = nbformat.read(autograded, as_version=4)
    for cell in nb.cells:  # what generate_feedback's GetGrades adds to each graded cell for its template
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.metadata.nbgrader.setdefault("score", 0)
    shown = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "my chart" in shown and "my table" in shown, "the grading's own run displayed the hostile outputs"
    assert any("My notes on the lab" in c.source for c in nb.cells if c.cell_type == "markdown")
    for template in ("formgrade", "feedback"):
        page = formgrade_page(nb, template)
        assert what_runs(page) == [], template
        values = "".join(v for _, a in notebook_part(page) for k, v in a.items() if k not in ("title", "alt"))
        assert not re.search(r"javascript:|vbscript:|data:", re.sub(r"[\t\n\r]", "", values), re.I), template
