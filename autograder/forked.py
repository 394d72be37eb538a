"""Gradings in processes forked from one that has imported the grader already (multiprocessing's
fork server). Each grading is still a process of its own (its crash, memory, signals and
clean-up its own, killed at its deadline), but it skips the interpreter's start and the
grader's imports: ~0.4 CPU-seconds a grading, a tenth of a light lab's, which a class of 200
submissions or the self-test pays 200 times on the same two cores."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import resource
import sys
from multiprocessing.context import ForkServerContext
from pathlib import Path

# What the fork server imports once: the CLI and everything a grading imports at its start.
PRELOAD = ["autograder.__main__", "autograder.pipeline", "autograder.kernel"]

_context: ForkServerContext | None = None


def _fork_server() -> ForkServerContext:
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _context = ctx
    return _context


def start(
    module: str,
    argv: list[str],
    stdout: Path,
    stderr: Path,
    cgroup_procs: Path | None = None,
    cpu_file: Path | None = None,
) -> multiprocessing.process.BaseProcess:
    """`python -m module argv...` as a forked process: module.main(argv)'s return is its exit
    code; its output goes to the two files. It runs in this process's environment, folder and sys.path
    of now (the fork server's may be older), joins the cgroup first where one is given (cgroup v1's
    cgroup.procs: everything it starts counts there), and writes its CPU seconds (its own and its
    waited-for children's) to cpu_file as it ends. The caller joins it with a deadline, then
    terminate() (SIGTERM: the grading cleans up) and kill()."""
    process = _fork_server().Process(
        target=_main,
        args=(
            module,
            argv,
            str(stdout),
            str(stderr),
            dict(os.environ),
            os.getcwd(),
            list(sys.path),
            cgroup_procs,
            cpu_file,
        ),
        daemon=False,
    )
    process.start()
    return process


def _main(
    module: str,
    argv: list[str],
    stdout: str,
    stderr: str,
    env: dict[str, str],
    cwd: str,
    path: list[str],
    cgroup_procs: Path | None,
    cpu_file: Path | None,
) -> None:
    if cgroup_procs is not None:
        try:
            cgroup_procs.write_text("0")
        except OSError:
            pass
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.path[:] = path
    for fd, output in ((1, stdout), (2, stderr)):
        target = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(target, fd)
        os.close(target)
    code: str | int | None = 1
    try:
        code = importlib.import_module(module).main(argv)
    except SystemExit as e:
        code = e.code
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if cpu_file is not None:
            own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu_file.write_text(str(own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime))
    sys.exit(code)
