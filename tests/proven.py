"""Proofs a full run recorded: a lab's self-test, passed on exactly these inputs, is not graded again.

A lab's self-test grades its whole corpus (tens of gradings; lab 15's take a quarter of an hour).
When every one of them passes, the run writes `tests/proven/<lab>.json`: a digest of every file
those gradings read and of the machine's Python and Java, and what each grading scored. A later
run whose digest is the same has nothing new to prove for that lab: its cases are reported as
skipped, naming the record. Change anything the lab's gradings read (its notebook, corpus or
checks, any shared grader, kit or sandbox module, the locks, the datasets, the test cluster's
settings) and the digest differs, so the lab is graded again. Commit the records a passing run
wrote with the change they prove (`git status` shows them); a clone without records, or with
stale ones, grades everything.

What a lab's gradings read is decided by folders, conservatively: everything under the shared
folders counts, except the files of other labs (each lab's checks import no other lab's module:
tests/test_layout.py holds it) and the shared modules of selfcheck/checks/ that neither the lab's
own files nor any shared module outside selfcheck/checks/ reach, by import or by name (lab 9's
flight fixtures are not lab 2's input). Documentation, benchmarks, the hub and the other tests do
not count.

COURSE_PROVE_AGAIN=1 ignores every record (`COURSE_PROVE_AGAIN=1 make test`)."""

from __future__ import annotations

import ast
import datetime
import functools
import hashlib
import json
import os
import platform
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cluster.settings import ROOT

RECORDS = "tests/proven"  # in the repository, beside this module

# Folders and files whose every file the gradings may read (but another lab's: see lab_file).
SHARED = ("autograder/", "selfcheck/", "cluster/", "staff/", "datasets/", "requirements/")
SHARED_FILES = ("pyproject.toml", "nbgrader_config.py", "tests/conftest.py", "tests/proven.py")
# Where a lab's own files are; another lab's are not this lab's inputs.
PER_LAB = ("solutions/{lab}/", "labs/{lab}/", "staff/corpus/{lab}.toml", "selfcheck/checks/{lab}.py")
LAB_NAME = re.compile(r"lab\d+")


def lab_file(path: str) -> str | None:
    """The lab a per-lab file belongs to (None for a shared file)."""
    for pattern in PER_LAB:
        head = pattern.split("{lab}")[0]
        if path.startswith(head):
            name = LAB_NAME.match(path[len(head) :])
            if name and path.startswith(pattern.format(lab=name.group())):
                return name.group()
    return None


def is_input(lab: str, path: str, checks_reached: set[str] | None = None) -> bool:
    """Whether lab's gradings may read this file (a path relative to the repository).
    checks_reached: the shared modules of selfcheck/checks/ they reach (None: all of them)."""
    owner = lab_file(path)
    if owner is not None:
        return owner == lab
    if checks_reached is not None and path.startswith(CHECKS) and path.endswith(".py"):
        return path in checks_reached
    return path in SHARED_FILES or path.startswith(SHARED) or path.startswith("tests/autograder/test_selftest")


CHECKS = "selfcheck/checks/"
CHECKS_NAMED = re.compile(r"selfcheck\.checks\.(\w+)")  # an import, a string, even a comment


def checks_named(path: str, text: str) -> set[str]:
    """The modules of selfcheck/checks/ a file imports or names, as paths (more, never fewer:
    a name in a comment counts, and a file Python cannot parse names them all)."""
    names = set(CHECKS_NAMED.findall(text))
    if path.endswith(".py"):
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return {"*"}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level == 1 and path.startswith(CHECKS):  # from . import x, from .x import y
                names.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
            elif node.level == 0 and node.module == "selfcheck.checks":
                names.update(a.name for a in node.names)
    return {f"{CHECKS}{name}.py" for name in names}


def _stamp(path: Path) -> tuple[Path, int, int]:
    st = path.stat()
    return path, st.st_mtime_ns, st.st_size


# A file is read once per process however many labs ask (14 per run): its text for the names
# it holds, its sha256 for the digest. A file changed since has another stamp: read again.
@functools.lru_cache(maxsize=4096)
def _text(stamp: tuple[Path, int, int]) -> str:
    return stamp[0].read_text(errors="replace")


@functools.lru_cache(maxsize=16384)
def _sha256(stamp: tuple[Path, int, int]) -> bytes:
    return hashlib.sha256(stamp[0].read_bytes()).digest()


def checks_reached(lab: str, files: list[str], root: Path = ROOT) -> set[str]:
    """The modules of selfcheck/checks/ lab's gradings may run: the package, the lab's own
    module, what the lab's files and the shared modules outside selfcheck/checks/ name, and
    whatever those import in turn."""

    def named(path: str) -> set[str]:
        found = checks_named(path, _text(_stamp(root / path)))
        return {p for p in files if p.startswith(CHECKS)} if "*" in found else found

    readable = (".py", ".ipynb", ".toml")
    todo = {f"{CHECKS}__init__.py", f"{CHECKS}{lab}.py"}
    for path in files:
        own = lab_file(path) == lab
        shared = lab_file(path) is None and not path.startswith(CHECKS) and is_input(lab, path)
        if (own or shared) and path.endswith(readable):
            todo |= named(path)
    reached: set[str] = set()
    while todo:
        path = todo.pop()
        if path in reached or path not in files:
            continue
        reached.add(path)
        todo |= named(path) - reached
    return reached


def repository_files(root: Path = ROOT) -> list[str]:
    """The files git knows of or would add (tracked, and new ones not ignored), as they are on disk."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    return sorted({p for p in out.decode().split("\0") if p and (root / p).is_file()})


@functools.lru_cache(maxsize=1)
def environment() -> dict:
    """What the gradings ran on besides the files: a new Python or Java proves nothing old."""
    from cluster.java import java_executable

    java = subprocess.run([java_executable(), "-version"], capture_output=True, text=True).stderr
    return {
        "python": platform.python_version(),
        "java": java.splitlines()[0] if java else "",
        "cores": os.cpu_count(),
    }


def inputs_digest(lab: str, root: Path = ROOT, env: dict | None = None, extra: str = "") -> tuple[str, int]:
    """(sha256 of lab's inputs, how many files); extra: more that the proof depends on."""
    h = hashlib.sha256(json.dumps(env or environment(), sort_keys=True).encode() + extra.encode())
    listed = repository_files(root)
    reached = checks_reached(lab, listed, root)
    files = [p for p in listed if is_input(lab, p, reached)]
    for p in files:
        h.update(p.encode() + b"\0" + _sha256(_stamp(root / p)))
    return h.hexdigest(), len(files)


@dataclass
class Proof:
    lab: str
    digest: str
    files: int
    recorded: str
    gradings: dict[str, dict[str, float]]  # case -> part -> score
    seconds: float

    def says(self) -> str:
        what = (
            f"{self.lab}'s solution ran top to bottom, every lesson printed,"
            if list(self.gradings) == [SOLUTION_RUN]
            else f"{len(self.gradings)} gradings of {self.lab} passed"
        )
        return (
            f"proven: {what} on identical inputs "
            f"({self.files} files, digest {self.digest[:12]}) in the run of {self.recorded} "
            f"(tests/proven/; COURSE_PROVE_AGAIN=1 grades them again)"
        )


def record_path(lab: str, root: Path = ROOT, kind: str = "") -> Path:
    return root / RECORDS / f"{lab}{'-' + kind if kind else ''}.json"


def proven(lab: str, cases: list[str], root: Path = ROOT, kind: str = "", extra: str = "") -> Proof | None:
    """The record proving lab's self-test (or another `kind` of proof, on `extra` besides the
    lab's inputs) on these inputs, for exactly these cases, or None."""
    if os.environ.get("COURSE_PROVE_AGAIN"):
        return None
    try:
        proof = Proof(**json.loads(record_path(lab, root, kind).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if sorted(proof.gradings) != sorted(cases) or proof.digest != inputs_digest(lab, root, extra=extra)[0]:
        return None
    return proof


def record(
    lab: str,
    inputs: tuple[str, int],
    gradings: dict[str, dict[str, float]],
    seconds: float,
    root: Path = ROOT,
    kind: str = "",
) -> Proof:
    """Write what a passing run proved of lab on these inputs (inputs_digest's, taken before it
    graded): call it only when every case of it passed."""
    digest, files = inputs
    proof = Proof(
        lab=lab,
        digest=digest,
        files=files,
        recorded=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        gradings=dict(sorted(gradings.items())),
        seconds=round(seconds, 1),
    )
    path = record_path(lab, root, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(proof.__dict__, indent=1) + "\n")
    return proof


@dataclass
class SelfTest:
    """A layer's self-test: the report of the labs it graded, and the proofs of those it did not."""

    report: object  # staff.selftest.Report
    proofs: dict[str, Proof]

    def verdict(self, lab: str, case: str) -> str | None:
        from staff.selftest import verdict

        return verdict(self.report, lab, case)


def self_test(labs: list[str], log: Path) -> SelfTest:
    """Grade the corpus of every lab a record does not prove; record each lab whose every case
    passed, on inputs that did not change while it was graded."""
    from staff.selftest import Report, case_names, grade_corpus, say

    names = {lab: [case for _, case in case_names([lab])] for lab in labs}
    proofs = {lab: p for lab in labs if (p := proven(lab, names[lab]))}
    for proof in proofs.values():
        say(f"selftest: {proof.says()}", log)
    todo = [lab for lab in labs if lab not in proofs]
    before = {lab: inputs_digest(lab) for lab in todo}
    report = grade_corpus(todo, log=log) if todo else Report([], [])
    for lab in todo:
        outcomes = [o for o in report.outcomes if o.case.lab == lab]
        failed = [o.case.name for o in outcomes if not o.ok]
        if sorted(o.case.name for o in outcomes) != sorted(names[lab]) or failed:
            why = f"{len(failed)} of {len(names[lab])} gradings did not pass"
        elif report.changed:
            why = "something outside the gradings changed"
        elif inputs_digest(lab) != before[lab]:
            why = "its inputs changed while it was graded"
        else:
            proof = record(
                lab, before[lab], {o.case.name: o.scores for o in outcomes}, sum(o.seconds for o in outcomes)
            )
            say(f"selftest: recorded {lab} ({proof.files} files, digest {proof.digest[:12]}) in tests/proven/", log)
            continue
        say(f"selftest: {lab} not recorded as proven: {why}", log)
    return SelfTest(report, proofs)


# --- a lab's solution run top to bottom (tests/autograder/test_solutions_run.py) ----------------
SOLUTION_RUN = "solution-run"


def lessons_source(lab: str, module: Path) -> str:
    """The solution-run test's source as it bears on lab: the module with its LESSONS narrowed
    to lab's entry (another lab's lessons, added or changed, prove nothing new of this one)."""
    import ast

    tree = ast.parse(module.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "LESSONS":
            assert isinstance(node.value, ast.Dict)
            keep = [(k, v) for k, v in zip(node.value.keys, node.value.values) if getattr(k, "value", None) == lab]
            node.value.keys, node.value.values = [k for k, _ in keep], [v for _, v in keep]
    return ast.unparse(tree)


def solution_run_proven(lab: str, module: Path) -> Proof | None:
    return proven(lab, [SOLUTION_RUN], kind=SOLUTION_RUN, extra=lessons_source(lab, module))


def record_solution_run(lab: str, inputs: tuple[str, int], seconds: float) -> None:
    record(lab, inputs, {SOLUTION_RUN: {}}, seconds, kind=SOLUTION_RUN)


def solution_run_inputs(lab: str, module: Path) -> tuple[str, int]:
    return inputs_digest(lab, extra=lessons_source(lab, module))
