"""Run a script the student wrote (with %%writefile) as separate processes, the way it would
run in production: each in a grading sandbox of its own, with deadlines, and killed if it
overstays. A planned crash "after S seconds" is a SIGKILL of the whole sandbox from here,
so the script cannot see it coming or defuse it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cluster.safe_files import RefusedPath, read_bytes, tail_text
from cluster.waiting import wait_for

from . import CheckFailed, Context, expect

SCRIPT_DEADLINE_S = 90
MAX_LOG_CHARS = 200_000  # of a script's output, kept for messages
CRASHED = -signal.SIGKILL  # the exit status of a run the grader (or the harness) killed
SANDBOX_KILLED = 128 + signal.SIGKILL  # bwrap's exit status when the program inside died of SIGKILL


@dataclass
class ScriptRun:
    proc: subprocess.Popen
    log: Path
    name: str  # the student's script, for messages

    def output(self) -> str:
        return tail_text(self.log.parent, self.log.name, MAX_LOG_CHARS)


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


def script_path(ctx: Context, name: str) -> Path:
    path = ctx.workdir / name
    expect(path.exists(), f"{name} does not exist in the notebook's folder", hint=f"Run the %%writefile {name} cell.")
    return path


def start(
    ctx: Context,
    name: str,
    *args: str,
    crash_on_write: str = "",
    crash_after: float | None = None,
    harness: Sequence[str] = (),
    tag: str = "",
    stdin: bool = False,
) -> ScriptRun:
    """Start `python -m selfcheck.harness [harness options] <name> args...` in the notebook's
    folder (see selfcheck/harness.py for the crashes it plans)."""
    script = script_path(ctx, name)
    cmd = [sys.executable, "-m", "selfcheck.harness", *harness]
    if crash_on_write:
        cmd += ["--crash-on-write", crash_on_write]
    cmd += [str(script), *args]
    # The kernel's environment when grading (the grading's Kafka login included); the student's
    # own in a self-check.
    # Unbuffered: what the script printed before the grader stopped it is in its log.
    env = dict(ctx.env or os.environ, LAB_NAMESPACE=ctx.namespace, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    # The log lives in the grader's own folder, out of the sandbox's reach (a link planted in
    # the working folder would otherwise make the grader write over any file it can).
    log = (ctx.logdir or ctx.workdir) / f"{Path(name).stem}-{tag or time.monotonic_ns()}.log"
    with open(log, "wb") as out:  # grader-only: the grader's log folder (ctx.logdir)
        kw = dict(stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        if ctx.sandbox is not None:
            proc = ctx.sandbox.popen(cmd, env, **kw)
        else:
            proc = subprocess.Popen(cmd, env=env, cwd=ctx.workdir, start_new_session=True, **kw)  # type: ignore[call-overload]
    if crash_after is not None:
        timer = threading.Timer(crash_after, stop, (proc,))
        timer.daemon = True
        timer.start()
    ctx.cleanup.append(lambda: stop(proc))
    return ScriptRun(proc, log, name)


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
