"""Run one of the checks' own functions inside the grading's sandbox, on the student's files.

What a student's code wrote (Parquet parts, an SQLite file, a checkpoint) is not safe to open
in the grader's process: a link in it can point at the grader's secrets, a small file can
decode to gigabytes. A check hands such work to `call(ctx, "module:function", args...)`: a
fresh Python runs the function in a sandbox of the grading (the working folder at the same
path, its own memory limit, the course's code read-only), so links reach only what the
sandbox shows, and a bomb ends that process, not the grader. Arguments and the result are
JSON values; a CheckFailed raised inside is raised again here with its message.

In a self-check (no sandbox: the student's own files on their own machine) the function runs
in the same process.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import threading
from dataclasses import replace
from typing import Any

from . import CheckFailed, Context

MEMORY_MB = 1024  # of the process that decodes: a bomb stops here
DEADLINE_S = 120
MAX_RESULT_BYTES = 32 * 2**20  # of the JSON it returns; a lab's outputs are a few hundred rows

_MAIN = "import sys;sys.path.insert(0,sys.argv[1]);from selfcheck.checks.in_sandbox import serve;serve()"


def _function(name: str):
    """A function a checks module lists in its IN_SANDBOX (the ones that open the student's files)."""
    module, _, func = name.partition(":")
    if not module.startswith("selfcheck.checks."):
        raise ValueError(f"only the checks' own functions run here, not {name}")
    loaded = importlib.import_module(module)
    if func not in getattr(loaded, "IN_SANDBOX", ()):
        raise ValueError(f"{name} is not in {module}.IN_SANDBOX")
    return getattr(loaded, func)


def call(ctx: Context, name: str, *args: Any, memory_mb: int = MEMORY_MB, timeout: float = DEADLINE_S) -> Any:
    """name(*args) ("selfcheck.checks.lab9:output_rows"), run in the grading's sandbox."""
    if ctx.sandbox is None:
        return json.loads(json.dumps(_function(name)(*args), default=str))  # the same values as when graded
    from cluster.settings import ROOT

    limits = replace(ctx.sandbox.limits, memory_mb=memory_mb, processes=max(ctx.sandbox.limits.processes, 64))
    sandbox = replace(ctx.sandbox, limits=limits, cgroups=None)
    request = json.dumps({"name": name, "args": args}).encode()
    proc = sandbox.popen(
        [sys.executable, "-I", "-c", _MAIN, str(ROOT)],
        dict(ctx.env or {}),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = bytearray(), bytearray()
    readers = [
        threading.Thread(target=_read, args=(proc.stdout, out, MAX_RESULT_BYTES + 1), daemon=True),
        threading.Thread(target=_read, args=(proc.stderr, err, 20_000), daemon=True),
    ]
    for t in readers:
        t.start()
    try:
        proc.stdin.write(request)
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise CheckFailed(
            f"the grader could not read your files within {timeout:.0f} s",
            hint="Keep your outputs to what the question asks for.",
        ) from None
    finally:
        for t in readers:
            t.join(5)
    if len(out) > MAX_RESULT_BYTES:
        raise CheckFailed(
            "your files hold far more than the question asks for",
            expected=f"at most {MAX_RESULT_BYTES:,} bytes of values",
            found="more",
        )
    try:
        answer = json.loads(bytes(out))
    except ValueError:
        tail = bytes(err).decode(errors="replace")[-300:]
        if proc.returncode and ("MemoryError" in tail or proc.returncode < 0 or proc.returncode > 128):
            raise CheckFailed(
                f"reading your files took more than {memory_mb} MB of memory",
                hint="A file that decodes to far more than it holds on disk (many rows, a "
                "compression bomb) is not read.",
            ) from None
        raise RuntimeError(f"the sandboxed reader {name} failed (exit {proc.returncode}): {tail}") from None
    if answer.get("failed"):
        raise CheckFailed(**answer["failed"])
    if answer.get("error"):
        raise RuntimeError(f"the sandboxed reader {name} raised {answer['error']}")
    return answer["value"]


def _read(stream, into: bytearray, limit: int) -> None:
    """Read a pipe to its end, keeping at most `limit` bytes (the rest is drained, not kept)."""
    while chunk := stream.read(65536):
        if len(into) < limit:
            into.extend(chunk[: limit - len(into)])


def _kill(proc: subprocess.Popen) -> None:
    from .scripts import kill_tree

    kill_tree(proc.pid)
    proc.wait(10)


def serve() -> None:
    """Inside the sandbox: read the request from stdin, write the answer as JSON to stdout."""
    request = json.loads(sys.stdin.buffer.read(1 << 20))
    try:
        value = _function(request["name"])(*request["args"])
        answer = {"value": value}
    except CheckFailed as e:
        answer = {"failed": {"what": e.what, "expected": _text(e.expected), "found": _text(e.found), "hint": e.hint}}
    except MemoryError:
        raise  # the grader says so, from the exit status
    except Exception as e:  # the grader reports it as its own failure
        answer = {"error": f"{type(e).__name__}: {e}"[:1000]}
    sys.stdout.write(json.dumps(answer, default=str))


def _text(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, float, str, bool, list)) else repr(value)
