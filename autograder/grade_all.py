"""Grade a whole class: `python -m autograder grade-all LAB SUBMISSIONS_DIR`.

Each submission is graded by the same command a single grading uses (`python -m autograder
grade`, in its own namespace, Kafka user and sandbox), `jobs` at a time (by default as many as fit in
the machine's cores, by what one of the lab's gradings costs: autograder/pool.py). A grading that fails
for a reason of the grader's own (the cluster down, a broker restarting: exit code 2) is retried
once the cluster works again, and if it still fails it is reported as not graded, never as a score.
Finished gradings are kept: a second run grades only what is new or changed (`--regrade` grades
everything again). Writes, under OUT:
    <student>/results.json   Gradescope's format, as `grade` writes it
    gradebook.csv            one row per student: status, total, each part, seconds
    scores.png               the distribution of totals, and of each part's score
"""

from __future__ import annotations

import csv
import json
import logging
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from .kernel import TOTAL_TIMEOUT_S
from .pool import at_once, machine_cores
from .results import visible_scores

logger = logging.getLogger(__name__)
EXIT_INFRASTRUCTURE = 2
STEPS_S = 120  # the grader's steps around the notebook (cluster check, clean-up)
STOP_GRACE_S = 60  # a grading past its deadline gets SIGTERM (it cleans up: user, topics, folders), then SIGKILL


def grading_deadline(lab: str) -> float:
    """How long one grading of `lab` may take: the notebook's limit, what the lab's checks may
    take (lab 9 runs a Spark job three times), and the steps around them."""
    from selfcheck.checks import policy

    return TOTAL_TIMEOUT_S + policy(lab).checks_budget_s + STEPS_S


@dataclass
class Submission:
    student: str
    notebook: Path


@dataclass
class Graded:
    student: str
    status: str  # "graded", "kept" (graded by an earlier run), "not graded"
    scores: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    problem: str = ""  # why it was not graded
    attempts: int = 0  # gradings run (more than one: the cluster failed during one)

    @property
    def total(self) -> float:
        return sum(self.scores.values())


def find_submissions(lab: str, folder: Path) -> list[Submission]:
    """`<folder>/<student>.ipynb`, or `<folder>/<student>/.../<lab>.ipynb` (nbgrader's
    submitted/ and autograded/ layouts); one notebook per student."""
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
    return [Submission(s, p) for s, p in sorted(found.items())]


def up_to_date(sub: Submission, results: Path) -> bool:
    return results.exists() and results.stat().st_mtime >= sub.notebook.stat().st_mtime


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
        sys.executable,
        "-m",
        "autograder",
        "-v",
        "grade",
        lab,
        str(sub.notebook),
        "--json",
        str(results),
        "--student",
        sub.student,
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
    return Graded(sub.student, "not graded", {}, time.monotonic() - start, problem, attempts=attempt)


def run_to_deadline(cmd: list[str], deadline_s: float) -> subprocess.CompletedProcess:
    """Run one grading; past its deadline, SIGTERM (the grader then deletes the grading's Kafka
    user, topics, own cluster and folders), and SIGKILL only if that takes over STOP_GRACE_S.
    TimeoutExpired when the deadline passed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.communicate(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def kept(sub: Submission, out: Path) -> Graded:
    return Graded(
        sub.student, "kept", visible_scores(json.loads((out / sub.student / "results.json").read_text()))
    )  # grader-only: results the grader wrote


def write_gradebook(graded: list[Graded], parts: list[str], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "status", "total", *parts, "seconds", "attempts", "problem"])
        for g in sorted(graded, key=lambda g: g.student):
            ok = g.status != "not graded"
            w.writerow(
                [
                    g.student,
                    g.status,
                    f"{g.total:g}" if ok else "",
                    *[(f"{g.scores.get(p, 0):g}" if ok else "") for p in parts],
                    f"{g.seconds:.1f}",
                    g.attempts,
                    g.problem,
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
    todo = [s for s in subs if regrade or not up_to_date(s, out / s.student / "results.json")]
    graded = [kept(s, out) for s in subs if s not in todo]
    print(
        f"grade-all {lab}: {len(subs)} submissions, {len(todo)} to grade ({len(graded)} kept from an earlier run), "
        f"{jobs} at a time",
        flush=True,
    )
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
    write_gradebook(graded, list(parts), out / "gradebook.csv")
    plot_scores(graded, parts, out / "scores.png", lab)
    failed = [g for g in graded if g.status == "not graded"]
    print(f"gradebook: {out / 'gradebook.csv'}; score distribution: {out / 'scores.png'}")
    for g in failed:
        print(
            f"NOT GRADED {g.student}: {g.problem} (its log: {out / g.student / 'grading.log'}); "
            "run grade-all again to retry it"
        )
    return graded
