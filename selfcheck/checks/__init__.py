"""The check library: one check per graded part, named by its label ("lab1-q3").

A check looks at the live cluster and at what the student's code returns, and fails with
a message a student can act on: what was expected, what was found, a hint.

The same check runs in two places:
- in the student's kernel, from an nbgrader test cell: `grade("lab1-q3")` (a self-check
  while working, and nbgrader's points);
- in the grader's own process, after the notebook ran (`python -m autograder grade`): it
  reads values out of the kernel, but computes the truth and the verdict itself, so code
  in the notebook cannot change the score it reports.

The rule every check follows: its truth is data the notebook could not know when it ran.
Records, keys, timestamps, amounts and group states come from the grading's seed (ctx.rng),
on topics the grading's user may only read (kafka_state.graders_topic, ctx.protect), and the
student's functions are called on them; the public dataset and the notebook's own printouts
are never the only truth, so an answer copied from either fails. A value about the student's
own run is checked against the brokers' or the processes' record of that run, not against
what the run reports about itself. A step a check cannot carry out fails the part, saying why;
it never lets the part pass untested.
"""

from __future__ import annotations

import importlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cluster.clients import admin_client, qualify

from ..errors import (
    CheckFailed,
    MissingAnswer,
    NotPlainValue,
    NotWritten,
    RaisedInKernel,
    answer_name,
)  # the checks' vocabulary
from ..plain import NotPlain, plain

DEFAULT_SEED = 6544  # self-checks in a student's kernel; grading uses the course's secret seed


def expect(ok: bool, what: str, expected: Any = None, found: Any = None, hint: str = "") -> None:
    if not ok:
        raise CheckFailed(what, expected, found, hint)


def expect_equal(found: Any, expected: Any, what: str, hint: str = "") -> None:
    expect(found == expected, what, expected, found, hint)


PREDICTIONS_RULE = (
    "a prediction earns its points by being made, in the form asked, before the demo runs; "
    "whether it was right is reported, not scored"
)


def prediction(ctx: "Context", name: str, well_formed: Callable[[Any], bool], form: Any, what: str) -> Any:
    """The notebook's prediction `name`, which must be well formed (a CheckFailed says `what` it
    should be, in `form`). Only its form is scored: a value can be changed after the demo has
    shown the answer, so scoring whether it is right would reward exactly that."""
    value = ctx.sub.value(name)
    expect(
        value is not None and well_formed(value),
        f"{name} should be {what}",
        expected=form,
        found=value,
        hint="Write your prediction in the cell before the demo, replacing None, then run the demo. "
        f"({PREDICTIONS_RULE[0].upper() + PREDICTIONS_RULE[1:]}.)",
    )
    return value


def predicted_booleans(ctx: "Context", name: str, truth: dict[str, bool], what: str) -> dict:
    """A prediction of True or False for each key of `truth` (the notebook's dict `name`, no other
    keys), checked for its form only (see prediction)."""
    return prediction(
        ctx,
        name,
        lambda v: isinstance(v, dict) and set(v) == set(truth) and all(isinstance(x, bool) for x in v.values()),
        "{" + ", ".join(f'"{k}": True or False' for k in truth) + "}",
        what,
    )


def shown_in_kernel(ctx: "Context", expr: str) -> Any:
    """What a demo left in the kernel (`expr`), for a prediction's feedback; None where the demo has
    not run (a grading leaves demos out)."""
    try:
        return ctx.sub.value(expr)
    except CheckFailed:
        return None


def prediction_feedback(name: str, predicted: Any, shown: Any, why: str) -> str:
    """What the part's result says about a prediction: right, or what the demo showed instead
    (never part of the score)."""
    if predicted == shown:
        return f"{name}: right, the demo showed the same"
    return f"{name}: you predicted {predicted!r}, the demo showed {shown!r} (not scored). {why}"


class Submission(Protocol):
    """What a check may ask of the student's code."""

    def value(self, expr: str, timeout: float = ...) -> Any:
        """The value of a Python expression in the notebook (literals only: numbers,
        strings, bytes, lists, tuples, dicts, sets, None); `timeout`: how long it may take."""


class LocalSubmission:
    """The notebook's own globals, for checks run inside the student's kernel."""

    def __init__(self, user_ns: dict):
        self.ns = user_ns

    def value(self, expr: str, timeout: float | None = None) -> Any:  # in the kernel: no time limit
        try:
            found = eval(expr, self.ns)  # the student's own kernel
        except NameError as e:
            raise MissingAnswer(answer_name(expr), str(e)) from None
        except NotImplementedError:
            raise NotWritten(expr) from None
        except Exception as e:
            raise RaisedInKernel(expr, type(e).__name__, str(e)[:500]) from None
        try:
            return plain(found)  # numpy, pandas, Counter ...: judged by value, as when graded
        except NotPlain as e:
            raise NotPlainValue(expr, str(e)) from None


@dataclass
class Context:
    """Everything a check gets: the submission, the cluster, and a seeded random source."""

    lab: str
    label: str
    sub: Submission
    namespace: str
    # kafka-python settings of whoever the check reads as: the course's admin when grading, the
    # student's own login in a self-check (cluster.clients.connection()).
    kafka: dict
    seed: int = DEFAULT_SEED
    workdir: Path = field(default_factory=Path.cwd)  # the notebook's folder
    # Shared by the checks of one grading: results one check leaves for the next, and what
    # to undo at the end (processes it started).
    scratch: dict = field(default_factory=dict)
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    # How the student's scripts run: in the grading sandbox with the kernel's environment
    # (None: as plain processes, for a self-check in the student's own kernel).
    sandbox: Any = None
    env: dict[str, str] | None = None
    logdir: Path | None = None  # the grader's own folder for scripts' logs (outside the sandbox)
    # A folder of the grader's for files a check makes and reads back (lab 13's Connect workers):
    # outside the working folder, so nothing the student's code left can be in it; only a process
    # the check starts with ctx.sandbox.with_writable(...) may write there. None in a self-check.
    private_dir: Path | None = None
    student_user: str | None = None  # the grading's Kafka user, whose rights protect() narrows
    own: Any = None  # lab 7: the cluster of one's own that the check may break (cluster.own)
    # The TCP ports the grading's kernel (and whatever it started) listens on: a port the student
    # names must be one of these, not another grading's or a program's outside the sandbox.
    # None in a self-check (the student's own machine: nobody else's server to borrow).
    kernel_ports: Callable[[], set[int]] | None = None
    staff: list[str] | None = None  # notes for course staff only (the grading's hidden details)
    # What only the course's grader holds, by name (autograder/grader_only.py: lab 13's own connector
    # settings, which would be lab13-q1's answer in the kit). Empty in a self-check.
    grader_only: dict[str, Any] = field(default_factory=dict)
    rng: random.Random = field(init=False)
    _admin: Any = field(default=None, init=False, repr=False)

    def __post_init__(self):
        self.rng = random.Random(f"{self.seed}:{self.label}")

    def topic(self, name: str) -> str:
        return qualify(self.namespace, name)

    def group(self, name: str) -> str:
        return qualify(self.namespace, name)

    @property
    def admin(self):
        if self._admin is None:
            self._admin = admin_client(f"grader-{self.namespace}", self.kafka, request_timeout_ms=15_000)
        return self._admin

    def protect(self, topics=(), groups=()) -> None:
        """Make what the check made (a topic it filled, a group it set up) read-only for the
        student's user, so the student's code cannot change the check's truth while it runs.
        When grading, the grading's user is deleted with all its ACLs at the end; in a self-check
        (student_user None) there is nobody to protect against."""
        if self.student_user:
            from cluster import accounts

            accounts.protect(self.admin, self.student_user, topics, groups)

    def close(self):
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def finish(self):
        """Undo what the checks started (called once, after the last check)."""
        run_cleanups(self.cleanup)
        self.close()


def partitions_wrong(truth: dict, got, otherwise: str = "partitions the topic does not have") -> str:
    """The end of a per-partition answer's message: which partitions are wrong or missing, named
    without the grader's values for them (the truth is the grader's, a resubmission must not read
    it), or `otherwise` when every partition of the truth is right (so extra ones differ)."""
    wrong = sorted(p for p in truth if not isinstance(got, dict) or got.get(p) != truth[p])
    return f": partitions {wrong} wrong or missing" if wrong else f": {otherwise}"


def run_cleanups(cleanup: list[Callable[[], None]]) -> list[str]:
    """Run every clean-up, last registered first, even when one fails; say which failed."""
    failed = []
    while cleanup:
        step = cleanup.pop()
        try:
            step()
        except Exception as e:
            failed.append(f"{getattr(step, '__name__', 'clean-up')}: {type(e).__name__}: {e}")
    return failed


@dataclass
class Check:
    label: str
    func: Callable[[Context], str | None]  # what it returns: more to say (a prediction's feedback)
    title: str
    # When grading, the student's kernel is frozen while its check runs, so nothing the student
    # left running can act meanwhile (write a file the check reads, join a group it watches).
    # A check that needs the kernel running says why (lab 1's calls the gRPC server living in
    # the kernel; lab 9's run Spark queries of the kernel's).
    kernel_runs: str = ""

    @property
    def pause_kernel(self) -> bool:
        return not self.kernel_runs


REGISTRY: dict[str, Check] = {}


def check(label: str, kernel_runs: str = ""):
    """Register a check for one graded part; its docstring's first line is its title.
    kernel_runs: why the student's kernel must keep running during this check (it is frozen
    otherwise, the default)."""

    def register(func):
        REGISTRY[label] = Check(label, func, (func.__doc__ or label).strip().splitlines()[0], kernel_runs.strip())
        return func

    return register


def lab_of(label: str) -> str:
    return label.split("-")[0]


def checks_module(lab: str):
    return importlib.import_module(f"selfcheck.checks.{lab}")


@dataclass(frozen=True)
class LabPolicy:
    """How one lab's gradings run, declared once in its checks module (`POLICY = LabPolicy(...)`;
    a lab without one takes these defaults) and read through policy(lab)."""

    checks_budget_s: float = 120  # its checks' time, all together (part of a grading's deadline)
    slowest_cell_s: float = 0  # its slowest cell, when longer than the grader's cell timeout
    sandbox_processes: int | None = None  # its sandbox's process limit, when other than the grader's
    # Cores one grading keeps busy on average, its own processes and the brokers' work for it
    # (measured: the self-test's line per grading gives the CPU seconds of everything it started
    # and its wall time). The self-test and grade-all admit gradings while their cores fit the
    # machine's (autograder/pool.py); gradings_at_once caps a lab further, for memory. The default
    # is a light lab's: its solution alone used 0.11 (lab 2) to 0.44 (lab 1) cores of its own
    # processes, and the brokers about 0.1 more (November 2026, 2 cores).
    grading_cores: float = 0.3
    gradings_at_once: int | None = None  # at most this many of its gradings at once (self-test, grade-all)
    own_cluster: bool = False  # its checks break a cluster of the grading's own (lab 7)
    postgres: bool = (
        False  # its checks start a PostgreSQL of their own (the CDC lab): Gradescope's setup.sh installs it
    )


def policy(lab: str) -> LabPolicy:
    found = vars(checks_module(lab)).get("POLICY", LabPolicy())
    if not isinstance(found, LabPolicy):
        raise TypeError(f"selfcheck.checks.{lab}.POLICY is a {type(found).__name__}, not a LabPolicy")
    return found


def checks_for(lab: str) -> dict[str, Check]:
    checks_module(lab)
    return {k: v for k, v in REGISTRY.items() if lab_of(k) == lab}


def run_check(label: str, ctx: Context) -> str | None:
    """Run one check; CheckFailed on a wrong answer. What it returns says more (a prediction's
    feedback, what was measured), or None."""
    spec = checks_for(lab_of(label)).get(label)
    if spec is None:
        raise KeyError(f"no check is registered for {label}")
    return spec.func(ctx)


def grade(label: str, user_ns: dict | None = None) -> None:
    """Called by a notebook's test cell: run the check for `label` against this notebook
    and the live cluster. Prints one line when it passes; raises CheckFailed when not."""
    from cluster.clients import connection, namespace

    if user_ns is None:
        from IPython import get_ipython

        user_ns = get_ipython().user_ns
    ctx = Context(lab_of(label), label, LocalSubmission(user_ns), namespace(), connection(), DEFAULT_SEED)
    if policy(ctx.lab).own_cluster:  # lab 7: the student's own cluster, to break
        from cluster.own import own_cluster

        ctx.own = own_cluster()
    start = time.monotonic()
    try:
        detail = run_check(label, ctx)
    finally:
        ctx.finish()
    print(
        f"{label} passed ({time.monotonic() - start:.1f} s): {REGISTRY[label].title}"
        + (f"\n  {detail}" if detail else "")
    )
