"""Grade a whole class: `python -m autograder grade-all LAB SUBMISSIONS_DIR`.

Each submission is graded by the same command a single grading uses (`python -m autograder
grade`, in its own namespace, Kafka user and sandbox), `jobs` at a time (by default as many as fit in
the machine's cores, by what one of the lab's gradings costs: autograder/pool.py). A grading that fails
for a reason of the grader's own (the cluster down, a broker restarting: exit code 2) is retried
once the cluster works again, and if it still fails it is reported as not graded, never as a score.
Finished gradings are kept: a second run grades only what is new or changed (`--regrade` grades
everything again). Writes, under OUT and nowhere else (every path is resolved and checked):
    <student>/results.json   Gradescope's format, as `grade` writes it (and <student>/grading.log)
    gradebook.csv            one row per student: status, total, each part, seconds
    scores.png               the distribution of totals, and of each part's score
A submission's name (its file's, or its folder's) is an attacker's choice: <student> is a safe
folder name made from it (`student_folders`), and the gradebook's text cells never start as a
formula (`csv_text`).
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from . import forked
from .kernel import TOTAL_TIMEOUT_S
from .pool import at_once, machine_cores
from .results import visible_scores

logger = logging.getLogger(__name__)
EXIT_INFRASTRUCTURE = 2
STEPS_S = 120  # the grader's steps around the notebook (cluster check, clean-up)
STOP_GRACE_S = 60  # a grading past its deadline gets SIGTERM (it cleans up: user, topics, folders), then SIGKILL
GRADEBOOK, PLOT = "gradebook.csv", "scores.png"  # grade-all's own files in OUT: never a student's folder
# A student's folder under OUT: letters, digits, '_', '-', '.'; not '.' or '..', no leading '.' (hidden)
# or '-' (an option, to a shell command run on it), at most NAME_MAX characters. Every hub login
# (cluster.k8s.NAME: lower-case letters, digits, '-') is one, so the hub's students keep their name;
# that rule itself is too narrow here (an exported roster's "Ada_Lovelace" or "j.smith" are fine folders).
NAME_MAX = 64
UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
RESERVED = {GRADEBOOK, PLOT}  # compared case-folded: one file on a case-insensitive disk
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what makes a spreadsheet run a cell


def grading_deadline(lab: str) -> float:
    """How long one grading of `lab` may take: the notebook's limit, what the lab's checks may
    take (lab 9 runs a Spark job three times), and the steps around them."""
    from selfcheck.checks import policy

    return TOTAL_TIMEOUT_S + policy(lab).checks_budget_s + STEPS_S


@dataclass
class Submission:
    student: str  # its folder under OUT, and the gradebook's student: a safe name (student_folders)
    notebook: Path
    submitted_as: str = ""  # the name it was handed in under, when that is not `student`
    contested: bool = False  # another submission's name wanted the same folder: never kept, always graded

    @property
    def name(self) -> str:
        """The name it was handed in under: the grading's `--student` (its seed's input), as it always was."""
        return self.submitted_as or self.student


@dataclass
class Graded:
    student: str
    status: str  # "graded", "kept" (graded by an earlier run), "not graded"
    scores: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    problem: str = ""  # why it was not graded
    attempts: int = 0  # gradings run (more than one: the cluster failed during one)
    submitted_as: str = ""  # the name it was handed in under, when that is not `student`

    @property
    def total(self) -> float:
        return sum(self.scores.values())


def safe_name(name: str) -> str:
    """`name` as a folder name: each character outside letters, digits, '_', '-', '.' becomes '_',
    leading dots and dashes go ('..' and '...' with them), cut to NAME_MAX; 'student' if nothing is left."""
    return UNSAFE.sub("_", name).lstrip(".-")[:NAME_MAX] or "student"


def name_hash(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def student_folders(names: list[str]) -> dict[str, tuple[str, bool]]:
    """Each submission's name -> (its folder under OUT, whether another name wanted that folder).

    A name that is already a safe folder name (and not one of grade-all's own files) is its own
    folder. Any other gets its safe form and a hash of the whole name (".." -> "student-5ec1f7e7"),
    which depends on that name alone: the same folder in every run, whoever else handed in, and two
    names with the same safe form get two folders. A name crafted to be another's folder (the
    hash is public) keeps it, and the other gets "-2", "-3", ... (in the names' order): both are
    `contested`, graded again in every run, so neither is ever given the other's kept results."""
    own = {n for n in names if safe_name(n) == n and n.casefold() not in RESERVED}
    wanted: dict[str, list[str]] = {}
    for n in sorted(set(names), key=lambda n: (n not in own, n)):  # own names first: they keep them
        folder = n if n in own else f"{safe_name(n)[: NAME_MAX - 9]}-{name_hash(n)}"
        wanted.setdefault(folder, []).append(n)
    found: dict[str, tuple[str, bool]] = {}
    taken = set(wanted)
    for folder, claimants in wanted.items():
        found[claimants[0]] = (folder, len(claimants) > 1)
        i = 2
        for n in claimants[1:]:
            while (other := f"{folder[: NAME_MAX - 1 - len(str(i))]}-{i}") in taken:
                i += 1
            taken.add(other)
            found[n] = (other, True)
    return found


def csv_text(value: str) -> str:
    """A text cell that a spreadsheet shows as text, never runs: "'" before a leading = + - @, tab or CR."""
    return f"'{value}" if value.startswith(FORMULA_START) else value


def within(out: Path, path: Path, what: str) -> Path:
    """`path`, once checked to be OUT's own entry of that name (resolved: no link out, or to another entry)."""
    if path.resolve() != out.resolve() / path.name:
        raise SystemExit(f"{path} ({what}) leads outside {out}: remove it, or choose another --out")
    return path


def find_submissions(lab: str, folder: Path) -> list[Submission]:
    """`<folder>/<student>.ipynb`, or `<folder>/<student>/.../<lab>.ipynb` (nbgrader's
    submitted/ and autograded/ layouts); one notebook per student, its folder a safe name."""
    found: dict[str, Path] = {}
    for path in sorted(folder.glob("*.ipynb")):
        found[path.stem] = path
    for student_dir in sorted(
        p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")
    ):  # grader-only: lists submissions; each is read by read_submission
        notebooks = sorted(student_dir.rglob(f"{lab}.ipynb")) or sorted(
            student_dir.rglob("*.ipynb")
        )  # grader-only: lists submissions; each is read by read_submission
        notebooks = [n for n in notebooks if ".ipynb_checkpoints" not in n.parts]
        if notebooks:
            found.setdefault(student_dir.name, notebooks[0])
    folders = student_folders(list(found))
    return [
        Submission(folders[s][0], p, "" if folders[s][0] == s else s, folders[s][1]) for s, p in sorted(found.items())
    ]


def up_to_date(sub: Submission, results: Path) -> bool:
    return not sub.contested and results.exists() and results.stat().st_mtime >= sub.notebook.stat().st_mtime


def wait_for_cluster(timeout_s: float = 180) -> str:
    """'' once the cluster works again, else what is wrong (a grading is not retried on a broken cluster)."""
    from cluster import Cluster, ClusterError, mode

    if mode() != "local":
        return ""
    try:
        # A broker that is down now is what we wait for (its owner starts it again): only the
        # deadline ends the wait, not the dead process.
        Cluster().wait_ready(timeout=timeout_s, fail_fast=False)
        return ""
    except ClusterError as e:
        return str(e)


def grade_one(lab: str, sub: Submission, out: Path, retries: int) -> Graded:
    results = out / sub.student / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    # -v: each step's time in the student's grading.log, for staff
    cmd = [
        "-v",
        "grade",
        lab,
        str(sub.notebook),
        "--json",
        str(results),
        f"--student={sub.name}",  # one argument: a name starting with '-' is not taken for an option
    ]
    log = out / sub.student / "grading.log"
    log.write_text("")
    start, problem = time.monotonic(), ""
    for attempt in range(1, retries + 2):
        results.unlink(missing_ok=True)
        deadline = grading_deadline(lab)
        try:
            proc = run_to_deadline(cmd, deadline)
        except subprocess.TimeoutExpired:
            problem = f"the grading did not end within {deadline:.0f} s (stopped, and cleaned up)"
        else:
            with open(log, "a") as f:  # every attempt's output, for staff
                f.write(f"===== attempt {attempt}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
            if proc.returncode == 0 and results.exists():
                return Graded(
                    sub.student,
                    "graded",
                    visible_scores(json.loads(results.read_text())),  # grader-only: results the grader wrote
                    time.monotonic() - start,
                    attempts=attempt,
                    submitted_as=sub.submitted_as,
                )
            last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
            problem = (
                f"infrastructure: {last}"
                if proc.returncode == EXIT_INFRASTRUCTURE
                else f"the grader failed (exit {proc.returncode}): {last}"
            )
        if attempt <= retries:
            logger.warning(
                "%s: not graded on attempt %d (%s); trying again once the cluster works", sub.student, attempt, problem
            )
            broken = wait_for_cluster()
            if broken:
                problem += f"; the cluster did not come back: {broken}"
                break
    results.unlink(missing_ok=True)  # no score for a grading that did not happen
    return Graded(
        sub.student,
        "not graded",
        {},
        time.monotonic() - start,
        problem,
        attempts=attempt,
        submitted_as=sub.submitted_as,
    )


def run_to_deadline(
    argv: list[str], deadline_s: float, module: str = "autograder.__main__"
) -> subprocess.CompletedProcess:
    """Run one grading (`python -m module argv`, forked from a process that imported the grader
    already: autograder/forked.py); past its deadline, SIGTERM (the grader then deletes the
    grading's Kafka user, topics, own cluster and folders), and SIGKILL only if that takes over
    STOP_GRACE_S. TimeoutExpired when the deadline passed."""
    with tempfile.TemporaryDirectory(prefix="grade-all-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        proc = forked.start(module, argv, out, err)
        proc.join(deadline_s)
        if proc.exitcode is None:
            proc.terminate()
            proc.join(STOP_GRACE_S)
            if proc.exitcode is None:
                proc.kill()
                proc.join()
            raise subprocess.TimeoutExpired(argv, deadline_s)
        return subprocess.CompletedProcess(
            argv, proc.exitcode, out.read_text(errors="replace"), err.read_text(errors="replace")
        )


def kept(sub: Submission, out: Path) -> Graded:
    return Graded(
        sub.student,
        "kept",
        visible_scores(json.loads((out / sub.student / "results.json").read_text())),  # grader-only: ours
        submitted_as=sub.submitted_as,
    )


def write_gradebook(graded: list[Graded], parts: list[str], path: Path) -> None:
    """One row per student; every text cell through csv_text (numbers as they are). A name that is
    not valid UTF-8 (a file name can be any bytes) is written with backslash escapes."""
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csv.writer(f)
        header = ["student", "submitted as", "status", "total", *parts, "seconds", "attempts", "problem"]
        w.writerow([csv_text(h) for h in header])
        for g in sorted(graded, key=lambda g: g.student):
            ok = g.status != "not graded"
            w.writerow(
                [
                    csv_text(g.student),
                    csv_text(g.submitted_as),
                    csv_text(g.status),
                    f"{g.total:g}" if ok else "",
                    *[(f"{g.scores.get(p, 0):g}" if ok else "") for p in parts],
                    f"{g.seconds:.1f}",
                    g.attempts,
                    csv_text(g.problem),
                ]
            )


def score_counts(graded: list[Graded], parts: dict[str, float]) -> dict[str, list[tuple[float, int]]]:
    """How many students got each score: the whole lab's total first, then each part. Every level
    from 0 to the maximum that somebody reached is shown, so gaps in the distribution show too."""
    done = [g for g in graded if g.status != "not graded"]
    columns = {"total": ([g.total for g in done], sum(parts.values()))}
    columns |= {label: ([g.scores.get(label, 0.0) for g in done], points) for label, points in parts.items()}
    counts = {}
    for label, (values, points) in columns.items():
        levels = sorted({0.0, float(points), *values, *(float(v) for v in range(int(points) + 1))})
        counts[label] = [(level, values.count(level)) for level in levels]
    return counts


def plot_scores(graded: list[Graded], parts: dict[str, float], path: Path, lab: str) -> None:
    """The distribution of totals (wide, on the left), then one small histogram per graded part."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = score_counts(graded, parts)
    widths = [3] + [1] * len(parts)
    fig, axes = plt.subplots(
        1, len(counts), figsize=(2.6 * sum(widths) / 1.4, 2.8), squeeze=False, gridspec_kw={"width_ratios": widths}
    )
    for ax, (label, levels) in zip(axes[0], counts.items()):
        ax.bar(
            [f"{v:g}" for v, _ in levels], [n for _, n in levels], color="#dd8452" if label == "total" else "#4c72b0"
        )
        ax.set_title(f"{lab} total" if label == "total" else label, fontsize=9)
        ax.set_xlabel("points")
        ax.tick_params(axis="x", labelsize=7)
    axes[0][0].set_ylabel("students")
    graded_now = sum(n for _, n in counts["total"])
    fig.suptitle(f"{lab}: {graded_now} graded", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def grade_all(
    lab: str,
    folder: Path,
    out: Path,
    jobs: int | None = None,
    regrade: bool = False,
    retries: int = 1,
    progress: bool = True,
) -> list[Graded]:
    import nbformat
    from tqdm import tqdm

    from .pipeline import course_labs, graded_parts, source_notebook

    source, known = source_notebook(lab), course_labs()
    if lab not in known:
        raise SystemExit(f"no lab named {lab!r}; the labs are {', '.join(known)}")
    if not folder.is_dir():
        raise SystemExit(f"{folder} is not a folder of submissions")
    parts = graded_parts(nbformat.read(source, as_version=4))
    jobs = jobs or at_once(lab, machine_cores())
    subs = find_submissions(lab, folder)
    if not subs:
        raise SystemExit(f"no notebooks in {folder}: expected <student>.ipynb or <student>/.../{lab}.ipynb")
    out.mkdir(parents=True, exist_ok=True)
    # Checked before any grading: a class is not graded for an hour to end without a gradebook.
    for own in (GRADEBOOK, PLOT):
        if within(out, out / own, f"grade-all's {own}").is_dir():
            raise SystemExit(
                f"{out / own} is a folder (an older grade-all's student?): remove it, or choose another --out"
            )
    for s in subs:
        within(out, out / s.student, f"the folder of {s.name!r}")
    todo = [s for s in subs if regrade or not up_to_date(s, out / s.student / "results.json")]
    graded = [kept(s, out) for s in subs if s not in todo]
    print(
        f"grade-all {lab}: {len(subs)} submissions, {len(todo)} to grade ({len(graded)} kept from an earlier run), "
        f"{jobs} at a time",
        flush=True,
    )
    for s in subs:
        if s.submitted_as:
            print(f"renamed: {s.submitted_as!r} -> {s.student} (its folder in {out}; the gradebook says both)")
    with (
        ThreadPoolExecutor(max(1, jobs)) as pool,
        tqdm(total=len(todo), unit="notebook", disable=not progress, file=sys.stdout) as bar,
    ):
        futures = [pool.submit(grade_one, lab, s, out, retries) for s in todo]
        for f in as_completed(futures):
            g = f.result()
            graded.append(g)
            bar.set_postfix_str(
                f"{g.student}: " + (f"{g.total:g}/{sum(parts.values()):g}" if g.status == "graded" else "NOT GRADED")
            )
            bar.update()
    write_gradebook(graded, list(parts), out / GRADEBOOK)
    plot_scores(graded, parts, out / PLOT, lab)
    failed = [g for g in graded if g.status == "not graded"]
    print(f"gradebook: {out / GRADEBOOK}; score distribution: {out / PLOT}")
    for g in failed:
        print(
            f"NOT GRADED {g.student}: {g.problem} (its log: {out / g.student / 'grading.log'}); "
            "run grade-all again to retry it"
        )
    return graded
