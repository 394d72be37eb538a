"""Grading as a pipeline of small steps that always ends with a result.

    find the lab -> check the cluster -> read the notebook -> restore the tests
    -> make a namespace -> make a working folder -> run the notebook and the checks
    -> clean up (always)

A step that cannot go on raises StudentError (the submission is at fault: graded, with a
message) or InfrastructureError (we could not grade: the CLI exits non-zero and says why).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from cluster.connect import bootstrap_servers
from cluster.settings import ROOT

from .checks import DEFAULT_SEED, CheckFailed, Context, checks_for
from .kernel import CELL_TIMEOUT_S, TOTAL_TIMEOUT_S, KernelSession
from .results import CheckResult, GradingResult

SOLUTIONS, RELEASE = ROOT / "solutions", ROOT / "labs"
CLUSTER_TIMEOUT_S = 15


class InfrastructureError(Exception):
    """We could not grade: not the student's fault."""


class StudentError(Exception):
    """The submission cannot be run at all (e.g. not a notebook); graded as zero, with why."""


@dataclass
class Job:
    lab: str
    notebook: Path
    seed: int = DEFAULT_SEED
    cell_timeout: float = CELL_TIMEOUT_S
    total_timeout: float = TOTAL_TIMEOUT_S
    bootstrap: str = ""
    namespace: str = ""
    parts: dict[str, float] = field(default_factory=dict)   # label -> points, from the source notebook
    source: nbformat.NotebookNode | None = None
    submission: nbformat.NotebookNode | None = None
    workdir: Path | None = None
    result: GradingResult | None = None


def graded_parts(nb) -> dict[str, float]:
    """label -> points of every autograded test cell of an nbgrader notebook."""
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"].get("points", 0))
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}


def test_label(cell) -> str | None:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta.get("grade_id") if meta.get("grade") and cell.get("cell_type") == "code" else None


# --- the steps -------------------------------------------------------------------------------
def find_lab(job: Job) -> None:
    path = SOLUTIONS / job.lab / f"{job.lab}.ipynb"
    if not path.exists():
        known = sorted(p.name for p in SOLUTIONS.iterdir() if (p / f"{p.name}.ipynb").exists())
        raise InfrastructureError(f"unknown lab {job.lab!r}; the labs are {', '.join(known)}")
    job.source = nbformat.read(path, as_version=4)
    job.parts = graded_parts(job.source)
    checks = checks_for(job.lab)
    if set(checks) != set(job.parts):
        raise InfrastructureError(f"{job.lab}: the notebook's graded cells {sorted(job.parts)} and the "
                                  f"registered checks {sorted(checks)} differ")
    job.result.checks = [CheckResult(label, points) for label, points in job.parts.items()]


def check_cluster(job: Job) -> None:
    from kafka import KafkaAdminClient

    job.bootstrap = bootstrap_servers()
    try:
        admin = KafkaAdminClient(bootstrap_servers=job.bootstrap, request_timeout_ms=CLUSTER_TIMEOUT_S * 1000,
                                 client_id="grader")
        try:
            brokers = [b for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")]
        finally:
            admin.close()
    except Exception as e:
        raise InfrastructureError(f"the Kafka cluster at {job.bootstrap} does not answer ({type(e).__name__}: {e}). "
                                  "Start it with `python -m cluster up`.") from None
    if len(brokers) < 3:
        raise InfrastructureError(f"only {len(brokers)} of 3 brokers are up at {job.bootstrap}; "
                                  "see `python -m cluster status`.")


def read_submission(job: Job) -> None:
    if not job.notebook.exists():
        raise InfrastructureError(f"the notebook {job.notebook} does not exist")
    try:
        job.submission = nbformat.read(job.notebook, as_version=4)
        nbformat.validate(job.submission)
    except Exception as e:
        raise StudentError(f"{job.notebook.name} is not a readable Jupyter notebook ({type(e).__name__}: {e}). "
                           "Download it again from JupyterLab (File > Download) and resubmit.") from None


def restore_tests(job: Job) -> None:
    """Put the course's own test cells back (as nbgrader does), so edits to them count for
    nothing; only the course's own observation cells keep their "demo" tag (skipped)."""
    ours = {test_label(c): c for c in job.source.cells if test_label(c)}
    demos = {c.source for c in job.source.cells if "demo" in c.metadata.get("tags", [])}
    seen = set()
    for cell in job.submission.cells:
        cell.outputs = [] if cell.cell_type == "code" else cell.get("outputs")
        tags = cell.get("metadata", {}).get("tags", [])
        if "demo" in tags and cell.source not in demos:
            tags.remove("demo")
        label = test_label(cell)
        if label in ours:
            cell.source = ours[label].source
            seen.add(label)
    missing = sorted(set(ours) - seen)
    if missing:
        job.result.notes.append(f"Test cells {missing} were missing from the notebook; they were checked at the end.")


def make_namespace(job: Job) -> None:
    job.namespace = f"grade-{job.lab}-{secrets.token_hex(4)}"
    job.result.namespace = job.namespace


def make_workdir(job: Job) -> None:
    job.workdir = Path(tempfile.mkdtemp(prefix=f"grade-{job.lab}-"))
    release = RELEASE / job.lab
    for item in release.iterdir() if release.exists() else []:
        if item.suffix != ".ipynb" and item.name != ".ipynb_checkpoints":
            (shutil.copytree if item.is_dir() else shutil.copy)(item, job.workdir / item.name)
    for sub in ("home", "tmp"):
        (job.workdir / "." / sub).mkdir()


def kernel_env(job: Job) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "JAVA_HOME", "VIRTUAL_ENV", "COURSE_JARS_CACHE", "KAFKA_HOME")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(LAB_NAMESPACE=job.namespace, KAFKA_BOOTSTRAP_SERVERS=job.bootstrap, COURSE_SEED=str(job.seed),
               HOME=str(job.workdir / "home"), TMPDIR=str(job.workdir / "tmp"),
               MPLCONFIGDIR=str(job.workdir / "home"), MPLBACKEND="agg", PYTHONDONTWRITEBYTECODE="1", GRPC_VERBOSITY="ERROR",
               PYTHONHASHSEED="0",  # a submission that (wrongly) uses hash() gets the same score every time
               IPYTHONDIR=str(job.workdir / "home" / ".ipython"), JUPYTER_PLATFORM_DIRS="1")
    return env


def run_notebook_and_checks(job: Job) -> None:
    by_label = {c.label: c for c in job.result.checks}
    done: set[str] = set()
    scratch, cleanup = {}, []

    def run_one(session: KernelSession, label: str) -> None:
        res = by_label[label]
        ctx = Context(job.lab, label, session, job.namespace, job.bootstrap, job.seed, workdir=job.workdir,
                      scratch=scratch, cleanup=cleanup)
        start = time.monotonic()
        try:
            detail = checks_for(job.lab)[label].func(ctx)
            res.passed, res.score = True, res.max_score
            res.message = "Passed: " + checks_for(job.lab)[label].title + (f" ({detail})" if detail else "")
        except CheckFailed as e:
            res.message = str(e)
        except Exception as e:  # a check that crashed: the student sees that, staff the traceback
            res.message = f"The check could not finish ({type(e).__name__}: {e})."
            res.details = traceback.format_exc()
        finally:
            ctx.close()
        res.seconds = time.monotonic() - start
        done.add(label)

    with KernelSession(job.submission, job.workdir, kernel_env(job), job.cell_timeout, job.total_timeout) as session:
        session.run_silently(f"import autograder.guard as _g; _g.install({str(job.workdir)!r}, {job.namespace!r}); del _g")
        log = session.run(lambda index, label: run_one(session, label) if label in by_label else None, test_label)
        try:
            for label in by_label:
                if label not in done:
                    run_one(session, label)
        finally:
            Context(job.lab, "", session, job.namespace, job.bootstrap, cleanup=cleanup).finish()
    job.result.notes.extend(log.notes)
    if log.errors:
        first = min(log.errors)
        job.result.notes.append(f"{len(log.errors)} cell(s) raised an error; the first was cell {first + 1}: "
                                f"{log.errors[first]}")


def clean_up(job: Job) -> None:
    """Delete the namespace's topics and groups, and the working folder."""
    if job.namespace and job.bootstrap:
        from kafka import KafkaAdminClient

        try:
            admin = KafkaAdminClient(bootstrap_servers=job.bootstrap, request_timeout_ms=10_000)
            prefix = job.namespace + "."
            topics = [t for t in admin.list_topics() if t.startswith(prefix)]
            if topics:
                admin.delete_topics(topics)
            groups = [g[0] if isinstance(g, tuple) else getattr(g, "group_id", g) for g in admin.list_groups()]
            mine = [g for g in groups if str(g).startswith(prefix)]
            if mine:
                admin.delete_groups(mine)
            admin.close()
        except Exception as e:
            job.result.notes.append(f"(clean-up of {job.namespace} incomplete: {type(e).__name__}: {e})")
    if job.workdir:
        shutil.rmtree(job.workdir, ignore_errors=True)


STEPS = (find_lab, check_cluster, read_submission, restore_tests, make_namespace, make_workdir,
         run_notebook_and_checks)


def grade(lab: str, notebook: Path, seed: int = DEFAULT_SEED, cell_timeout: float = CELL_TIMEOUT_S,
          total_timeout: float = TOTAL_TIMEOUT_S) -> GradingResult:
    """Grade one submission. Always returns a result; never raises for a bad submission."""
    job = Job(lab, Path(notebook), seed, cell_timeout, total_timeout)
    job.result = GradingResult(lab=lab, notebook=str(notebook), seed=seed)
    start = time.monotonic()
    try:
        for step in STEPS:
            step(job)
    except InfrastructureError as e:
        job.result.infrastructure_error = str(e)
    except StudentError as e:
        job.result.notes.append(str(e))
        for c in job.result.checks:
            c.message = c.message or "Not graded: the notebook could not be run."
    except Exception as e:  # a bug of ours: still a result, with the traceback for staff
        job.result.infrastructure_error = f"the grader failed ({type(e).__name__}: {e})"
        for c in job.result.checks:
            c.details = c.details or traceback.format_exc()
    finally:
        clean_up(job)
        job.result.seconds = time.monotonic() - start
    return job.result
