"""Grading as a pipeline of small steps that always ends with a result.

    find the lab -> check the sandbox -> check the cluster -> read the notebook
    -> restore the course's cells -> make a namespace -> make a working folder
    -> run the notebook (in a sandbox) and the checks (here) -> clean up (always)

A step that cannot go on raises StudentError (the submission is at fault: graded, with a
message) or InfrastructureError (we could not grade: the CLI exits non-zero and says why).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import hmac
import json
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import nbformat

from cluster import accounts
from cluster.accounts import Account
from cluster.clients import admin_client, admin_connection, anything_listens, bootstrap_servers, group_ids, in_namespace
from cluster.process import listening_ports
from cluster.safe_files import RefusedPath, read_bytes
from cluster.settings import ROOT, env, env_path, jars_cache

from selfcheck.checks import CheckFailed, Context, checks_for, policy, run_cleanups

from .cluster_watch import ClusterWatch
from .grader_only import GRADER_ONLY
from .kernel import CELL_TIMEOUT_S, TOTAL_TIMEOUT_S, KernelSession
from .results import CheckResult, GradingResult
from .sandbox import (
    NOT_GUARANTEED,
    Cgroups,
    Limits,
    Sandbox,
    bounds_off,
    exposed,
    give,
    method,
    new_uid,
    readable_by_all,
    sweep,
)

logger = logging.getLogger(__name__)
SOLUTIONS, RELEASE = ROOT / "solutions", ROOT / "labs"
CLUSTER_TIMEOUT_S = 15
# A submitted notebook larger than this is refused unread (README: Grading). The labs' own are
# under 100 kB; a student's with its outputs, plots included, a few hundred kB.
MAX_NOTEBOOK_BYTES = 8 * 2**20
# The course's grading secret: each lab's secret derives from it (lab_secret), and each
# grading's seed from its lab's secret, the student and a nonce of the grading's own, so a seed
# can be neither worked out from the course's code nor learned from an earlier grading.
# COURSE_GRADING_SECRET wins over the file, made on first use. A lab's Gradescope package holds
# in that file its lab's secret alone, marked LAB_SECRET_MARK: one package reveals no other lab's.
SECRET_FILE = ROOT / ".grading-secret"
LAB_SECRET_MARK = "lab-secret:"  # "lab-secret:<lab>:<its secret>"


class InfrastructureError(Exception):
    """We could not grade: not the student's fault."""


class StudentError(Exception):
    """The submission cannot be run at all (e.g. not a notebook); graded as zero, with why."""


def sources() -> Path:
    """Where grading takes each lab's test cells, locked cells and points from: solutions/, or
    where a package ships without solution code (Gradescope's), the released labs/ (nbgrader
    keeps those cells and their metadata as they are; a test checks they agree)."""
    return SOLUTIONS if SOLUTIONS.is_dir() else RELEASE


def source_notebook(lab: str) -> Path:
    return sources() / lab / f"{lab}.ipynb"


def course_labs() -> list[str]:
    """The course's labs, in order: every solutions/<lab>/<lab>.ipynb (the one list of them)."""
    return sorted(
        (p.name for p in sources().iterdir() if (p / f"{p.name}.ipynb").exists()), key=lambda name: (len(name), name)
    )  # lab11 after lab9


def grading_secret() -> bytes:
    """The course's secret (or, in a lab's Gradescope package, that lab's, as LAB_SECRET_MARK
    writes it: see lab_secret)."""
    if given := env("COURSE_GRADING_SECRET"):
        return given.encode()
    if not SECRET_FILE.exists():
        # Written whole, then linked into place: gradings started at once all read the same one.
        draft = SECRET_FILE.with_name(f"{SECRET_FILE.name}.{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(draft, SECRET_FILE)
        except FileExistsError:
            pass  # another grading made it first: that one counts
        finally:
            draft.unlink()
    return SECRET_FILE.read_text().strip().encode()


def lab_secret(lab: str) -> bytes:
    """One lab's secret: HMAC of the lab's name under the course's secret, so that what holds it
    (the lab's Gradescope package) gives that lab's seeds and no other's. A package's secret file
    holds it as it is, with the lab's name (packaged_secret): there, another lab is refused."""
    secret = grading_secret().decode()
    if secret.startswith(LAB_SECRET_MARK):
        owner, _, own = secret.removeprefix(LAB_SECRET_MARK).partition(":")
        if owner != lab or not own:
            raise InfrastructureError(
                f"this grader holds the grading secret of {owner or 'no lab'} alone, not of {lab}: "
                "grade each lab with its own package"
            )
        return own.encode()
    return hmac.new(secret.encode(), f"lab-secret/{lab}".encode(), hashlib.sha256).hexdigest().encode()


def packaged_secret(lab: str) -> str:
    """What a lab's Gradescope package keeps in its .grading-secret: the lab's secret alone."""
    return f"{LAB_SECRET_MARK}{lab}:{lab_secret(lab).decode()}"


def new_nonce() -> str:
    """A grading's own random part of its seed: no two gradings share one."""
    return secrets.token_hex(8)


def grading_seed(lab: str, student: str, nonce: str) -> int:
    """The seed of one grading: the lab's secret, the student and the grading's nonce. A new
    grading of the same work gets a new seed (so nothing a result showed can be typed into the
    next submission); a grading is replayed with its seed (--seed), kept in its staff details."""
    digest = hmac.new(lab_secret(lab), f"{lab}/{student}/{nonce}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:6], "big")


@dataclass
class Job:
    lab: str
    notebook: Path
    seed: int = 0
    nonce: str = ""  # the grading's own part of its seed ("" when the seed was given: a replay)
    sandbox: bool = True
    cell_timeout: float = CELL_TIMEOUT_S
    total_timeout: float = TOTAL_TIMEOUT_S
    bootstrap: str = ""  # where the student's code connects
    admin: dict = field(default_factory=dict)  # how the grader connects: the course's admin
    namespace: str = ""
    account: Account | None = None  # the grading's own Kafka user, allowed only the namespace
    parts: dict[str, float] = field(default_factory=dict)  # label -> points, from the source notebook
    source: nbformat.NotebookNode | None = None
    submission: nbformat.NotebookNode | None = None
    workdir: Path | None = None
    logdir: Path | None = None  # the grader's own: scripts' logs, out of the sandbox's reach
    private_dir: Path | None = None  # the grader's own, for checks' files (Context.private_dir)
    release_files: tuple[Path, ...] = ()
    result: GradingResult = field(init=False)  # made from the above; every step adds to it
    watch: ClusterWatch | None = None  # notices a broker going down while the submission is graded
    own: Any = None  # lab 7: the grading's own three-broker cluster (cluster.own)
    uid: int | None = None  # the user method's uid for this grading (None: bwrap; see sandbox.method())

    def __post_init__(self) -> None:
        self.result = GradingResult(lab=self.lab, notebook=str(self.notebook), seed=self.seed, nonce=self.nonce)


T = TypeVar("T")


def made(value: T | None, what: str) -> T:
    """A field of the Job an earlier step filled in (the steps run in order: STEPS)."""
    if value is None:
        raise InfrastructureError(f"the grader has no {what} yet: a step ran out of order (a bug of ours)")
    return value


def graded_parts(nb) -> dict[str, float]:
    """label -> points of every autograded test cell of an nbgrader notebook (a code cell);
    manual_parts are the instructor's."""
    return {
        c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"].get("points", 0))
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"
    }


def manual_parts(nb) -> dict[str, float]:
    """label -> points of every answer an instructor grades by hand (a markdown cell nbgrader
    marks grade and solution: the capstone's design note): never scored by the grader."""
    return {
        c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"].get("points", 0))
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "markdown"
    }


def test_label(cell) -> str | None:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta.get("grade_id") if meta.get("grade") and cell.get("cell_type") == "code" else None


# --- the steps -------------------------------------------------------------------------------
def find_lab(job: Job) -> None:
    path = source_notebook(job.lab)
    if not path.exists():
        raise InfrastructureError(f"unknown lab {job.lab!r}; the labs are {', '.join(course_labs())}")
    job.source = nbformat.read(path, as_version=4)
    job.parts = graded_parts(job.source)
    job.result.manual = manual_parts(job.source)
    checks = checks_for(job.lab)
    if set(checks) != set(job.parts):
        raise InfrastructureError(
            f"{job.lab}: the notebook's graded cells {sorted(job.parts)} and the "
            f"registered checks {sorted(checks)} differ"
        )
    job.result.checks = [CheckResult(label, points) for label, points in job.parts.items()]


def check_sandbox(job: Job) -> None:
    if not job.sandbox:
        job.result.notes.append(NOT_GUARANTEED)
        return
    kind, why = method()
    if kind is None:
        raise InfrastructureError(
            f"student code cannot be sandboxed here: {why} To grade anyway, without the "
            "sandbox's guarantees, pass --no-sandbox."
        )
    if kind == "user":
        readable = exposed(env_path("COURSE_CLUSTER_HOME"))
        if readable:
            raise InfrastructureError(
                f"bubblewrap cannot be used here ({why}), and under the other sandbox, a user of its own, "
                f"student code could read {', '.join(map(str, readable))}. Make them private (chmod o-rwx), or "
                "grade with the Gradescope package (python -m autograder gradescope build), which has none of them."
            )
        if jars_cache().exists() and not readable_by_all(jars_cache()):
            raise InfrastructureError(
                f"student code runs as a user of its own here ({why}), who cannot read the jars in {jars_cache()} "
                "(a folder on the way is private). Set COURSE_JARS_CACHE to a folder all users can read and run "
                "`python -m cluster jars` (the Gradescope package does)."
            )
        job.uid = new_uid()
        job.result.staff.append(f"sandbox: an unprivileged user, uid {job.uid} (bubblewrap: {why})")


def check_cluster(job: Job) -> None:
    try:
        job.bootstrap, job.admin = bootstrap_servers(), admin_connection()
    except ValueError as e:
        raise InfrastructureError(str(e)) from None
    if not anything_listens(job.admin["bootstrap_servers"]):
        raise InfrastructureError(
            f"the Kafka cluster at {job.admin['bootstrap_servers']} does not answer (nothing "
            "listens there). Start it with `python -m cluster up`."
        )
    # The brokers' processes first: one killed just now is still listed by the controller, and a
    # client may be refused by it before that; either way this names the broker.
    watch = ClusterWatch(job.admin).start()
    if watch.problem:
        watch.stop()
        raise InfrastructureError(
            f"{watch.problem}; see `python -m cluster status`, and grade it again "
            "once `python -m cluster up` says the cluster works."
        )
    job.watch = watch
    try:
        with admin_client("grader", job.admin, request_timeout_ms=CLUSTER_TIMEOUT_S * 1000) as admin:
            brokers = [b for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")]
    except Exception as e:
        raise InfrastructureError(
            f"the Kafka cluster at {job.bootstrap} does not answer ({type(e).__name__}: {e}). "
            "Start it with `python -m cluster up`."
        ) from None
    if len(brokers) < 3:
        raise InfrastructureError(
            f"only {len(brokers)} of 3 brokers are up at {job.bootstrap}; see `python -m cluster status`."
        )


def read_submission(job: Job) -> None:
    """The submission, bounded before it is parsed: a notebook over MAX_NOTEBOOK_BYTES (or a link,
    a pipe) is refused with an ordinary result, not read into the grader's memory."""
    if job.submission is not None:  # given in memory (nbgrader's preprocessor): the same bound, on its text
        if len(nbformat.writes(job.submission).encode()) > MAX_NOTEBOOK_BYTES:
            job.submission = None
            raise StudentError(
                f"the notebook was not graded: it is larger than {MAX_NOTEBOOK_BYTES // 2**20} MB "
                "(a lab's is well under that): clear large outputs (Edit > Clear All Outputs), save, "
                "and submit it again."
            )
        return
    path = job.notebook.absolute()
    try:
        data = read_bytes(path.parent, path.name, MAX_NOTEBOOK_BYTES)
    except RefusedPath as e:
        raise StudentError(
            f"{job.notebook.name} was not read: it {e.why}. A lab's notebook is well under "
            f"{MAX_NOTEBOOK_BYTES // 2**20} MB: clear large outputs (Edit > Clear All Outputs), "
            "save, and submit it again (the file itself, not a link)."
        ) from None
    if data is None:
        raise InfrastructureError(f"the notebook {job.notebook} does not exist")
    try:
        job.submission = nbformat.reads(data.decode(), as_version=4)
        nbformat.validate(job.submission)
    except Exception as e:
        raise StudentError(
            f"{job.notebook.name} is not a readable Jupyter notebook ({type(e).__name__}: {e}). "
            "Download it again from JupyterLab (File > Download) and resubmit."
        ) from None


def restore_tests(job: Job) -> None:
    """Put the course's own cells back, as nbgrader does: every test cell and every locked
    cell gets the course's source and type, so edits to them count for nothing. A part counts
    once: from the course's own copy of its test cell (same cell id), else its first copy;
    other copies are not run. Only the course's own observation cells keep their "demo" tag."""
    source, submission = made(job.source, "course notebook"), made(job.submission, "submission")
    ours = course_cells(source)
    demos = {c.source for c in source.cells if "demo" in c.metadata.get("tags", [])}
    for cell in submission.cells:
        if cell.cell_type == "code":
            cell.outputs = []
        tags = cell.get("metadata", {}).get("tags", [])
        if "demo" in tags and cell.source not in demos:
            tags.remove("demo")
    copies = drop_copies(source, submission)
    edited = []
    for gid, cells in copies.items():
        course, keep = ours[gid], cells[0]
        if keep.source != course.source or keep.cell_type != course.cell_type:
            edited.append(gid)
        keep.cell_type, keep.source = course.cell_type, course.source
        keep.metadata["nbgrader"] = dict(course.metadata["nbgrader"])
        if course.cell_type == "code":
            keep.setdefault("outputs", [])
            keep.setdefault("execution_count", None)
        if len(cells) > 1:
            job.result.notes.append(
                f"The cell {gid} appears {len(cells)} times; only the course's own copy "
                "counted, the others were not run."
            )
    if edited:
        job.result.notes.append(f"The course's cells {sorted(edited)} were edited; the course's versions were used.")
    missing = [c for c in source.cells if test_label(c) and test_label(c) not in copies]
    if missing:  # put back at the end, where they check the kernel as the notebook left it
        submission.cells.extend(copy.deepcopy(missing))
        job.result.notes.append(
            f"Test cells {[test_label(c) for c in missing]} were missing from the notebook; "
            "they were put back at the end."
        )


def drop_copies(source, submission) -> dict[str, list]:
    """Where the submission has several cells with one of the course's restored ids (a test
    cell pasted again, say), keep the course's own (same cell id), else the first, and turn the
    others into a markdown note: they are neither run nor graded. Returns id -> [kept cell,
    the copies]."""
    ours = course_cells(source)
    found: dict[str, list] = {}
    for cell in submission.cells:
        if (gid := grade_id(cell)) is not None and gid in ours:
            found.setdefault(gid, []).append(cell)
    for gid, cells in found.items():
        keep = next((c for c in cells if c.get("id") == ours[gid].get("id")), cells[0])
        for cell in cells:
            if cell is not keep:
                cell.cell_type, cell.source, cell.metadata = "markdown", f"(a copy of the course's cell {gid})", {}
                cell.pop("outputs", None)
                cell.pop("execution_count", None)
        cells.remove(keep)
        cells.insert(0, keep)
    return found


def course_cells(source) -> dict:
    """grade id -> the course's cell, for every cell that grading puts back."""
    return {grade_id(c): c for c in source.cells if grade_id(c) and is_restored(c)}


def grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def is_restored(cell) -> bool:
    """The cells nbgrader puts back when it grades: test cells and locked cells (not answers)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("grade") and not meta.get("solution")) or bool(meta.get("locked") and not meta.get("solution"))


def make_namespace(job: Job) -> None:
    """A namespace of the grading's own and a Kafka user for it that the brokers allow that
    namespace and nothing else: what the student's code may do on the cluster is the brokers'
    decision, whatever client or process it uses."""
    job.namespace = f"grade-{job.lab}-{secrets.token_hex(4)}"
    job.result.namespace = job.namespace
    account = Account(job.namespace, accounts.new_password())
    with admin_client("grader", job.admin, request_timeout_ms=CLUSTER_TIMEOUT_S * 1000) as admin:
        accounts.grant(admin, account, job.namespace)
    job.account = account


def make_workdir(job: Job) -> None:
    job.workdir = Path(tempfile.mkdtemp(prefix=f"grade-{job.lab}-"))
    job.logdir = Path(tempfile.mkdtemp(prefix=f"grade-{job.lab}-logs-"))
    # Folders in it are made by the grader and may be handed to one sandboxed process; the
    # sandbox's user may pass through (the user method) but not make or list anything here.
    job.private_dir = Path(tempfile.mkdtemp(prefix=f"grade-{job.lab}-private-"))
    job.private_dir.chmod(0o711)
    job.release_files = tuple(copy_release(job.lab, job.workdir))  # read-only inside the sandbox
    for sub in (".home", ".tmp"):
        (job.workdir / sub).mkdir()  # grader-only: a fresh folder, before any student code ran
    if job.uid is not None:
        give(job.workdir, job.uid)


def start_own_cluster(job: Job) -> None:
    """A lab whose checks break brokers (lab 7) gets a three-broker cluster of its own, started
    here outside the sandbox, with the grading's user on it: nothing else is touched when its
    brokers are killed, and the student's code can neither start nor stop them."""
    if not policy(job.lab).own_cluster:
        return
    from cluster import own

    try:
        job.own = own.start(Path(tempfile.mkdtemp(prefix=f"grade-{job.lab}-own-")), job.namespace, echo=lambda _: None)
        job.own.throwaway = True
    except Exception as e:
        raise InfrastructureError(f"the grading's own cluster did not start ({type(e).__name__}: {e})") from None


def kernel_env(job: Job) -> dict[str, str]:
    """The whole environment of the student's code: where Kafka is and its namespace, folders
    inside its working folder; no secrets, no seed, nothing of other submissions."""
    keep = ("LANG", "LC_ALL", "JAVA_HOME")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    # Spark's connector jars, from the grader's cache (read-only in the sandbox): not from a
    # cache under the sandbox's own HOME, which is empty and would download them again.
    env["COURSE_JARS_CACHE"] = str(jars_cache())
    venv_bin = str(Path(sys.executable).parent)
    workdir, account = made(job.workdir, "working folder"), made(job.account, "Kafka user")
    home = workdir / ".home"
    env.update(
        PATH=f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        VIRTUAL_ENV=str(Path(venv_bin).parent),
        # the course's own packages (cluster, the self-checks) from the course folder being
        # graded, whatever the environment's install points at (on a hub, the student kit's)
        PYTHONPATH=str(ROOT),
        LAB_NAMESPACE=job.namespace,
        KAFKA_BOOTSTRAP_SERVERS=job.bootstrap,
        KAFKA_USERNAME=account.username,
        KAFKA_PASSWORD=account.password,
        HOME=str(home),
        TMPDIR=str(workdir / ".tmp"),
        USER="student",
        MPLCONFIGDIR=str(home),
        MPLBACKEND="agg",
        PYTHONDONTWRITEBYTECODE="1",
        GRPC_VERBOSITY="ERROR",
        COURSE_SPARK_UI="off",  # no web UI: other gradings' code shares the network
        PYTHONHASHSEED="0",  # a submission that (wrongly) uses hash() gets the same score every time
        IPYTHONDIR=str(home / ".ipython"),
        JUPYTER_PLATFORM_DIRS="1",
    )
    if job.own is not None:  # where the grading's own cluster is, and the grading user's login on it
        from cluster import own

        env[own.ENV] = json.dumps(
            {
                "bootstrap_servers": job.own.bootstrap_servers,
                "username": job.own.account.username,
                "password": job.own.account.password,
                "metrics": job.own.metrics_urls,  # each broker's metrics page (lab 14)
            }
        )
    return env


def run_notebook_and_checks(job: Job) -> None:
    """Run the notebook in a sandboxed kernel; at each test cell, freeze the kernel and run the
    part's check here, in the grader's process. Each part is checked once."""
    by_label = {c.label: c for c in job.result.checks}
    checks = checks_for(job.lab)
    done: set[str] = set()
    scratch: dict[str, Any] = {}
    cleanup: list = []
    workdir, account = made(job.workdir, "working folder"), made(job.account, "Kafka user")
    limits = sandbox_limits(job.lab)
    cgroups = Cgroups(job.namespace, limits, parent=env("COURSE_CGROUP_PARENT")) if job.sandbox else None
    if cgroups and (off := bounds_off(cgroups)):
        job.result.staff.append(off)
    sandbox = Sandbox(
        workdir, readonly=job.release_files, limits=limits, enabled=job.sandbox, cgroups=cgroups, uid=job.uid
    )
    kernel_vars = kernel_env(job)  # the kernel's, and the student's scripts' that checks run

    def run_one(session: KernelSession, label: str) -> None:
        if label in done or label not in by_label:
            return
        done.add(label)
        res = by_label[label]
        ctx = Context(
            job.lab,
            label,
            session,
            job.namespace,
            job.admin,
            job.seed,
            workdir=workdir,
            scratch=scratch,
            cleanup=cleanup,
            sandbox=sandbox,
            env=kernel_vars,
            logdir=job.logdir,
            private_dir=job.private_dir,
            student_user=account.username,
            own=job.own,
            kernel_ports=lambda: listening_ports(session.jail.processes()),
            staff=job.result.staff,
            grader_only=GRADER_ONLY,
        )
        start = time.monotonic()
        try:
            with session.paused() if checks[label].pause_kernel else contextlib.nullcontext():
                detail = checks[label].func(ctx)
            res.passed, res.score = True, res.max_score
            res.message = "Passed: " + checks[label].title + (f" ({detail})" if detail else "")
        except CheckFailed as e:
            res.message = bounded(str(e))
        except Exception as e:  # a check that crashed: the student sees that, staff the traceback
            res.message = f"The check could not finish ({type(e).__name__}); course staff can see why."
            res.details = bounded(f"{type(e).__name__}: {e}\n{traceback.format_exc()}", 20_000)
        finally:
            ctx.close()
        res.seconds = time.monotonic() - start
        logger.info("%s: %s in %.2f s", label, "passed" if res.passed else "failed", res.seconds)

    try:
        # A lab may need more than the given limit for its slowest cell (lab 9 starts Spark).
        cell_timeout = max(job.cell_timeout, policy(job.lab).slowest_cell_s)
        with KernelSession(job.submission, sandbox, kernel_vars, cell_timeout, job.total_timeout) as session:
            log = session.run(lambda index, label: run_one(session, label), test_label)
            try:
                for label in by_label:
                    run_one(session, label)
            finally:
                for failure in run_cleanups(cleanup):
                    job.result.notes.append(f"(a clean-up step failed: {failure})")
    finally:
        if cgroups:
            cgroups.remove()
    job.result.graded_notebook = job.submission
    job.result.notes.extend(log.notes)
    if log.errors:
        first = min(log.errors)
        job.result.notes.append(
            f"{len(log.errors)} cell(s) raised an error; the first was cell {first + 1}: {log.errors[first]}"
        )


def bounded(text: str, limit: int = 3000) -> str:
    """A message cut to `limit` characters: what the student's code printed can be anything."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit:,} more characters)"


def clean_up(job: Job) -> None:
    """Delete the grading's Kafka user (first: nothing it left running can act after this),
    the namespace's topics and groups, the grading's own cluster, and the working folder."""
    if job.uid is not None:  # the user method: whatever of the grading's user still runs
        leftovers = sweep(job.uid)
        if leftovers:
            job.result.staff.append(f"{leftovers} process(es) of the grading's user outlived its sandboxes; killed")
    if job.own is not None:
        home = job.own.cluster.cfg.home
        try:
            job.own.down()
        except Exception as e:
            job.result.notes.append(f"(the grading's own cluster did not stop cleanly: {type(e).__name__}: {e})")
        shutil.rmtree(home, ignore_errors=True)
    if job.namespace and job.admin:
        try:
            remove_namespace(job.admin, job.namespace, job.account.username if job.account else None)
        except Exception as e:
            job.result.notes.append(f"(clean-up of {job.namespace} incomplete: {type(e).__name__}: {e})")
    for folder in (job.workdir, job.logdir, job.private_dir):
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def copy_release(lab: str, folder: Path) -> list[Path]:
    """The lab's release files beside its notebook (scripts, data), copied into `folder`."""
    release, copied = RELEASE / lab, []
    for item in release.iterdir() if release.exists() else []:
        if item.suffix != ".ipynb" and item.name != ".ipynb_checkpoints":
            (shutil.copytree if item.is_dir() else shutil.copy)(item, folder / item.name)
            copied.append(folder / item.name)
    return copied


def remove_namespace(connection: dict, namespace: str, user: str | None) -> None:
    """Delete a namespace's user (first: nothing it left running can act after this), with its
    ACLs, then the namespace's groups and topics. Groups first: Kafka 4.3 does not answer the
    deletion of a share group whose topic is already gone (measured: the request times out)."""
    with admin_client("grader", connection, request_timeout_ms=10_000) as admin:
        if user:
            accounts.revoke(admin, user)
        mine = namespace_groups(admin, namespace)
        if mine:
            admin.delete_groups(mine)
        topics = [t for t in admin.list_topics() if in_namespace(namespace, t)]
        if topics:
            admin.delete_topics(topics)


def namespace_groups(admin, namespace: str) -> list[str]:
    """The consumer groups of a namespace."""
    return [g for g in group_ids(admin) if in_namespace(namespace, g)]


STEPS = (
    find_lab,
    check_sandbox,
    check_cluster,
    read_submission,
    restore_tests,
    make_namespace,
    make_workdir,
    start_own_cluster,
    run_notebook_and_checks,
)
LIMITS = Limits()


def sandbox_limits(lab: str) -> Limits:
    """The sandbox's limits for a lab: the course's, or what its checks module needs (lab 9 runs
    two Spark drivers, in the kernel and in the job, a hundred threads or more each)."""
    return replace(LIMITS, processes=policy(lab).sandbox_processes or LIMITS.processes)


def grade_notebook(
    lab: str,
    notebook: Path | nbformat.NotebookNode,
    seed: int | None = None,
    student: str = "",
    cell_timeout: float = CELL_TIMEOUT_S,
    total_timeout: float = TOTAL_TIMEOUT_S,
    sandbox: bool = True,
) -> GradingResult:
    """Grade one submission (a path, or a notebook already read). Always returns a result;
    never raises for a bad submission. The seed is a new secret one, made from the lab's secret,
    the student and a nonce of this grading's own, unless given (to replay a grading)."""
    given = notebook if isinstance(notebook, nbformat.NotebookNode) else None
    path = Path("submission.ipynb") if given is not None else Path(notebook)
    job = Job(
        lab,
        path,
        seed=seed or 0,
        sandbox=sandbox,
        cell_timeout=cell_timeout,
        total_timeout=total_timeout,
        submission=given,
    )
    start = time.monotonic()
    try:
        if seed is None:  # inside the try: a lab's package asked for another lab's seed is a result too
            job.nonce = job.result.nonce = new_nonce()
            job.seed = job.result.seed = grading_seed(lab, student, job.nonce)
        logger.info("%s %s: seed %d%s", lab, path.name, job.seed, f" (nonce {job.nonce})" if job.nonce else " (given)")
        for step in STEPS:
            began = time.monotonic()
            step(job)
            logger.info("%s %s: %s took %.2f s", lab, path.name, step.__name__, time.monotonic() - began)
    except InfrastructureError as e:
        job.result.infrastructure_error = str(e)
    except StudentError as e:
        job.result.notes.append(str(e))
        for c in job.result.checks:
            c.message = c.message or "Not graded: the notebook could not be run."
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (see cluster/cli.py): cleaned up, not scored
        job.result.infrastructure_error = f"the grading was interrupted ({e or 'Ctrl-C'}); grade it again"
    except Exception as e:  # a bug of ours: still a result, with the traceback for staff
        job.result.infrastructure_error = f"the grader failed ({type(e).__name__}: {e})"
        for c in job.result.checks:
            c.details = c.details or traceback.format_exc()
    finally:
        void_if_the_cluster_failed(job)
        began = time.monotonic()
        clean_up(job)
        logger.info("%s %s: clean_up took %.2f s", lab, path.name, time.monotonic() - began)
        job.result.seconds = time.monotonic() - start
    return job.result


def void_if_the_cluster_failed(job: Job) -> None:
    """A grading during which a broker went down is not valid: its scores could be the
    cluster's fault. It gets no score and an infrastructure error (grade it again)."""
    problem = job.watch.stop() if job.watch else ""
    if problem:
        if job.result.infrastructure_error:  # e.g. a client of ours that lost that broker: the cause comes first
            job.result.notes.append(f"(then: {job.result.infrastructure_error})")
        job.result.infrastructure_error = f"{problem}, so this grading does not count: grade it again."
        for c in job.result.checks:
            c.score, c.passed = 0.0, False
            c.message = f"Not graded: {problem} (not your work's fault); it will be graded again."
