"""Run a script the student wrote (with %%writefile) as separate processes, the way it would
run in production: each in a grading sandbox of its own, with deadlines, and killed if it
overstays. A planned crash "after S seconds" is a SIGKILL of the whole sandbox from here,
so the script cannot see it coming or defuse it.

What runs is the grader's own copy of the student's Python files (`frozen`): taken file by file
the first time a check runs a script, read-only, and used by every later run and judgement of
the grading, whatever the kernel writes afterwards (a change is noted for staff). Each run is an
isolated interpreter (`-P`: the working folder is not on its path until the harness, loaded from
the course, puts the copy there) with a HOME and TMPDIR of its own, new and empty."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from cluster.safe_files import RefusedPath, kind, list_dir, read_bytes, tail_text
from cluster.scripts import Script
from cluster.waiting import wait_for

from . import CheckFailed, Context, expect

SCRIPT_DEADLINE_S = 90
MAX_LOG_CHARS = 200_000  # of a script's output, kept for messages
CRASHED = -signal.SIGKILL  # the exit status of a run the grader (or the harness) killed
SANDBOX_KILLED = 128 + signal.SIGKILL  # bwrap's exit status when the program inside died of SIGKILL
MAX_FROZEN_FILES = 64  # top-level Python files of the notebook's folder the grader copies
MAX_FROZEN_BYTES = 2 * 2**20  # each (a script and the modules it imports are kilobytes)


class ScriptRun(Script):
    """A run of the grader's copy of a student's script: cluster.scripts.Script (its process, its
    log, why it ended), with the sandbox's exit status for a kill read as the kill it was."""

    def output(self) -> str:
        return tail_text(self.log.parent, self.log.name, MAX_LOG_CHARS)

    def exit_code(self) -> int | None:
        code = self.proc.poll()
        return -signal.SIGKILL if code == SANDBOX_KILLED else code


def ended_early(run: ScriptRun, before: str = "", hint: str = "", found: str | None = None) -> CheckFailed:
    """The failure of a script that ended by itself while the check needed it running (or needed
    it to succeed): how and why it ended (run.why), `before` what it had done, and a hint (the
    template's own when it is not written yet). Nothing of its output is trusted but as a message."""
    if run.not_written():  # the template: what else it did or printed does not matter
        found = None
        hint = f"Replace `raise NotImplementedError()` in the %%writefile {run.name} cell with your code, run that cell, then this test."
    return CheckFailed(run.why(before), found=found, hint=hint)


def read_student_file(root: Path, relative: str | Path, limit: int = 16 * 2**20) -> str | None:
    """A file the student's code wrote, at root/relative, read safely by the grader
    (cluster.safe_files): None if it does not exist; refused if a link is on its way (to the
    grader's secrets, say), if it is not a plain file (a FIFO that would block the grader, a
    device) or larger than `limit`."""
    name = Path(relative).name
    try:
        data = read_bytes(root, relative, limit)
    except RefusedPath as e:
        raise CheckFailed(
            f"{name} could not be read: it {e.why}",
            hint="Write it with open(...) as an ordinary file in the notebook's folder; links and "
            "pipes are not read, nor files of many megabytes.",
        ) from None
    except OSError as e:
        raise CheckFailed(
            f"{name} could not be read ({e.strerror})", hint="Write it as an ordinary file in the notebook's folder."
        ) from None
    return None if data is None else data.decode(errors="replace")


@dataclass
class Frozen:
    """The grading's copy of the student's Python files: name -> sha256 of what was copied."""

    folder: Path
    digests: dict[str, str] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)  # names the kernel rewrote after the copy

    def digest(self) -> str:
        """One digest of the whole copy."""
        return hashlib.sha256("\0".join(f"{n}\0{d}" for n, d in sorted(self.digests.items())).encode()).hexdigest()


def grader_folder(ctx: Context, prefix: str) -> Path:
    """A new folder of the grader's (in its private folder when grading; a temporary one in a
    self-check), removed when the grading ends."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=ctx.private_dir))
    folder.chmod(0o755)  # grader-only: just made by mkdtemp, in the grader's private folder
    ctx.cleanup.append(lambda: shutil.rmtree(folder, ignore_errors=True))  # grader-only: the same
    return folder


def frozen(ctx: Context) -> Frozen:
    """The grader's copy of every top-level Python file of the notebook's folder (the scripts
    and the modules they import), added to once per file: a file is copied the first time a
    check runs a script while it exists, and that copy is what every run uses from then on.
    Read through the safe reader (no links, no pipes, bounded). In a self-check (a new Context
    per check), the files as they are now."""
    copy: Frozen | None = ctx.scratch.get("frozen-scripts")
    if copy is None:
        copy = ctx.scratch["frozen-scripts"] = Frozen(grader_folder(ctx, "scripts-"))
    names = [n for n in list_dir(ctx.workdir) or () if n.endswith(".py")]
    for name in names[:MAX_FROZEN_FILES]:
        if kind(ctx.workdir, name) != "file":
            continue
        data = read_student_file(ctx.workdir, name, MAX_FROZEN_BYTES)
        if data is None:
            continue
        digest = hashlib.sha256(data.encode()).hexdigest()
        if name not in copy.digests:
            target = copy.folder / name
            target.write_text(data)  # grader-only: a folder of the grader's
            target.chmod(0o444)  # grader-only: the grader's copy
            copy.digests[name] = digest
        elif copy.digests[name] != digest and name not in copy.changed:
            copy.changed.add(name)
            if ctx.staff is not None:
                ctx.staff.append(
                    f"{name} changed after the grader copied it ({ctx.label}): the copy was run and judged"
                )
    return copy


def run_folder(ctx: Context, workdir: Path, sandbox) -> Path:
    """A new, empty folder for one run's HOME and TMPDIR, inside the folder it runs in (so a file
    written in TMPDIR can be renamed into place there: one file system, one mount), under a name
    nothing could have planted; the sandbox's user owns it (the user method)."""
    import secrets

    from cluster.safe_files import give_folder, make_dirs, remove

    name = f".run-{secrets.token_hex(6)}"
    folder = make_dirs(workdir, name, exclusive=True)
    if sandbox is not None and sandbox.user is not None:
        give_folder(workdir, name, sandbox.user)
    ctx.cleanup.append(lambda: remove(workdir, name))
    return folder


def script_path(ctx: Context, name: str) -> Path:
    """The grader's copy of the student's script `name`."""
    copy = frozen(ctx)
    expect(
        name in copy.digests,
        f"{name} does not exist in the notebook's folder",
        hint=f"Run the %%writefile {name} cell.",
    )
    return copy.folder / name


def start(
    ctx: Context,
    name: str,
    *args: str,
    crash_on_write: str = "",
    crash_after: float | None = None,
    harness: Sequence[str] = (),
    tag: str = "",
    stdin: bool = False,
    elsewhere: bool = False,
    env: dict[str, str] | None = None,
    pass_fds: Sequence[int] = (),
) -> ScriptRun:
    """Start `python -P -m selfcheck.harness [harness options] <the grader's copy of name> args...`
    in the notebook's folder (see selfcheck/harness.py for the crashes it plans), with a new,
    empty HOME and TMPDIR. elsewhere=True: as on another machine, in a new empty folder of the
    grader's instead of the notebook's (nothing an earlier run wrote is there). env: variables
    the grader adds to the run's environment (lab 9's settings for the job's Spark driver).
    pass_fds: descriptors the run inherits, at the same numbers (lab 14's control channel,
    selfcheck/checks/broker_control.py); nothing else of the grader's is inherited."""
    script = script_path(ctx, name)
    cmd = [sys.executable, "-P", "-m", "selfcheck.harness", *harness]
    if crash_on_write:
        cmd += ["--crash-on-write", crash_on_write]
    cmd += [str(script), *args]
    from cluster.settings import jars_cache

    workdir = grader_folder(ctx, "elsewhere-") if elsewhere else ctx.workdir
    sandbox = ctx.sandbox
    if sandbox is not None and elsewhere:
        sandbox = replace(sandbox.with_writable(workdir), workdir=workdir)
    fresh = run_folder(ctx, workdir, sandbox)
    # The kernel's environment when grading (the grading's Kafka login included); the student's
    # own in a self-check. Unbuffered: what the script printed before the grader stopped it is in
    # its log. The jars' cache is named, so a new HOME does not hide it.
    extra = env or {}
    env = dict(
        ctx.env or os.environ,
        LAB_NAMESPACE=ctx.namespace,
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        HOME=str(fresh),
        TMPDIR=str(fresh),
        MPLCONFIGDIR=str(fresh),
        IPYTHONDIR=str(fresh / ".ipython"),
        **extra,
    )
    env.setdefault("COURSE_JARS_CACHE", str(jars_cache()))
    # The log lives in the grader's own folder, out of the sandbox's reach (a link planted in
    # the working folder would otherwise make the grader write over any file it can).
    log = (ctx.logdir or ctx.workdir) / f"{Path(name).stem}-{tag or time.monotonic_ns()}.log"
    # A self-check's log is beside the notebook; a grading's is the grader's, out of the student's sight.
    log_name = log.name if ctx.logdir is None else f"the grader's log {log.name}"
    with open(log, "wb") as out:  # grader-only: the grader's log folder (ctx.logdir)
        kw = dict(
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=tuple(pass_fds),
        )
        if sandbox is not None:
            proc = replace(sandbox, readonly=(*sandbox.readonly, script.parent)).popen(cmd, env, **kw)
        else:
            proc = subprocess.Popen(cmd, env=env, cwd=workdir, start_new_session=True, **kw)  # type: ignore[call-overload]
    if crash_after is not None:
        timer = threading.Timer(crash_after, stop, (proc,))
        timer.daemon = True
        timer.start()
    ctx.cleanup.append(lambda: stop(proc))
    return ScriptRun(name, proc, log, tag, log_name)


def wait(run: ScriptRun, timeout: float = SCRIPT_DEADLINE_S) -> int:
    """The script's exit status; CRASHED (-9) if it was killed, by the grader or the harness."""
    try:
        code = run.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        stop(run.proc)
        raise CheckFailed(
            f"{run.name} did not finish within {timeout:.0f} s",
            found=run.output()[-500:],
            hint="The script should stop by itself once no message has arrived for a while.",
        ) from None
    run.ended()
    return CRASHED if code in (CRASHED, SANDBOX_KILLED) else code


def running(p) -> bool:
    """Whether a psutil process still runs; a zombie does not (whoever adopted it reaps it in
    its own time: in a container the machine's pid 1, which once took 1.5 s a grading)."""
    import psutil

    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_dead(procs: list, timeout_s: float) -> None:
    """Until every one of these psutil processes is dead (a zombie is dead enough), at most timeout_s."""
    wait_for(lambda: not any(running(p) for p in procs), timeout_s=timeout_s, every_s=0.01)


def kill_tree(pid: int, deadline_s: float = 5) -> None:
    """Kill a process and everything under it, stopped ones included. For a sandbox's outer
    process (bwrap) that takes its PID namespace down."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        try:
            p.resume()
            p.kill()
        except psutil.Error:
            pass
    wait_dead(procs, deadline_s)


def stop(proc: subprocess.Popen) -> None:
    """Kill the run and everything it started (its sandbox, or its process tree)."""
    if proc.poll() is None:
        kill_tree(proc.pid)
        proc.wait(10)
