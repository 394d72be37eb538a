"""Run a notebook in a fresh kernel inside a sandbox, with limits, and read values out of it.

The kernel is a bubblewrap sandbox (autograder/sandbox/) that jupyter_client starts from
a kernel spec of our own. Limits are enforced from outside the kernel, where the student's
code cannot reach them:
- a cell past its time limit is interrupted (SIGINT); one that ignores the interrupt is
  killed with the whole sandbox a few seconds later, and the grading goes on without it;
- every message the kernel sends counts against a byte budget per cell (streams, display
  data, errors, comms alike), and no single message may exceed MAX_MESSAGE_BYTES (ZeroMQ
  drops the connection that sends one);
- a value read by a check is capped in size and time;
- while a check runs, every process of the sandbox is frozen (`paused()`).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync
from traitlets import default

from selfcheck.errors import (
    CheckFailed,
    DemoName,
    MissingAnswer,
    NotPlainValue,
    NotWritten,
    RaisedInKernel,
    answer_name,
)

from .sandbox import Jail, Sandbox

CELL_TIMEOUT_S = 60  # one cell
TOTAL_TIMEOUT_S = 300  # the whole notebook
KILL_GRACE_S = 5  # a cell still running this long after its interrupt is killed
VALUE_TIMEOUT_S = 30  # one value read by a check
MAX_OUTPUT_BYTES = 1_000_000  # of messages per cell; the rest is dropped
MAX_NOTEBOOK_OUTPUT_BYTES = 20_000_000  # of messages of the whole notebook (many cells, each under the cap)
MAX_MESSAGE_BYTES = 16 * 2**20  # one part of a message from the kernel, at the socket
MAX_RELAYED_BYTES = 24 * 2**20  # one whole message (all its parts), passed on by the relay
RELAY_MEMORY_MB = 512  # the relay's own bound: a larger message ends the relay, not the grader
MAX_VALUE_CHARS = 4_000_000  # the repr of one value a check reads
# Parsing a literal takes a few hundred bytes per character at worst (a list of a million zeros
# took the grader to 1 GB): a value longer than this is parsed in a child process of its own,
# with PARSE_MEMORY_MB, and handed back in marshal's form.
PARSE_HERE_CHARS = 200_000
PARSE_MEMORY_MB = 2048
DEMO_TAG = "demo"  # the course's observation-only cells: nothing graded depends on them


def defined_in_demo(nb, name: str) -> bool:
    """Whether an example cell (tagged demo: grading does not run it) defines `name`."""
    for cell in nb.cells:
        if cell.cell_type != "code" or DEMO_TAG not in cell.metadata.get("tags", []):
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Name)
                and isinstance(node.ctx, ast.Store)
                and node.id == name
                or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and node.name == name
                or isinstance(node, ast.alias)
                and (node.asname or node.name.split(".")[0]) == name
            ):
                return True
    return False


_PARSE = (
    "import ast, marshal, resource, sys\n"
    "limit = int(sys.argv[1]) * 2**20\n"
    "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "try:\n"
    "    value = ast.literal_eval(ast.literal_eval(sys.stdin.read()))\n"
    "except MemoryError:\n"
    "    sys.exit(3)\n"
    "sys.stdout.buffer.write(marshal.dumps(value))\n"
)


def parse_value(text: str):
    """The plain value a kernel's reply holds (the repr of the repr of a literal). MemoryError if
    it is too large to hold; ValueError and the like if it is not a literal."""
    import marshal

    if len(text) <= PARSE_HERE_CHARS:
        return ast.literal_eval(ast.literal_eval(text))
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _PARSE, str(PARSE_MEMORY_MB)],
        input=text.encode(),
        capture_output=True,
        timeout=120,
    )
    if out.returncode == 3:
        raise MemoryError
    if out.returncode != 0:
        raise ValueError("not a literal")
    return marshal.loads(out.stdout)  # written by our own child, from literals only


class CappedKernelClient(AsyncKernelClient):
    """A kernel client whose sockets refuse messages over MAX_MESSAGE_BYTES."""

    @default("context")
    def _context_default(self) -> zmq.Context:
        self._created_context = True
        ctx = zmq.asyncio.Context()
        ctx.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        return ctx


class SandboxSpecs(KernelSpecManager):
    """One kernel spec, "sandboxed": ipykernel inside the grading sandbox. Interrupts travel
    as messages (a signal to bwrap's outer process would kill the sandbox instead)."""

    sandbox: Sandbox | None = None

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        if self.sandbox is None:
            raise RuntimeError("SandboxSpecs.sandbox is not set: KernelSession sets it before the kernel starts")
        argv = self.sandbox.wrap([sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
        return KernelSpec(
            argv=argv,
            display_name="Python 3 (grading sandbox)",
            language="python",
            interrupt_mode="message",
            resource_dir="",
        )


class SandboxKernelManager(AsyncKernelManager):
    """jupyter_client's manager; under the user method the kernel runs as the sandbox's own
    user, so the connection file (the grader's, mode 0600) is handed to it."""

    owner: int | None = None

    relay: subprocess.Popen | None = None  # autograder/kernel_relay.py, between the kernel and us
    relay_dir: str | None = None  # the relay's sockets and log: a folder of the grader's own

    def write_connection_file(self, **kwargs) -> None:
        super().write_connection_file(**kwargs)
        if self.owner is not None:
            os.chown(self.connection_file, self.owner, self.owner)
        if self.relay is None:
            self._start_relay()

    def _start_relay(self) -> None:
        """Every socket of ours (the client's, the manager's control socket) connects to the relay,
        which alone receives what the kernel sends."""
        from cluster.settings import ROOT

        from .kernel_relay import CHANNELS

        self.relay_dir = relay_dir = tempfile.mkdtemp(prefix="grade-relay-")
        kernel_ip = self.ip
        with open(os.path.join(relay_dir, "relay.log"), "wb") as log:  # grader-only: its own folder
            self.relay = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "autograder.kernel_relay",
                    kernel_ip,
                    self.relay_ip(),
                    *(str(getattr(self, f"{c}_port")) for c in CHANNELS),
                    str(MAX_RELAYED_BYTES),
                    str(RELAY_MEMORY_MB),
                ],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )

    def relay_ip(self) -> str:
        return os.path.join(self.relay_dir or "", "k")  # called once the relay's folder is made

    def _make_url(self, channel: str) -> str:
        if self.relay_dir is None:
            return super()._make_url(channel)
        return f"ipc://{self.relay_ip()}-{getattr(self, f'{channel}_port')}"

    def client(self, **kwargs):
        return super().client(**{**kwargs, "ip": self.relay_ip()} if self.relay_dir else kwargs)

    def stop_relay(self) -> None:
        if self.relay is not None and self.relay.poll() is None:
            self.relay.kill()
            self.relay.wait(10)
        if self.relay_dir:
            shutil.rmtree(self.relay_dir, ignore_errors=True)


class LimitedClient(NotebookClient):
    """nbclient, counting every message of a cell against MAX_OUTPUT_BYTES."""

    truncated: set[int]  # cells whose output was cut (KernelSession sets both)
    spent: dict[int, int]  # output bytes per cell

    def process_message(self, msg, cell, cell_index):
        if msg.get("msg_type") not in ("status", "execute_input"):
            size = len(json.dumps(msg.get("content", {}), default=str)) + sum(map(len, msg.get("buffers") or []))
            self.spent[cell_index] = self.spent.get(cell_index, 0) + size
            if self.spent[cell_index] > MAX_OUTPUT_BYTES or sum(self.spent.values()) > MAX_NOTEBOOK_OUTPUT_BYTES:
                self.truncated.add(cell_index)
                return None
        return super().process_message(msg, cell, cell_index)


@dataclass
class RunLog:
    """What happened while the notebook ran, in words for the student."""

    notes: list[str] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)  # cell index -> "NameError: ..."
    dead_at: int | None = None
    killed_at: int | None = None
    interrupted: set[int] = field(default_factory=set)  # cells the watchdog interrupted


@contextmanager
def errors_on_exit_ignored(cm):
    """Enter `cm`; an error of its clean-up is not the grading's (the kernel is killed anyway)."""
    entered = False
    try:
        with cm as value:
            entered = True
            yield value
    except Exception:
        if not entered:  # it did not even start: that is the grading's business
            raise


class KernelSession:
    def __init__(
        self,
        nb,
        sandbox: Sandbox,
        env: dict[str, str],
        cell_timeout: float = CELL_TIMEOUT_S,
        total_timeout: float = TOTAL_TIMEOUT_S,
    ):
        self.nb, self.workdir = nb, Path(sandbox.workdir)
        self.env, self.cell_timeout, self.total_timeout = env, cell_timeout, total_timeout
        specs = SandboxSpecs()
        specs.sandbox = sandbox
        # IPC sockets in the working folder instead of TCP ports: kernels started side by side
        # cannot race for the same port, and the sandbox sees them at the same path.
        km = SandboxKernelManager(
            kernel_name="sandboxed",
            kernel_spec_manager=specs,
            transport="ipc",
            ip=str(self.workdir / ".kernel"),
            connection_file=str(self.workdir / ".kernel.json"),
            client_class="autograder.kernel.CappedKernelClient",
        )
        km.owner = sandbox.user
        self.km, self.sandbox = km, sandbox
        self.client = LimitedClient(
            nb,
            km=km,
            timeout=None,
            allow_errors=True,
            kernel_name="sandboxed",
            resources={"metadata": {"path": str(self.workdir)}},
            startup_timeout=60,
            iopub_timeout=10,
        )
        self.client.truncated, self.client.spent = set(), {}
        self.log = RunLog()
        self.jail = Jail(None)
        self._stack = ExitStack()  # what __exit__ undoes, filled by __enter__
        self._paused = False

    # --- lifetime ------------------------------------------------------------------------
    def __enter__(self) -> "KernelSession":
        # The kernel's own stdout and stderr (ZMQ and gRPC chatter) are not the student's output;
        # they go to a log, shown to staff if the kernel cannot start.
        self.stderr_log = self.workdir / ".kernel-stderr.log"
        self._stack.callback(self.km.stop_relay)  # the last thing undone, after the kernel
        try:
            with open(self.stderr_log, "wb") as err:
                # nbclient's own clean-up of channels and files, on the way out
                self._stack.enter_context(
                    errors_on_exit_ignored(self.client.setup_kernel(env=self.env, stdout=err, stderr=err))
                )
        except RuntimeError as e:
            self._stack.close()
            tail = self.stderr_log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the grading kernel did not start ({e}); its stderr ends with:\n{tail}") from None
        except BaseException:
            self._stack.close()
            raise
        proc = getattr(getattr(self.km, "provisioner", None), "process", None)
        self.jail = self.sandbox.jail(getattr(proc, "pid", None))
        # Runs first: a frozen or runaway kernel would only delay a polite shutdown.
        self._stack.callback(lambda: self.jail.kill())
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def alive(self) -> bool:
        relay = self.km.relay
        return (
            (relay is None or relay.poll() is None)
            and self.jail.alive()
            and self.log.dead_at is None
            and self.log.killed_at is None
        )

    # --- running ---------------------------------------------------------------------------
    def kc(self):
        """nbclient's kernel client, which exists once the kernel has started (__enter__)."""
        if self.client.kc is None:
            raise RuntimeError("the grading kernel has not been started")
        return self.client.kc

    def _reply(self, msg_id: str, timeout: float) -> dict | None:
        """The shell reply to msg_id, or None after `timeout` seconds."""
        get = run_sync(self.kc().get_shell_msg)
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                reply = get(timeout=remaining)
            except Empty:
                return None
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply
        return None

    def _watchdog(self, limit: float, index: int) -> list[threading.Timer]:
        """Interrupt the cell at its limit; kill the sandbox if the cell ignores that."""

        def interrupt():
            self.log.interrupted.add(index)
            self.jail.signal(signal.SIGINT)

        def kill():
            self.log.killed_at = index
            self.jail.kill()

        timers = [threading.Timer(limit, interrupt), threading.Timer(limit + KILL_GRACE_S, kill)]
        for t in timers:
            t.daemon = True
            t.start()
        return timers

    def run(self, at_test_cell: Callable[[int, str], None], is_test_cell: Callable[[Any], str | None]) -> RunLog:
        """Execute the notebook cell by cell. Graded test cells are not executed: at each one,
        at_test_cell(index, label) runs the grader's own check with the kernel as it is then."""
        deadline = time.monotonic() + self.total_timeout
        for index, cell in enumerate(self.nb.cells):
            label = is_test_cell(cell)
            if label:
                # the limit is the student's code's: the time the grader's own check takes is given back
                started = time.monotonic()
                at_test_cell(index, label)
                deadline += time.monotonic() - started
                continue
            if cell.cell_type != "code" or not cell.source.strip() or DEMO_TAG in cell.metadata.get("tags", []):
                continue
            if not self.alive():
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.log.notes.append(
                    f"The notebook hit the total time limit of {self.total_timeout:.0f} s; "
                    f"cells from {index + 1} on were not run."
                )
                break
            limit = max(1.0, min(self.cell_timeout, remaining))
            timers = self._watchdog(limit, index)
            try:
                self.client.execute_cell(cell, index)
            except DeadKernelError:
                if self.log.killed_at == index:
                    self.log.notes.append(
                        f"Cell {index + 1} ran longer than {limit:.0f} s, ignored the interrupt and was killed "
                        "with the kernel; the cells after it were not run (an infinite loop that catches "
                        "KeyboardInterrupt or ignores SIGINT?)."
                    )
                else:
                    self.log.dead_at = index
                    self.log.notes.append(
                        f"The kernel died while running cell {index + 1} (os._exit, a crash or "
                        "running out of memory); the cells after it were not run."
                    )
                break
            except Exception as e:  # nbclient's own trouble with a cell: note it and go on
                self.log.errors[index] = f"{type(e).__name__}: {e}"[:300]
                continue
            finally:
                for t in timers:
                    t.cancel()
            err = next((o for o in cell.outputs if o.get("output_type") == "error"), None)
            if err is not None:
                self.log.errors[index] = f"{err.get('ename')}: {err.get('evalue')}"[:300]
            if index in self.log.interrupted:
                self.log.notes.append(
                    f"Cell {index + 1} ran longer than {limit:.0f} s and was interrupted "
                    "(probably an infinite loop, a poll loop with no timeout, or a long sleep)."
                )
            if index in self.client.truncated:
                self.log.notes.append(
                    f"Cell {index + 1} sent more than {MAX_OUTPUT_BYTES:,} bytes of output (or the "
                    f"notebook more than {MAX_NOTEBOOK_OUTPUT_BYTES:,}); the rest was dropped."
                )
        return self.log

    # --- checks -------------------------------------------------------------------------------
    @contextmanager
    def paused(self):
        """Every process of the student's kernel is stopped for the length of the block (a
        check): threads or children it left running cannot act meanwhile."""
        if not self.jail.freeze():
            self.log.killed_at = self.log.killed_at if self.log.killed_at is not None else -1
            self.log.notes.append(
                "The notebook's processes kept resuming each other and could not be paused for a "
                "check; they were killed, and the checks after it could not read the notebook. "
                f"(Still running: {', '.join(self.jail.unfrozen) or 'none known'}.)"
            )
            self.jail.kill()
        self._paused = True
        try:
            yield self
        finally:
            self._paused = False
            self.jail.thaw()

    def value(self, expr: str, timeout: float = VALUE_TIMEOUT_S) -> Any:
        """The value of `expr` in the kernel, as a Python literal, read by the grader. `timeout`: a
        longer wait for an expression that does real work (lab 9's run Spark jobs)."""
        if not self.alive():
            at = self.log.dead_at if self.log.dead_at is not None else self.log.killed_at
            where = f" at cell {at + 1}" if at is not None and at >= 0 else ""
            raise CheckFailed(
                f"the notebook's kernel died or was killed{where}, so `{expr}` could not be read",
                hint="Run your notebook from the top and make sure it finishes without os._exit, a "
                "crash or a cell that never ends.",
            )
        if self._paused:  # only the kernel itself answers; what it started stays stopped
            self.jail.thaw(main_only=True)
        try:
            msg_id = self.kc().execute(
                "",
                silent=True,
                store_history=False,
                user_expressions={"v": f"__import__('selfcheck.plain', fromlist=['_']).plain_repr({expr})"},
            )
            reply = self._reply(msg_id, timeout)
            if reply is None:
                self.jail.signal(signal.SIGINT)
        finally:
            if self._paused:
                self.jail.freeze()
        if reply is None:
            raise CheckFailed(
                f"`{expr}` did not return within {timeout:.0f} s",
                hint="Your code may be waiting forever (a loop, or a consumer with no timeout).",
            )
        result = reply["content"].get("user_expressions", {}).get("v", {})
        if result.get("status") != "ok":
            name, err = str(result.get("ename", "Error"))[:100], str(result.get("evalue", ""))[:500]
            if name == "NameError":
                missing = re.search(r"name '(\w+)' is not defined", err)
                if missing and defined_in_demo(self.nb, missing.group(1)):
                    raise DemoName(answer_name(expr), missing.group(1))
                raise MissingAnswer(answer_name(expr), err)
            if name == "NotImplementedError":
                raise NotWritten(expr)
            raise RaisedInKernel(expr, name, err)
        text = str(result.get("data", {}).get("text/plain", ""))
        if len(text) > MAX_VALUE_CHARS:
            raise CheckFailed(
                f"`{expr}` is too large to check ({len(text):,} characters; at most {MAX_VALUE_CHARS:,})",
                hint="Keep only what the question asks for.",
            )
        try:
            found = parse_value(text)
        except MemoryError:
            raise CheckFailed(
                f"`{expr}` is too large to check (it holds too many items)",
                hint="Keep only what the question asks for.",
            ) from None
        except Exception:  # not a literal, or nested too deep for the parser
            raise CheckFailed(
                f"`{expr}` is not a plain value (number, string, bytes, list, dict ...)", found=text[:200]
            ) from None
        if not (isinstance(found, tuple) and len(found) == 2 and found[0] in ("ok", "not plain")):
            raise CheckFailed(f"`{expr}` could not be read", found=text[:200])
        if found[0] == "not plain":
            raise NotPlainValue(expr, str(found[1]))
        return found[1]
