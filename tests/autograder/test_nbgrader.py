"""Real nbgrader, in a course folder of its own: `nbgrader autograde` gives a submission the
same points per part as `python -m autograder grade`, for honest work and for attacks (its
execution step is the grader's own sandboxed grading, see autograder/nbgrader_step.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.corpus import scenarios
from autograder.pipeline import RELEASE, SOLUTIONS
from cluster.settings import ROOT

BIN = Path(sys.executable).parent


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", LAB_NAMESPACE="nbgrader-check")
    out = subprocess.run([str(BIN / "nbgrader"), *args, "--log-level=WARN"], cwd=course, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(SOLUTIONS, course / "solutions")
    (course / ".nbgrader").mkdir()
    return course


def submit(course: Path, student: str, lab: str, nb) -> None:
    folder = course / "submitted" / student / lab
    shutil.copytree(RELEASE / lab, folder)
    nbformat.write(nb, folder / f"{lab}.ipynb")


def nbgrader_points(course: Path, lab: str, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / '.nbgrader' / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(lab, lab, student)
        return {g.name: float(g.score) for g in nb.grades}


def cli_points(lab: str, notebook: Path, out: Path, student: str) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", lab, str(notebook), "--json", str(out),
                           "--student", student], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {t["name"]: float(t["score"]) for t in json.loads(out.read_text())["tests"] if t["visibility"] == "visible"}


@pytest.mark.parametrize("lab,case", [("lab1", "solution"), ("lab1", "rpc-returns-amount"),
                                      ("lab2", "no-message-key"), ("lab5", "duplicates-counted"),
                                      # attacks on nbgrader's own way of grading, and on ours
                                      ("lab1", "tampers-with-checks"), ("lab1", "runs-instructor-solutions"),
                                      ("lab1", "guesses-with-test-cell-copies"), ("lab1", "rewrites-course-code")])
def test_nbgrader_autograde_gives_the_same_points(cluster, course, lab, case, tmp_path):
    solution = nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4)
    nb = solution if case == "solution" else next(s for s in scenarios(lab) if s.name == case).notebook()
    student = case.replace("-", "_")
    nbgrader(course, "generate_assignment", lab, "--force")
    submit(course, student, lab, nb)
    nbgrader(course, "autograde", lab, "--student", student, "--force")
    by_nbgrader = nbgrader_points(course, lab, student)

    path = tmp_path / f"{lab}.ipynb"
    nbformat.write(nb, path)
    by_cli = cli_points(lab, path, tmp_path / "r.json", student)
    assert by_nbgrader == by_cli
    assert (0 in by_cli.values()) == (case != "solution")  # the wrong ones really lose points
    expected = next((s for s in scenarios(lab) if s.name == case), None)
    if expected is not None:
        assert {k for k, v in by_nbgrader.items() if v == 0} == set(expected.fails)
