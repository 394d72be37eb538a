"""A record proves a lab's self-test only on exactly the inputs it was written on (tests/proven.py):
in a repository of its own, what changes the digest of a lab and what does not."""

import json
import subprocess

import pytest

from proven import inputs_digest, is_input, proven, record, record_path

ENV = {"python": "3.11", "java": "17", "cores": 2}


@pytest.mark.parametrize(
    "lab,path,reads",
    [
        ("lab15", "solutions/lab15/lab15.ipynb", True),
        ("lab15", "labs/lab15/lab15.ipynb", True),
        ("lab15", "staff/corpus/lab15.toml", True),
        ("lab15", "selfcheck/checks/lab15.py", True),
        ("lab1", "selfcheck/checks/lab15.py", False),  # lab1 is a prefix of lab15: not its file
        ("lab15", "selfcheck/checks/lab1.py", False),
        ("lab15", "labs/lab12/lab12.ipynb", False),
        ("lab15", "staff/corpus/lab12.toml", False),
        ("lab15", "selfcheck/checks/own_cluster.py", True),
        ("lab15", "autograder/sandbox/jail.py", True),
        ("lab15", "cluster/jars.lock.toml", True),
        ("lab15", "requirements/dev.txt", True),
        ("lab15", "datasets/flights-2013-01.csv.gz", True),
        ("lab15", "tests/conftest.py", True),
        ("lab15", "tests/autograder/test_selftest_capstone.py", True),
        ("lab15", "tests/autograder/test_release.py", False),
        ("lab15", "tests/layers.py", False),  # a new lab's layer entry proves nothing new of lab 15
        ("lab15", "README.md", False),
        ("lab15", "docs/capstone-rubric.md", False),
        ("lab15", "bench/__main__.py", False),
        ("lab15", "tests/proven/lab15.json", False),
    ],
)
def test_what_a_labs_gradings_read(lab, path, reads):
    assert is_input(lab, path) is reads


@pytest.fixture
def repo(tmp_path):
    files = {
        "selfcheck/checks/__init__.py": "",
        "selfcheck/checks/lab1.py": "from .kafka_state import read_all",
        "selfcheck/checks/lab2.py": "from .flights import day",
        "selfcheck/checks/kafka_state.py": "from . import bounded_reads",
        "selfcheck/checks/bounded_reads.py": "SHARED = 'through kafka_state'",
        "selfcheck/checks/flights.py": "DAY = 'lab 2 alone imports it'",
        "solutions/lab1/lab1.ipynb": "{}",
        "README.md": "docs",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    return tmp_path


def test_a_labs_digest_changes_with_its_inputs_and_only_them(repo):
    first, count = inputs_digest("lab1", repo, ENV)
    assert count == 5  # its checks, its notebook, the package, the shared modules it imports
    (repo / "selfcheck/checks/lab2.py").write_text("from .flights import day  # changed")
    (repo / "selfcheck/checks/flights.py").write_text("DAY = 'lab 2 alone imports it, changed'")
    (repo / "selfcheck/checks/new_shared.py").write_text("NEW = 'imported by no one'")
    (repo / "README.md").write_text("docs, changed")
    assert inputs_digest("lab1", repo, ENV)[0] == first
    for change in (
        lambda: (repo / "selfcheck/checks/bounded_reads.py").write_text("SHARED = 'changed'"),
        lambda: (repo / "solutions/lab1/lab1.ipynb").write_text('{"cells": []}'),
        lambda: (repo / "selfcheck/checks/lab1.py").write_text("from . import kafka_state, new_shared"),
        lambda: (repo / "selfcheck/checks/new_shared.py").write_text("NEW = 'imported by lab 1, changed'"),
        # a shared module outside selfcheck/checks/ names flights: every lab's gradings may run it
        lambda: (repo / "autograder").mkdir() or (repo / "autograder/x.py").write_text('"selfcheck.checks.flights"'),
        lambda: (repo / "selfcheck/checks/flights.py").write_text("DAY = 'everyone may run it, changed'"),
        # a module Python cannot parse may import anything: every module counts
        lambda: (repo / "selfcheck/checks/lab1.py").write_text("from . import (kafka_state"),
        lambda: (repo / "selfcheck/checks/unnamed.py").write_text("NAMED = 'by no one'"),
    ):
        change()
        assert inputs_digest("lab1", repo, ENV)[0] != first
        first = inputs_digest("lab1", repo, ENV)[0]
    assert inputs_digest("lab1", repo, {**ENV, "java": "21"})[0] != first


def test_a_record_proves_only_the_same_cases_on_the_same_inputs(repo, monkeypatch):
    monkeypatch.delenv("COURSE_PROVE_AGAIN", raising=False)
    cases = ["solution", "blank-release"]
    assert proven("lab1", cases, repo) is None  # nothing recorded
    record("lab1", inputs_digest("lab1", repo), {c: {"lab1-q1": 1.0} for c in cases}, 12.0, repo)
    proof = proven("lab1", cases, repo)
    assert proof is not None and "2 gradings of lab1" in proof.says()
    assert proven("lab1", [*cases, "a-new-attack"], repo) is None  # the corpus grew
    monkeypatch.setenv("COURSE_PROVE_AGAIN", "1")
    assert proven("lab1", cases, repo) is None
    monkeypatch.delenv("COURSE_PROVE_AGAIN")
    (repo / "selfcheck/checks/lab1.py").write_text("one, changed")
    assert proven("lab1", cases, repo) is None
    record_path("lab1", repo).write_text("{not json")
    assert proven("lab1", cases, repo) is None


def test_the_record_is_what_a_reviewer_can_read(repo):
    record("lab1", inputs_digest("lab1", repo), {"solution": {"lab1-q1": 2.0}}, 3.14159, repo)
    written = json.loads(record_path("lab1", repo).read_text())
    assert written["gradings"] == {"solution": {"lab1-q1": 2.0}} and written["seconds"] == 3.1
    assert written["files"] == 5 and len(written["digest"]) == 64


def test_a_solution_runs_proof_reads_its_own_lessons_and_the_test_not_the_others(tmp_path):
    from proven import lessons_source

    module = tmp_path / "test_solutions_run.py"
    text = 'LESSONS = {\n    "lab1": [r"one"],\n    "lab2": [r"two"],\n}\n\ndef test(lab):\n    return LESSONS[lab]\n'
    module.write_text(text)
    first = lessons_source("lab1", module)
    assert "one" in first and "two" not in first
    module.write_text(text.replace('"lab2": [r"two"]', '"lab2": [r"two, changed"], "lab13": [r"new"]'))
    assert lessons_source("lab1", module) == first
    for change in ('[r"one"]', "return LESSONS[lab]"):
        module.write_text(text.replace(change, change + " + [1]"))
        assert lessons_source("lab1", module) != first
