"""Run a notebook in a fresh kernel with time and output limits, and read values out of it.

The kernel gets its own working folder (with HOME and TMPDIR inside it), the grading
namespace in LAB_NAMESPACE, and the guards of autograder/guard.py. When the run ends, the
kernel and every process it started are killed.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any, Callable

import psutil
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync

from .checks import CheckFailed, MissingAnswer

CELL_TIMEOUT_S = 60          # one cell
TOTAL_TIMEOUT_S = 300        # the whole notebook
VALUE_TIMEOUT_S = 30         # one value read by a check
MAX_OUTPUT_CHARS = 100_000   # kept per cell; a notebook printing millions of lines is cut
DEMO_TAG = "demo"            # the course's observation-only cells: nothing graded depends on them


class LimitedClient(NotebookClient):
    """nbclient, keeping at most MAX_OUTPUT_CHARS of output per cell as it arrives."""

    def output(self, outs, msg, display_id, cell_index):
        size = sum(len(str(o.get("text", ""))) + len(str(o.get("data", ""))) for o in outs)
        if size > MAX_OUTPUT_CHARS:
            self.truncated.add(cell_index)
            return None
        return super().output(outs, msg, display_id, cell_index)


@dataclass
class RunLog:
    """What happened while the notebook ran, in words for the student."""

    notes: list[str] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)    # cell index -> "NameError: ..."
    dead_at: int | None = None
    stopped_at: int | None = None


class KernelSession:
    def __init__(self, nb, workdir: Path, env: dict[str, str], cell_timeout: float = CELL_TIMEOUT_S,
                 total_timeout: float = TOTAL_TIMEOUT_S):
        self.nb, self.workdir = nb, Path(workdir)
        self.env, self.cell_timeout, self.total_timeout = env, cell_timeout, total_timeout
        # IPC sockets in the working folder instead of TCP ports: kernels started side by side
        # cannot race for the same port, and nothing listens on the network.
        km = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=str(self.workdir / ".kernel"),
                                connection_file=str(self.workdir / ".kernel.json"))
        self.client = LimitedClient(nb, km=km, timeout=cell_timeout, interrupt_on_timeout=True, allow_errors=True,
                                    kernel_name="python3", resources={"metadata": {"path": str(workdir)}},
                                    startup_timeout=60, iopub_timeout=10)
        self.client.truncated = set()
        self.log = RunLog()
        self._ctx = None

    # --- lifetime ------------------------------------------------------------------------
    def __enter__(self) -> "KernelSession":
        # The kernel's own stderr (ZMQ and gRPC chatter) is not the student's output.
        self._ctx = self.client.setup_kernel(env=self.env, stderr=subprocess.DEVNULL)
        self._ctx.__enter__()
        self.pid = self._kernel_pid()
        return self

    def __exit__(self, *exc) -> None:
        procs = self._tree()
        try:
            self._ctx.__exit__(None, None, None)  # nbclient's own shutdown
        except Exception:
            pass
        kill_all(procs)

    def _kernel_pid(self) -> int | None:
        km = self.client.km
        proc = getattr(getattr(km, "provisioner", None), "process", None)
        return getattr(proc, "pid", None)

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except (psutil.Error, TypeError, ValueError):
            return []

    def alive(self) -> bool:
        try:
            return bool(self.client.kc) and run_sync(self.client.kc.is_alive)() and self.log.dead_at is None
        except Exception:
            return False

    # --- running ---------------------------------------------------------------------------
    def run_silently(self, code: str, timeout: float = 60) -> None:
        """Run set-up code before the notebook (e.g. the guards); raise if it fails."""
        msg_id = self.client.kc.execute(code, silent=True, store_history=False)
        reply = self._reply(msg_id, timeout)
        if reply is None or reply["content"]["status"] != "ok":
            raise RuntimeError(f"kernel set-up failed: {reply and reply['content'].get('evalue')}")

    def _reply(self, msg_id: str, timeout: float) -> dict | None:
        """The shell reply to msg_id, or None after `timeout` seconds."""
        get = run_sync(self.client.kc.get_shell_msg)
        deadline = time.monotonic() + timeout
        while True:
            try:
                reply = get(timeout=max(0.1, deadline - time.monotonic()))
            except Empty:
                return None
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def run(self, at_test_cell: Callable[[int, str], None], is_test_cell: Callable[[Any], str | None]) -> RunLog:
        """Execute the notebook cell by cell. Graded test cells are not executed: at each one,
        at_test_cell(index, label) runs the grader's own check with the kernel as it is then."""
        deadline = time.monotonic() + self.total_timeout
        for index, cell in enumerate(self.nb.cells):
            label = is_test_cell(cell)
            if label:
                at_test_cell(index, label)
                continue
            if cell.cell_type != "code" or not cell.source.strip() or DEMO_TAG in cell.metadata.get("tags", []):
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.log.stopped_at = index
                self.log.notes.append(f"The notebook hit the total time limit of {self.total_timeout:.0f} s; "
                                      f"cells from {index + 1} on were not run.")
                break
            self.client.timeout = max(1, int(min(self.cell_timeout, remaining)))
            started = time.monotonic()
            try:
                self.client.execute_cell(cell, index)
            except DeadKernelError:
                self.log.dead_at = index
                self.log.notes.append(f"The kernel died while running cell {index + 1} (os._exit, a crash or "
                                      "running out of memory); the cells after it were not run.")
                break
            except Exception as e:  # nbclient's own trouble with a cell: note it and go on
                self.log.errors[index] = f"{type(e).__name__}: {e}"
                continue
            err = next((o for o in cell.outputs if o.get("output_type") == "error"), None)
            if err is not None:
                self.log.errors[index] = f"{err.get('ename')}: {err.get('evalue')}"[:300]
            if time.monotonic() - started >= self.client.timeout - 0.5:
                self.log.notes.append(f"Cell {index + 1} ran longer than {self.client.timeout} s and was interrupted "
                                      "(probably an infinite loop, a poll loop with no timeout, or a long sleep).")
            if index in self.client.truncated:
                self.log.notes.append(f"Cell {index + 1} printed more than {MAX_OUTPUT_CHARS:,} characters; "
                                      "the rest of its output was dropped.")
        return self.log

    # --- values for the checks ------------------------------------------------------------
    def value(self, expr: str) -> Any:
        """The value of `expr` in the kernel, as a Python literal, read by the grader."""
        if not self.alive():
            where = f" at cell {self.log.dead_at + 1}" if self.log.dead_at is not None else ""
            raise CheckFailed(f"the notebook's kernel died{where}, so `{expr}` could not be read",
                              hint="Run your notebook from the top and make sure it finishes without os._exit or a crash.")
        kc = self.client.kc
        msg_id = kc.execute("", silent=True, store_history=False,
                            user_expressions={"v": f"__import__('builtins').repr({expr})"})
        reply = self._reply(msg_id, VALUE_TIMEOUT_S)
        if reply is None:
            self._interrupt()
            raise CheckFailed(f"`{expr}` did not return within {VALUE_TIMEOUT_S} s",
                              hint="Your code may be waiting forever (a loop, or a consumer with no timeout).")
        result = reply["content"].get("user_expressions", {}).get("v", {})
        if result.get("status") != "ok":
            name, err = result.get("ename", "Error"), result.get("evalue", "")
            if name == "NameError":
                raise MissingAnswer(expr.split("(")[0].split(".")[0], err)
            raise CheckFailed(f"`{expr}` raised {name}: {err}",
                              hint="Fix the error in your code, then run the notebook again from the top.")
        text = result["data"]["text/plain"]
        try:
            return ast.literal_eval(ast.literal_eval(text))
        except (ValueError, SyntaxError):
            raise CheckFailed(f"`{expr}` is not a plain value (number, string, bytes, list, dict ...)",
                              found=text[:200]) from None

    def _interrupt(self) -> None:
        try:
            run_sync(self.client.km.interrupt_kernel)()
        except Exception:
            pass


def kill_all(procs: list[psutil.Process], grace_s: float = 3) -> None:
    """Terminate, wait to a deadline, kill: the kernel and everything it started."""
    procs = [p for p in procs if p.is_running()]
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM) if p.pid == os.getpgid(p.pid) else p.terminate()
        except (psutil.Error, ProcessLookupError, PermissionError):
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
