"""A script of yours, run from the notebook as the grader runs it, and why it ended.

    from cluster.scripts import run_script, start_script

    app = start_script("carrier_counts.py", flights, counts, state, log="laptop-a.log")
    app.wait_for(lambda: len(lab.read(counts)), timeout_s=120)   # ScriptEnded at once if it dies first
    app.terminate()
    run_script("board_setup.py", events, board)                   # to its end; ScriptEnded if it fails

A script that dies is said in one line, the same in a "try it" cell and in the grader's message:
its name, how long it ran, its exit status, the exception's last line (from its log, read within
bounds), "not written yet" for the template's `raise NotImplementedError()`, and the log's name.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .safe_files import tail_text
from .waiting import Waited, wait_for

MAX_TAIL_BYTES = 64 * 1024  # of a log, read to find its last error: a traceback is a few kilobytes
MAX_ERROR_CHARS = 300  # of the error line a message quotes
NOT_WRITTEN = "NotImplementedError"
TRACEBACK = "Traceback (most recent call last):"
# The last line of a traceback: a (dotted) exception name, then its message after ":", if any.
_EXCEPTION = re.compile(r"[A-Za-z_][\w.]*(:|$)")


def last_error(text: str) -> str | None:
    """The last exception a log shows: the last line of its last traceback ("KeyError: 'origin'"),
    None if it shows none. A Java error that py4j raises keeps its next line (": java.lang...")."""
    at = text.rfind(TRACEBACK)
    if at < 0:
        return None
    lines = text[at + len(TRACEBACK) :].splitlines()
    for i, line in enumerate(lines):
        if not line.strip() or line[0].isspace():
            continue  # the frames, indented; a blank line
        if not _EXCEPTION.match(line):
            return None  # not a traceback's last line (the log was cut, or something else wrote)
        if i + 1 < len(lines) and lines[i + 1].startswith(": "):  # py4j: the Java exception, next line
            line += " " + lines[i + 1]
        return line[:MAX_ERROR_CHARS] + ("..." if len(line) > MAX_ERROR_CHARS else "")
    return None


def not_written(error: str | None) -> bool:
    """Whether the error is the blank template's `raise NotImplementedError()`: without a message
    (a library's NotImplementedError says what it does not do, and is reported as it is)."""
    return error is not None and error.strip() == NOT_WRITTEN


def last_line(text: str) -> str:
    """The last line a log holds that is not blank, at most MAX_ERROR_CHARS."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1][:MAX_ERROR_CHARS] if lines else ""


def ran_for(started: float, started_wall: float, seen_ended: float, log: Path, text: str) -> float:
    """Seconds a script ran: until it was seen to have ended (monotonic clocks), or, if it died
    of an exception (its log's `text` ends in a traceback, written as it died), until its log
    was last written, if that was earlier: it may have died while nobody looked."""
    seconds = seen_ended - started
    if last_error(text) is None:
        return seconds
    try:
        seconds = min(seconds, max(0.0, log.stat().st_mtime - started_wall))
    except OSError:
        pass
    return seconds


def why_it_ended(
    name: str, code: int | None, seconds: float, log_text: str, log_name: str, label: str = "", before: str = ""
) -> str:
    """One line: the script `name` (its run `label`, if several) ended after `seconds` with exit
    `code` (`before` what, if said), and why, as its log says; the log's name for the rest."""
    error = last_error(log_text)
    status = f"exit {code}" if code is None or code >= 0 else f"killed by signal {-code}"
    seen = f"after {seconds:.1f} s" + (f", {before}" if before else "")
    if not_written(error):
        return (
            f"{name} is not written yet: it still raises NotImplementedError ({label + ': ' if label else ''}"
            f"it ended {seen}; its output is in {log_name})"
        )
    said = (
        f": {error}"
        if error
        else f"; its last line: {last_line(log_text)}"
        if log_text.strip()
        else ", printing nothing"
    )
    return f"{name}{f' ({label})' if label else ''} ended {seen} ({status}){said} (its output is in {log_name})"


class ScriptEnded(RuntimeError):
    """A script of yours ended when it should still run, or failed; the message says why."""

    def _render_traceback_(self) -> list[str]:
        """In JupyterLab: the one line that says why, not the frames of the kit that noticed."""
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]


class Script:
    """A script started by start_script (or by the grader): its process, its log, and why it ended.
    label: which run of it, for messages ("run 1"); log_name: the log, as a message names it."""

    def __init__(self, name: str, proc: subprocess.Popen, log: Path, label: str = "", log_name: str = ""):
        self.name, self.proc, self.log, self.label = name, proc, log, label
        self.log_name = log_name or log.name
        self.started, self.started_wall = time.monotonic(), time.time()
        self.ended_at: float | None = None  # when it was first seen to have ended

    def ended(self) -> bool:
        if self.proc.poll() is None:
            return False
        if self.ended_at is None:
            self.ended_at = time.monotonic()
        return True

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def tail(self) -> str:
        """The end of its log, where its last error is (MAX_TAIL_BYTES, through the safe reader)."""
        return tail_text(self.log.parent, self.log.name, MAX_TAIL_BYTES)

    def why(self, before: str = "") -> str:
        """One line: how it ended and why (`before` what, if said), from its log's tail: the
        exception's last line, "not written yet" for the template's NotImplementedError; and the
        log's name. That it still runs, if it does."""
        if not self.ended():
            return f"{self.name} is still running (its output is in {self.log_name})"
        text = self.tail()
        seconds = ran_for(self.started, self.started_wall, self.ended_at or time.monotonic(), self.log, text)
        return why_it_ended(self.name, self.exit_code(), seconds, text, self.log_name, self.label, before)

    def not_written(self) -> bool:
        """Whether it died of the blank template's `raise NotImplementedError()`."""
        return not_written(last_error(self.tail()))

    def check(self) -> None:
        """Raise ScriptEnded, saying why, if the script has ended."""
        if self.ended():
            raise ScriptEnded(self.why())

    def wait_for(
        self, probe: Callable[[], Any], *, timeout_s: float, until: Callable[[Any], bool] = bool, **kw
    ) -> Waited:
        """cluster.waiting.wait_for (a Waited, false if the deadline passed) while the script runs:
        ScriptEnded, at once, if it ends before the condition holds."""
        waited = wait_for(probe, timeout_s=timeout_s, until=until, stop_if=self.ended, **kw)
        if not waited:
            self.check()
        return waited

    def wait(self, timeout_s: float | None = None) -> int:
        """Its exit status, once it ends."""
        return self.proc.wait(timeout_s)

    def terminate(self, grace_s: float = 60) -> None:
        """SIGTERM: it may finish what it does and close its clients; SIGKILL if it has not
        within grace_s (a Spark driver stopping on a busy machine takes tens of seconds)."""
        if not self.ended():
            self.proc.terminate()
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL: as in a crash."""
        if not self.ended():
            self.proc.kill()
            self.proc.wait(30)


def start_script(
    script: str,
    *args: str,
    log: str | None = None,
    harness: Sequence[str] = (),
    env: dict | None = None,
    stdin: bool = False,
) -> Script:
    """Start `python script args...` in this folder, its output (stdout and stderr) to `log`
    (default: the script's name with .log). harness: options of `python -m selfcheck.harness`
    (the grader's planned crashes, e.g. ["--crash-after", "1.0"]); stdin: its input is a pipe
    (script.proc.stdin) instead of nothing."""
    log_path = Path(log or Path(script).with_suffix(".log").name).absolute()
    cmd = [sys.executable, *(["-m", "selfcheck.harness", *harness] if harness else []), script, *args]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
    return Script(Path(script).name, proc, log_path)


def run_script(
    script: str,
    *args: str,
    log: str | None = None,
    harness: Sequence[str] = (),
    env: dict | None = None,
    timeout_s: float = 600,
    crash_expected: bool = False,
    input: bytes | None = None,
) -> int:
    """Run a script to its end, like start_script (given `input` on its stdin, if any); its exit
    status. ScriptEnded, saying why, if it fails (a planned crash of the harness, SIGKILL, is a
    failure only if not crash_expected)."""
    run = start_script(script, *args, log=log, harness=harness, env=env, stdin=input is not None)
    try:
        if input is not None:
            try:
                run.proc.communicate(input, timeout=timeout_s)
            except BrokenPipeError:  # it stopped reading: why is in its log
                pass
        code = run.wait(timeout_s)
    except subprocess.TimeoutExpired:
        run.kill()
        raise TimeoutError(
            f"{run.name} did not end within {timeout_s:.0f} s (its output is in {run.log.name})"
        ) from None
    if code != 0 and not (crash_expected and code == -signal.SIGKILL):
        raise ScriptEnded(run.why())
    return code
