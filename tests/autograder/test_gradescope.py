"""Gradescope's autograder zip: what it holds (no solution code), and, in the heavy layer, its
setup.sh and run_autograder run in a throwaway folder laid out like Gradescope's
(/autograder/source, submission, submission_metadata.json, results), with a cluster of its own."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import nbformat
import pytest

from staff.corpus import scenarios
from autograder import pipeline
from autograder.gradescope import build, find_notebook, run, setup_sh, student_of
from autograder.pipeline import (
    RELEASE,
    SOLUTIONS,
    InfrastructureError,
    StudentError,
    course_cells,
    course_labs,
    graded_parts,
    grading_secret,
    grading_seed,
    lab_secret,
)
from autograder.results import GradingResult
from cluster import settings
from cluster.settings import jars_cache

LAB = "lab1"
MISTAKE = "counter-overwrites"  # lab1-q1 wrong, everything else right


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    return build([LAB], tmp_path_factory.mktemp("zips"))[0]


def unpack(package: Path, source: Path) -> None:
    """As Gradescope's unzip does: files with the modes the zip gives them."""
    with zipfile.ZipFile(package) as z:
        for info in z.infolist():
            z.extract(info, source)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                (source / info.filename).chmod(mode)


def solution_blocks() -> list[str]:
    """Every answer the solutions give, from BEGIN SOLUTION to END SOLUTION, and every
    answer cell without markers (nbgrader replaces the whole cell)."""
    blocks = []
    for lab in course_labs():
        for cell in nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4).cells:
            if not cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                continue
            found = re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S)
            blocks += [b.strip() for b in found or [cell.source] if len(b.strip()) > 20]
    return blocks


def readable(data: bytes, name: str) -> str:
    """A file's text; a notebook's cell sources (its JSON escapes their newlines)."""
    if name.endswith(".ipynb"):
        return "\n".join(c.source for c in nbformat.reads(data.decode(), as_version=4).cells)
    return data.decode(errors="replace")


def test_the_package_holds_what_grading_needs_and_no_solution_code(package):
    with zipfile.ZipFile(package) as z:
        names = z.namelist()
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in z.infolist()}
        texts = {n: readable(z.read(n), n) for n in names if not n.endswith(".gz")}
    assert modes["setup.sh"] == 0o755 and modes["run_autograder"] == 0o755
    assert f"gradescope run {LAB}" in texts["run_autograder"]
    for needed in (
        "course/autograder/pipeline.py",
        "course/autograder/gradescope.py",
        "course/selfcheck/checks/lab1.py",
        "course/cluster/brokers.py",
        "course/pyproject.toml",
        f"course/labs/{LAB}/{LAB}.ipynb",
        "course/labs/lab1/counter.proto",
        "course/datasets/flights-2013-01.csv.gz",
    ):
        assert needed in names, f"{needed} is missing from the package"
    assert modes["course/.grading-secret"] == 0o600
    leaked = [
        n
        for n in names
        if n.startswith(("course/solutions", "course/tests", "course/bench", "course/staff"))
        or "/corpus" in n
        or n.endswith(("selftest.py", "_pb2.py"))
        or "__pycache__" in n
    ]
    assert leaked == []
    blocks = solution_blocks()
    assert len(blocks) > 30  # the check below looks for something
    found = [(n, b[:60]) for b in blocks for n, t in texts.items() if b in t]
    assert found == [], f"solution code in the package: {found[:3]}"


@pytest.mark.parametrize("lab", course_labs())
def test_the_released_notebook_grades_like_the_solution(lab):
    """Without solutions/, grading takes its restored cells and points from labs/: they must be
    the solution's own, cell ids included (a pasted copy of a test cell is told apart by id)."""
    solution = nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4)
    release = nbformat.read(RELEASE / lab / f"{lab}.ipynb", as_version=4)
    assert graded_parts(release) == graded_parts(solution)
    ours, theirs = course_cells(solution), course_cells(release)
    assert {k: (c.id, c.cell_type, c.source) for k, c in theirs.items()} == {
        k: (c.id, c.cell_type, c.source) for k, c in ours.items()
    }

    def demos(nb):
        return [c.source for c in nb.cells if "demo" in c.metadata.get("tags", [])]

    assert demos(release) == demos(solution)


def test_setup_installs_postgresql_for_the_labs_that_start_one_and_no_other():
    """The CDC lab's checks start a PostgreSQL of their own: its zip's setup.sh installs the
    server programs when they are missing; every other lab's zip installs none."""
    from selfcheck.checks import policy

    needs = {lab: policy(lab).postgres for lab in course_labs()}
    assert any(needs.values()), "no lab starts a PostgreSQL: this test would test nothing"
    for lab, need in needs.items():
        script = setup_sh(lab)
        assert ("missing+=(postgresql)" in script) == need, lab
        syntax = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
        assert syntax.returncode == 0, f"{lab}'s setup.sh: {syntax.stderr}"


def test_the_submitted_notebook_is_found_or_the_student_told(tmp_path):
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / f"{LAB}.ipynb").write_text("{}")
    (tmp_path / "notes.ipynb").write_text("{}")
    assert find_notebook(LAB, tmp_path) == tmp_path / "deep" / f"{LAB}.ipynb"
    (tmp_path / "deep" / f"{LAB}.ipynb").rename(tmp_path / "deep" / "Lab 1 (1).ipynb")
    with pytest.raises(StudentError, match=r"found deep/Lab 1 \(1\).ipynb, notes.ipynb. Upload lab1.ipynb alone"):
        find_notebook(LAB, tmp_path)
    (tmp_path / "notes.ipynb").unlink()
    assert find_notebook(LAB, tmp_path).name == "Lab 1 (1).ipynb"  # the only one: renamed by a download


def test_the_seed_comes_from_the_students_email(tmp_path):
    meta = tmp_path / "submission_metadata.json"
    meta.write_text(json.dumps({"users": [{"email": "ada@example.edu", "id": 7, "name": "Ada"}]}))
    assert student_of(meta) == "ada@example.edu"
    assert student_of(tmp_path / "missing.json") == ""


def packaged_secret_of(zip_path: Path) -> str:
    with zipfile.ZipFile(zip_path) as z:
        return z.read("course/.grading-secret").decode().strip()


def test_each_labs_zip_holds_that_labs_secret_alone(package, tmp_path, monkeypatch):
    """One lab's zip gives neither the course's secret nor another lab's seeds; inside it, the
    seeds are the ones the course's machine derives for that lab, so --seed replays locally."""
    other = build(["lab2"], tmp_path)[0]
    course = grading_secret().decode()
    one, two = packaged_secret_of(package), packaged_secret_of(other)
    assert course not in one and course not in two
    assert one.startswith(f"lab-secret:{LAB}:") and two.startswith("lab-secret:lab2:")
    assert one.split(":")[-1] != two.split(":")[-1]  # a secret per lab
    assert one.split(":")[-1] == lab_secret(LAB).decode() != course
    here = grading_seed(LAB, "ada@example.edu", "n1")
    # as inside the unpacked zip: its .grading-secret, no course secret anywhere
    (tmp_path / ".grading-secret").write_text(one + "\n")
    monkeypatch.setattr(pipeline, "SECRET_FILE", tmp_path / ".grading-secret")
    monkeypatch.delenv("COURSE_GRADING_SECRET", raising=False)
    assert grading_seed(LAB, "ada@example.edu", "n1") == here
    with pytest.raises(InfrastructureError, match=f"grading secret of {LAB} alone, not of lab2"):
        lab_secret("lab2")


def test_every_grading_has_a_seed_of_its_own_in_the_staff_details():
    """The seed mixes in the grading's nonce: the same student's next grading gets other data.
    Seed and nonce are staff-only details; a replay (a given seed) says so."""
    seeds = {grading_seed(LAB, "ada@example.edu", pipeline.new_nonce()) for _ in range(5)}
    assert len(seeds) == 5
    assert grading_seed(LAB, "ada@example.edu", "x") == grading_seed(LAB, "ada@example.edu", "x")
    assert grading_seed(LAB, "ada@example.edu", "x") != grading_seed("lab2", "ada@example.edu", "x")
    graded = GradingResult(LAB, "n.ipynb", seed=123456789, nonce="abcdef0123", namespace="grade-lab1-x")
    replayed = GradingResult(LAB, "n.ipynb", seed=123456789, namespace="grade-lab1-y")
    for result, said in ((graded, "seed 123456789; nonce abcdef0123;"), (replayed, "seed 123456789; a replay")):
        data = result.gradescope()
        assert said in staff(data)
        student_view = data["output"] + "".join(t["output"] for t in data["tests"] if t["visibility"] != "hidden")
        assert "123456789" not in student_view and "abcdef0123" not in student_view


def test_an_upload_without_the_notebook_gets_results_that_say_so(tmp_path):
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "counter.py").write_text("print('hi')\n")
    assert run(LAB, tmp_path) == 0
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert results["score"] == 0 and f"Upload {LAB}.ipynb" in results["output"], results


# --- in a folder laid out like Gradescope's ----------------------------------------------------
def gradescope_env(root: Path, **more: str) -> dict[str, str]:
    """Gradescope's environment: the system's Python (no virtual environment, no pyenv), no test
    cluster settings; the cluster runs on ports of its own so that it meets no other."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin and ".pyenv" not in p)
    drop = (
        "VIRTUAL_ENV",
        "COURSE_CLUSTER_HOME",
        "COURSE_OWN_CLUSTER_HOME",
        "LAB_NAMESPACE",
        "PYTHONPATH",
        "KAFKA_BOOTSTRAP_SERVERS",
        "KAFKA_USERNAME",
        "KAFKA_PASSWORD",
        "PYTEST_XDIST_WORKER",
    )
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PYTEST")}
    return {
        **env,
        "PATH": path,
        "AUTOGRADER_ROOT": str(root),
        "COURSE_PORT_BASE": str(settings.THROWAWAY_PORT_BASE),
        **more,
    }


@pytest.fixture(scope="module")
def autograder(package):
    # Under /tmp, open to all like Gradescope's /autograder (pytest's own folders are not): the
    # user method's student code must reach the course's Python.
    top = Path(tempfile.mkdtemp(prefix="gradescope-test-"))
    top.chmod(0o755)
    root = top / "autograder"
    unpack(package, root / "source")
    # the machine's downloaded jars, as a head start (setup.sh checks them against the lock)
    shutil.copytree(jars_cache() / "m2", root / "source" / "jars" / "m2")
    setup = subprocess.run(
        ["bash", str(root / "source" / "setup.sh")],
        cwd=root / "source",
        env=gradescope_env(root),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert setup.returncode == 0, f"setup.sh failed:\n{setup.stdout[-3000:]}\n{setup.stderr[-3000:]}"
    assert "setup.sh: ready" in setup.stdout
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")  # as Gradescope does
    yield root
    subprocess.run(
        [str(root / "source/course/.venv/bin/python"), "-m", "cluster", "down", "--wipe"],
        cwd=root / "source/course",
        env=gradescope_env(root),
        capture_output=True,
        timeout=120,
    )
    shutil.rmtree(top, ignore_errors=True)


def submit(root: Path, notebook, email: str, **env: str) -> dict:
    for folder in ("submission", "results"):
        shutil.rmtree(root / folder, ignore_errors=True)
        (root / folder).mkdir()
    nbformat.write(notebook, root / "submission" / f"{LAB}.ipynb")
    (root / "submission_metadata.json").write_text(json.dumps({"users": [{"email": email, "name": "S"}]}))
    proc = subprocess.run(
        [str(root / "run_autograder")],
        cwd=root,
        env=gradescope_env(root, **env),
        capture_output=True,
        text=True,
        timeout=900,
    )
    results = root / "results" / "results.json"
    assert results.exists(), f"no results.json:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(results.read_text())


def visible(results: dict) -> dict[str, float]:
    return {t["name"]: t["score"] for t in results["tests"] if t.get("visibility") != "hidden"}


def staff(results: dict) -> str:
    return next(t["output"] for t in results["tests"] if t["name"] == "grading (staff details)")


@pytest.mark.heavy
@pytest.mark.cluster  # a cluster of its own, started by run_autograder
@pytest.mark.timeout(2400)
def test_setup_then_run_autograder_grade_like_the_course(autograder):
    points = graded_parts(nbformat.read(SOLUTIONS / LAB / f"{LAB}.ipynb", as_version=4))
    # as inside most containers, Gradescope's too, where bubblewrap cannot make namespaces
    right = submit(
        autograder,
        nbformat.read(SOLUTIONS / LAB / f"{LAB}.ipynb", as_version=4),
        "alice@example.edu",
        COURSE_SANDBOX="user",
    )
    assert visible(right) == points, right["output"]
    assert "sandbox: an unprivileged user, uid" in staff(right)
    assert right["score"] == sum(points.values())
    # the package's seed is the one the course's machine derives for this student and this
    # grading's nonce, from the lab's secret: a local `grade --seed` replays exactly this grading
    assert f"seed {grading_seed(LAB, 'alice@example.edu', seed_of(right)[1])};" in staff(right)
    assert re.search(r"peak memory of the cluster and the grading: \d+ MB", staff(right))

    case = next(s for s in scenarios(LAB) if s.name == MISTAKE)
    wrong = submit(autograder, case.notebook(), "bob@example.edu")  # bubblewrap, where it works
    assert "sandbox: an unprivileged user" not in staff(wrong)
    assert visible(wrong) == {label: 0.0 if label in case.fails else p for label, p in points.items()}, wrong["output"]
    # bob submits the same notebook again: a grading of its own, another seed, the same scores
    again = submit(autograder, case.notebook(), "bob@example.edu")
    assert seed_of(again) != seed_of(wrong) and visible(again) == visible(wrong), (staff(wrong), staff(again))
    assert stat.S_IMODE((autograder / "source/course/.grading-secret").stat().st_mode) == 0o600
    assert grading_secret().decode() not in (autograder / "source/course/.grading-secret").read_text()


def seed_of(results: dict) -> tuple[int, str]:
    """The seed and nonce a result's staff details name."""
    found = re.search(r"seed (\d+); nonce (\w+);", staff(results))
    assert found, staff(results)
    return int(found.group(1)), found.group(2)
