"""python -m staff selftest: the grader grades its own corpus through its real CLI.

Every solution must score full marks, every blank release 0 (without crashing), and every
scenario of staff/corpus/ (mistakes and attacks) exactly its expected score, with the
expected note. After every grading: no secret and no seed in what the student sees, and no
process of the submission alive. After all of them: no course file changed, no file left
where an attack tried to write, the brokers' settings unchanged. Runs several gradings at
once, as a class's submissions would, and grades the solutions last, after the attacks, so
an attack that breaks things shows up in the solutions' scores.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import nbformat

import psutil

from autograder.pool import machine_cores, run_by_cost
from autograder.pipeline import RELEASE, SOLUTIONS, course_labs, grading_secret, graded_parts
from autograder.results import visible_scores
from cluster.settings import ROOT
from cluster.waiting import wait_for
from selfcheck.checks import policy

from .corpus import Scenario, scenarios, student_work

# What attacks try to change: the course's own folders, and files outside any grading folder.
WATCHED = (
    "solutions",
    "labs",
    "autograder",
    "selfcheck",
    "staff",
    "cluster",
    "datasets",
    "pyproject.toml",
    "nbgrader_config.py",
)
ESCAPE_MARKERS = (Path("/tmp/kafka-course-escaped.txt"), Path("/course-escape.txt"), Path("/tmp/course-escape.txt"))

CELL_TIMEOUT_S = 20  # short, so runaway cells cost little; the lab's cells take a few seconds
TOTAL_TIMEOUT_S = 240


@dataclass
class Case:
    name: str
    lab: str
    notebook: Path
    expected: dict[str, float]
    note: str = ""


@dataclass
class Outcome:
    case: Case
    scores: dict[str, float]
    output: str
    seconds: float
    exit_code: int
    problems: list[str] | None = None  # what went wrong beyond the score: leaks, leftovers
    cpu_s: float = 0.0  # CPU seconds of the grading's own processes (not the brokers')

    @property
    def ok(self) -> bool:
        return (
            self.exit_code == 0
            and self.scores == self.case.expected
            and self.case.note in self.output
            and not self.problems
        )


def labs() -> list[str]:
    return course_labs()


def cases(selected: list[str], workdir: Path, kinds=scenarios) -> list[Case]:
    """The corpus first (mistakes and attacks, or what `kinds` gives), then each lab's blank
    release and solution."""
    corpus, last = [], []
    for lab in selected:
        solution = nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4)
        parts = graded_parts(solution)
        last.append(Case("blank-release", lab, RELEASE / lab / f"{lab}.ipynb", dict.fromkeys(parts, 0.0)))
        last.append(Case("solution", lab, SOLUTIONS / lab / f"{lab}.ipynb", dict(parts)))
        for s in kinds(lab):
            path = workdir / lab / f"{s.name}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(s.notebook(), path)
            corpus.append(Case(s.name, lab, path, expected_scores(s, parts), s.note))
    return corpus + last


def case_names(selected: list[str]) -> list[tuple[str, str]]:
    """(lab, case) of every grading `cases` makes for these labs: one test each in the suite."""
    return [(lab, s.name) for lab in selected for s in scenarios(lab)] + [
        (lab, name) for lab in selected for name in ("blank-release", "solution")
    ]


def expected_scores(s: Scenario, parts: dict[str, float]) -> dict[str, float]:
    unknown = s.fails - set(parts)
    if unknown:
        raise ValueError(f"scenario {s.name} names unknown parts {sorted(unknown)}")
    return {label: 0.0 if label in s.fails else points for label, points in parts.items()}


CPUACCT = Path("/sys/fs/cgroup/cpuacct")  # cgroup v1's CPU accounting, where the machine has it


def cpu_group() -> Path | None:
    """A cpuacct control group of one grading's own (cgroup v1, writable: as root), or None. Every
    process the grading starts counts in it, sandboxes and JVMs included (the sandbox moves its
    processes in the memory and pids hierarchies only)."""
    folder = CPUACCT / "kafka-course-selftest" / f"{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
    try:
        folder.mkdir(parents=True)
        return folder
    except OSError:
        return None


def _removed(folder: Path) -> bool:
    folder.rmdir()  # possible once the grading's last process has ended (it kills what it started)
    return True


def measured(module: str, argv: list[str], timeout_s: float) -> tuple[int | None, str, str, float]:
    """`python -m module argv` to its end or its deadline, forked from a process that imported
    the grader already (autograder/forked.py): (its exit code, None if it was killed at the
    deadline; its stdout; its stderr; the CPU seconds it used, with every process it started:
    from a cpuacct group of its own where the machine has one, else what it and the children it
    waited for used, which misses the processes no one of its own waited for. Never the brokers')."""
    from autograder import forked

    group = cpu_group()
    with tempfile.TemporaryDirectory(prefix="selftest-run-") as tmp:
        out, err, cpu_file = Path(tmp) / "stdout", Path(tmp) / "stderr", Path(tmp) / "cpu"
        proc = forked.start(
            module, argv, out, err, cgroup_procs=group / "cgroup.procs" if group else None, cpu_file=cpu_file
        )
        proc.join(timeout_s)
        hung = proc.exitcode is None
        if hung:
            proc.kill()
            proc.join()
        try:
            cpu = float(cpu_file.read_text())
        except (OSError, ValueError):
            cpu = 0.0
        if group is not None:
            try:
                cpu = int((group / "cpuacct.usage").read_text()) / 1e9
                wait_for(partial(_removed, group), timeout_s=5, every_s=0.05, retry_on=(OSError,))
            except (OSError, ValueError):
                pass
        code = proc.exitcode
        return None if hung else code, out.read_text(errors="replace"), err.read_text(errors="replace"), cpu


def run(case: Case, outdir: Path) -> Outcome:
    result = outdir / f"{case.lab}-{case.name}.json"
    argv = [
        "grade",
        case.lab,
        str(case.notebook),
        "--json",
        str(result),
        "--cell-timeout",
        str(CELL_TIMEOUT_S),
        "--total-timeout",
        str(TOTAL_TIMEOUT_S),
    ]
    # the notebook's limit, plus what the lab's checks may take (lab 9 runs a Spark job three times)
    hung_after = TOTAL_TIMEOUT_S + policy(case.lab).checks_budget_s
    start = time.monotonic()
    code, stdout, stderr, cpu = measured("autograder.__main__", argv, hung_after)
    seconds = time.monotonic() - start
    if code is None:
        return Outcome(
            case, {}, f"the grading did not end within {hung_after} s", seconds, 99, ["the grading hung"], cpu
        )
    try:
        data = json.loads(result.read_text())
    except (OSError, ValueError):
        return Outcome(case, {}, stdout + stderr, seconds, code or 99, [], cpu)
    scores = visible_scores(data)
    visible = "\n".join(t["output"] for t in data["tests"] if t.get("visibility") != "hidden")
    return Outcome(
        case,
        scores,
        data["output"] + "\n" + visible + "\n" + stdout,
        seconds,
        code,
        after_grading(data),
        cpu,
    )


def run_in_kernel(case: Case, outdir: Path) -> Outcome:
    """The case run as its student runs it (staff/as_student.py): each part scores its points
    when the self-check in the student's kernel passed it, for comparison with the grader's."""
    result = outdir / f"{case.lab}-{case.name}.kernel.json"
    argv = [case.lab, str(case.notebook), "--json", str(result)]
    hung_after = TOTAL_TIMEOUT_S + policy(case.lab).checks_budget_s + 300
    start = time.monotonic()
    code, stdout, stderr, cpu = measured("staff.as_student", argv, hung_after)
    seconds = time.monotonic() - start
    if code is None:
        return Outcome(case, {}, f"the run did not end within {hung_after} s", seconds, 99, ["the run hung"], cpu)
    try:
        parts = json.loads(result.read_text())["parts"]
    except (OSError, ValueError, KeyError):
        return Outcome(case, {}, stdout + stderr[-3000:], seconds, code or 99, [], cpu)
    full = graded_parts(nbformat.read(SOLUTIONS / case.lab / f"{case.lab}.ipynb", as_version=4))
    scores = {label: full.get(label, 0.0) if p["passed"] else 0.0 for label, p in parts.items()}
    said = "\n".join(f"{label}: {'passed' if p['passed'] else p['said']}" for label, p in parts.items())
    return Outcome(case, scores, said, seconds, code, [], cpu)


def after_grading(data: dict) -> list[str]:
    """What a grading must never leave behind: secrets in the student's view, live processes."""
    problems = []
    staff = " ".join(t["output"] for t in data["tests"] if t.get("visibility") == "hidden")
    seed = re.search(r"seed (\d+)", staff)
    namespace = re.search(r"namespace (\S+)", staff)
    student_view = data["output"] + " ".join(t["output"] for t in data["tests"] if t.get("visibility") != "hidden")
    for secret in (seed and seed.group(1), grading_secret().decode()):
        if secret and secret in student_view:
            problems.append("the student's view of the result shows the grading seed or the course's secret")
    if namespace:
        alive = [
            p.pid
            for p in psutil.process_iter(["environ"])
            if (p.info.get("environ") or {}).get("LAB_NAMESPACE") == namespace.group(1)
        ]
        if alive:
            problems.append(f"processes of the submission are still alive: {alive}")
        left = kafka_access_left(namespace.group(1))
        if left:
            problems.append(f"the grading's Kafka user is still there: {left}")
    return problems


def kafka_access_left(user: str) -> list[str]:
    """What the cluster still knows of a grading's user: its password, its ACLs."""
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )

    from cluster import accounts
    from cluster.clients import admin_client

    try:
        admin = admin_client("selftest")
    except Exception as e:  # any failure to reach the brokers means the same to the user
        raise SystemExit(
            f"selftest: the Kafka cluster does not answer ({type(e).__name__}); the corpus is graded "
            "on it. Start it with `make up` (or `python -m cluster up`), then run this again."
        ) from None
    try:
        # the brokers learn of a deletion a moment after the controller
        gone = wait_for(lambda: user not in accounts.users(admin), timeout_s=10, every_s=0.2)
        left = [] if gone else ["password"]
        acls, _ = admin.describe_acls(
            ACLFilter(
                f"User:{user}",
                None,
                ACLOperation.ANY,
                ACLPermissionType.ANY,
                ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
            )
        )
        return left + [f"{len(acls)} ACLs"] * bool(acls)
    finally:
        admin.close()


def student_id(case: Case) -> str:
    """The nbgrader student a case is submitted as (and its seed's student, through the CLI)."""
    return case.name.replace("-", "_")


def run_via_nbgrader(todo: list[Case], tmp: Path) -> list[Outcome]:
    """The same cases through real nbgrader: a course folder of its own, each case submitted
    as a student, one `nbgrader autograde` per lab (its steps are the grader's own, see
    nbgrader_config.py), points read from nbgrader's gradebook."""
    import os
    import shutil

    from nbgrader.api import Gradebook

    course = tmp / "nbgrader-course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(SOLUTIONS, course / "solutions")
    (course / ".nbgrader").mkdir()
    nbgrader = str(Path(sys.executable).parent / "nbgrader")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")

    outcomes = []
    for lab in sorted({c.lab for c in todo}):
        mine = [c for c in todo if c.lab == lab]
        subprocess.run(
            [nbgrader, "generate_assignment", lab, "--force", "--log-level=ERROR"],
            cwd=course,
            env=env,
            check=True,
            capture_output=True,
        )
        for case in mine:
            folder = course / "submitted" / student_id(case) / lab
            shutil.copytree(RELEASE / lab, folder)
            shutil.copy(case.notebook, folder / f"{lab}.ipynb")
        start = time.monotonic()
        proc = subprocess.run(
            [nbgrader, "autograde", lab, "--force", "--log-level=ERROR"],
            cwd=course,
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = (time.monotonic() - start) / len(mine)
        with Gradebook(f"sqlite:///{course / '.nbgrader' / 'gradebook.db'}") as gb:
            for case in mine:
                try:
                    nb = gb.find_submission_notebook(lab, lab, student_id(case))
                    scores = {g.name: float(g.score) for g in nb.grades}
                except Exception:
                    scores = {}
                # nbgrader keeps no notes; the CLI's self-test checks those
                outcomes.append(
                    Outcome(
                        Case(case.name, lab, case.notebook, case.expected),
                        scores,
                        proc.stderr[-2000:],
                        seconds,
                        proc.returncode,
                        [],
                    )
                )
    return outcomes


def course_digest() -> str:
    h = hashlib.sha256()
    for name in WATCHED:
        root = ROOT / name
        for path in sorted([root] if root.is_file() else root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(str(path).encode() + path.read_bytes())
    return h.hexdigest()


def broker_settings() -> dict:
    """Every broker's configuration, as the cluster reports it."""
    from kafka.admin import ConfigResource, ConfigResourceType

    from cluster.clients import admin_client

    try:
        admin = admin_client("selftest")
    except Exception as e:  # any failure to reach the brokers means the same to the user
        raise SystemExit(
            f"selftest: the Kafka cluster does not answer ({type(e).__name__}); the corpus is graded "
            "on it. Start it with `make up` (or `python -m cluster up`), then run this again."
        ) from None
    try:
        brokers = sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"])
        found = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(b)) for b in brokers])
        return json.loads(json.dumps(found, default=str))
    finally:
        admin.close()


@dataclass
class Report:
    outcomes: list[Outcome]
    changed: list[str]  # what went wrong across all gradings: course files, escapes, broker settings


def grade_corpus(
    selected: list[str],
    cores: float | None = None,
    corpus_dir: Path | None = None,
    only: list[str] | None = None,
    via: str = "cli",
    log: Path | None = None,
) -> Report:
    """Grade every case of the selected labs (the CLI: as many at once as their costs fit in
    `cores`, by default the machine's: autograder/pool.py; or nbgrader), or run each piece of
    student work as its student would, with the self-checks in the kernel (via="kernel"), for the
    scores the grader must give it. One line per grading as it ends, on stdout and in `log`."""
    cores = cores or machine_cores()
    with tempfile.TemporaryDirectory(prefix="selftest-") as tmp_name:
        tmp = Path(tmp_name)
        todo = cases(selected, corpus_dir or tmp / "corpus", student_work if via == "kernel" else scenarios)
        if via == "kernel":  # the grader's notes are not the self-check's
            todo = [Case(c.name, c.lab, c.notebook, c.expected) for c in todo]
        if only:
            todo = [c for c in todo if any(o in c.name for o in only)]
        how = {
            "nbgrader": "through nbgrader autograde",
            "kernel": f"as students run them, self-checks in their kernels, within {cores:g} cores",
        }
        print(
            f"selftest: {len(todo)} {'runs' if via == 'kernel' else 'gradings'} of {', '.join(selected)}, "
            + how.get(via, f"as many at once as fit in {cores:g} cores"),
            flush=True,
        )
        digest, settings = course_digest(), broker_settings()
        started, machine = time.monotonic(), psutil.cpu_times()
        if via == "nbgrader":
            outcomes = run_via_nbgrader(todo, tmp)
        else:
            runner = run_in_kernel if via == "kernel" else run
            outcomes = run_by_cost(
                todo, lambda c: runner(c, tmp), cores, lambda c: c.lab, lambda c, o: progress(c, o, log)
            )
        progress_total(outcomes, time.monotonic() - started, machine, log)
        changed = []
        if course_digest() != digest:
            changed.append("a file of the course (solutions/, labs/, autograder/, cluster/, ...) changed")
        changed += [f"an attack left {m}" for m in ESCAPE_MARKERS if m.exists()]
        if broker_settings() != settings:
            changed.append("the brokers' settings changed")
    return Report(outcomes, changed)


def progress(case: Case, outcome: Outcome | BaseException, log: Path | None) -> None:
    """One line as a grading ends: its case, PASS/FAIL, seconds, CPU, score."""
    if isinstance(outcome, BaseException):
        line = f"{case.lab} {case.name}  ERROR  {type(outcome).__name__}: {outcome}"
    else:
        line = describe(outcome).splitlines()[0]
    say(line, log)


def progress_total(outcomes: list[Outcome], wall_s: float, before, log: Path | None) -> None:
    """What the gradings cost together: wall time, their own CPU and the whole machine's."""
    after = psutil.cpu_times()
    busy = sum(getattr(after, f) - getattr(before, f) for f in ("user", "system", "nice", "irq", "softirq"))
    own = sum(o.cpu_s for o in outcomes)
    say(
        f"selftest: {len(outcomes)} in {wall_s:.0f} s; their processes used {own:.0f} CPU s, "
        f"the machine {busy:.0f} of {wall_s * machine_cores():.0f} (every process on it: the brokers, other tests)",
        log,
    )


def say(line: str, log: Path | None) -> None:
    print(line, flush=True)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {line}\n")


def verdict(report: Report, lab: str, case: str) -> str | None:
    """None if the case was graded as expected, else why not (for a test's assertion)."""
    outcome = next((o for o in report.outcomes if (o.case.lab, o.case.name) == (lab, case)), None)
    if outcome is None:
        return f"{lab} {case} was not graded"
    return None if outcome.ok else describe(outcome)


def describe(o: Outcome, width: int = 0) -> str:
    """One line per case; for a failure, what differed and the grader's output."""
    got, want = sum(o.scores.values()), sum(o.case.expected.values())
    lines = [
        f"{o.case.lab + ' ' + o.case.name:<{width}}  {'PASS' if o.ok else 'FAIL'}  {o.seconds:5.1f}s  "
        f"cpu {o.cpu_s:5.1f}s  score {got:g} (expected {want:g})"
    ]
    if not o.ok:
        wrong = {k: (o.scores.get(k), v) for k, v in o.case.expected.items() if o.scores.get(k) != v}
        lines.append(f"    parts (found, expected): {wrong}; exit code {o.exit_code}")
        if o.case.note and o.case.note not in o.output:
            lines.append(f"    the grader's notes should mention {o.case.note!r}")
        lines.extend(f"    {problem}" for problem in o.problems or [])
        lines.append("    " + o.output.strip().replace("\n", "\n    ")[:3000])
    return "\n".join(lines)


def selftest(
    labs: list[str] | None = None,
    cores: float | None = None,
    write_corpus: str | None = None,
    only: list[str] | None = None,
    via: str = "cli",
) -> int:
    selected = labs or globals()["labs"]()
    report = grade_corpus(selected, cores, Path(write_corpus) if write_corpus else None, only, via)
    for o in report.outcomes:  # each one's line was printed as it ended: here, what failed and why
        if not o.ok:
            print(describe(o))
    for problem in report.changed:
        print(f"AFTER ALL GRADINGS: {problem}")
    failed = sum(not o.ok for o in report.outcomes) + len(report.changed)
    print(f"{len(report.outcomes) + len(report.changed) - failed} passed, {failed} failed")
    return 1 if failed else 0
