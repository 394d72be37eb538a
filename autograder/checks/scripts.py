"""Run a script the student wrote (with %%writefile) as separate processes, the way it would
run in production: under the grader's guards, with deadlines, and killed if it overstays."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import CheckFailed, Context, expect

SCRIPT_DEADLINE_S = 90


@dataclass
class ScriptRun:
    proc: subprocess.Popen
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def script_path(ctx: Context, name: str) -> Path:
    path = ctx.workdir / name
    expect(path.exists(), f"{name} does not exist in the notebook's folder",
           hint=f"Run the %%writefile {name} cell.")
    return path


def start(ctx: Context, name: str, *args: str, crash_on_write: str = "", crash_after: float | None = None,
          tag: str = "") -> ScriptRun:
    """Start `python -m autograder.harness <name> args...` in the notebook's folder."""
    script = script_path(ctx, name)
    cmd = [sys.executable, "-m", "autograder.harness"]
    if crash_on_write:
        cmd += ["--crash-on-write", crash_on_write]
    if crash_after is not None:
        cmd += ["--crash-after", f"{crash_after:.3f}"]
    cmd += [str(script), *args]
    env = dict(os.environ, LAB_NAMESPACE=ctx.namespace, KAFKA_BOOTSTRAP_SERVERS=ctx.bootstrap_servers,
               PYTHONDONTWRITEBYTECODE="1")
    log = ctx.workdir / f".{Path(name).stem}-{tag or time.monotonic_ns()}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ctx.workdir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    ctx.cleanup.append(lambda: stop(proc))
    return ScriptRun(proc, log)


def wait(run: ScriptRun, timeout: float = SCRIPT_DEADLINE_S) -> int:
    try:
        return run.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        stop(run.proc)
        raise CheckFailed(f"{Path(run.proc.args[-1]).name} did not finish within {timeout:.0f} s",
                          found=run.output()[-500:],
                          hint="The script should stop by itself once no message has arrived for a while.") from None


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait(10)
