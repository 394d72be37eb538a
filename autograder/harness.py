"""Run a student's script, and crash it on purpose in the middle of a write.

    python -m autograder.harness [--crash-on-write NAME:N] [--crash-after SECONDS] script.py ARGS...

--crash-on-write NAME:N SIGKILL the script in the middle of the N-th write to a file whose name
                        starts with NAME: half the data is on disk, then it dies, as in a power
                        cut while writing a checkpoint (a file written in place is left corrupt).
--crash-after SECONDS   SIGKILL the script after SECONDS, wherever it is (by hand; when grading,
                        the grader kills the script's sandbox from outside instead).

The grader runs this inside the script's sandbox. The exit status tells what happened: -9
(137 from a sandbox) for a planned crash.
"""

from __future__ import annotations

import argparse
import builtins
import io
import os
import runpy
import signal
import sys
import threading

from .guard import install


def crash() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _HalfWriter:
    """A file that writes half of the first data it is given, flushes it, and dies."""

    def __init__(self, f):
        self._f = f

    def write(self, data):
        self._f.write(data[: max(1, len(data) // 2)])
        self._f.flush()
        crash()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._f, name)


def crash_on_write(name: str, nth: int) -> None:
    """SIGKILL in the middle of the nth write of a file whose name starts with `name`."""
    real_open = io.open
    seen = {"count": 0}

    def open_(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        if any(c in mode for c in "wax+") and isinstance(file, (str, bytes, os.PathLike)) and \
                os.path.basename(os.fsdecode(file)).startswith(name):
            seen["count"] += 1
            if seen["count"] == nth:
                return _HalfWriter(f)
        return f

    builtins.open = io.open = open_


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m autograder.harness", description=__doc__.splitlines()[0])
    p.add_argument("--crash-on-write", metavar="NAME:N")
    p.add_argument("--crash-after", type=float, metavar="SECONDS")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if os.environ.get("LAB_NAMESPACE"):
        install(os.environ["LAB_NAMESPACE"])
    if a.crash_on_write:
        name, nth = a.crash_on_write.rsplit(":", 1)
        crash_on_write(name, int(nth))
    if a.crash_after is not None:
        timer = threading.Timer(a.crash_after, crash)
        timer.daemon = True
        timer.start()
    sys.argv = [a.script, *a.args]
    runpy.run_path(a.script, run_name="__main__")


if __name__ == "__main__":
    main()
