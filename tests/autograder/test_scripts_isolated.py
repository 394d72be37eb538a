"""A student's script as the grader runs it (selfcheck/checks/scripts.py): the grader's own copy,
taken the first time a check runs a script; an interpreter that finds nothing in the working folder
before the harness is loaded; a HOME and TMPDIR new and empty at every run; "another machine" an
empty folder. In the grading sandbox (bubblewrap) and as a self-check runs it (plain processes).
Real processes, no cluster."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from autograder.sandbox import Sandbox, available
from selfcheck.checks import CheckFailed, Context, run_cleanups
from selfcheck.checks.scripts import ended_early, start, wait

# What the script finds: its own text's version, whether its HOME and TMPDIR were empty, what an
# earlier run left, and whether a module beside it imports.
SCRIPT = textwrap.dedent("""
    import os, sys
    import helper
    home, tmp = os.environ["HOME"], os.environ["TMPDIR"]
    print("version", VERSION, "helper", helper.NAME)
    print("home empty", os.listdir(home) == [], "tmp empty", os.listdir(tmp) == [])
    print("left here", os.path.exists("state-here"))
    open(os.path.join(tmp, "state"), "w").write("x")
    open("state-here", "w").write("x")
    print("tmp", tmp)
""")

MODES = ["self-check", pytest.param("sandbox", marks=pytest.mark.skipif(available() is not None, reason="no sandbox"))]


def context(tmp_path: Path, mode: str) -> Context:
    work, logs, private = tmp_path / "work", tmp_path / "logs", tmp_path / "private"
    for folder in (work, logs, private):
        folder.mkdir()
    private.chmod(0o711)
    return Context(
        "lab5",
        "lab5-q1",
        None,  # type: ignore[arg-type]
        "test",
        {},
        workdir=work,
        sandbox=Sandbox(work) if mode == "sandbox" else None,
        env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"} if mode == "sandbox" else None,
        logdir=logs,
        private_dir=private,
        staff=[],
    )


def write(ctx: Context, version: int) -> None:
    (ctx.workdir / "job.py").write_text(f"VERSION = {version}\n" + SCRIPT)
    (ctx.workdir / "helper.py").write_text(f"NAME = 'helper {version}'\n")


def ran(ctx: Context, *args: str, **kw) -> str:
    run = start(ctx, "job.py", *args, **kw)
    assert wait(run, 60) == 0, run.output()
    return run.output()


@pytest.mark.parametrize("mode", MODES)
def test_a_planted_harness_changes_nothing(tmp_path, mode):
    ctx = context(tmp_path, mode)
    write(ctx, 1)
    planted = ctx.workdir / "selfcheck"
    planted.mkdir()
    (planted / "__init__.py").write_text("")
    (planted / "harness.py").write_text("print('FAKE HARNESS')\nraise SystemExit(0)\n")
    (ctx.workdir / "runpy.py").write_text("print('FAKE RUNPY')\n")
    try:
        out = ran(ctx)
    finally:
        run_cleanups(ctx.cleanup)
    assert "FAKE" not in out and "version 1 helper helper 1" in out


@pytest.mark.parametrize("mode", MODES)
def test_every_run_runs_the_first_copy_with_a_new_home_and_tmp(tmp_path, mode):
    ctx = context(tmp_path, mode)
    write(ctx, 1)
    try:
        first = ran(ctx)
        write(ctx, 2)  # the kernel rewrites the script and its module between two parts
        second = ran(ctx)
    finally:
        run_cleanups(ctx.cleanup)
    assert first.split("tmp ")[-1] != second.split("tmp ")[-1], "a TMPDIR of its own each run"
    for out in (first, second):
        assert "version 1 helper helper 1" in out and "home empty True tmp empty True" in out, out
    assert "left here True" in second, "the same machine: the working folder keeps what run 1 wrote"
    assert any("job.py changed after the grader copied it" in note for note in ctx.staff or [])
    assert any("helper.py changed" in note for note in ctx.staff or [])


@pytest.mark.parametrize("mode", MODES)
def test_another_machine_is_an_empty_folder(tmp_path, mode):
    ctx = context(tmp_path, mode)
    write(ctx, 1)
    try:
        ran(ctx)
        second = ran(ctx, elsewhere=True)
    finally:
        run_cleanups(ctx.cleanup)
    assert "left here False" in second and "home empty True tmp empty True" in second


def test_a_script_never_written_is_named(tmp_path):
    ctx = context(tmp_path, "self-check")
    with pytest.raises(CheckFailed, match="job.py does not exist"):
        start(ctx, "job.py")
    run_cleanups(ctx.cleanup)


# What a student's script that dies says: the blank template, and a script that raises at once.
BLANK = 'import sys\nprint("lab12: Kafka at ...", sys.argv[1:])\n# YOUR CODE HERE\nraise NotImplementedError()\n'
RAISES = textwrap.dedent("""
    import json, sys
    print("starting", sys.argv[1:])
    flight = json.loads('{"dest": "ORD"}')
    print(flight["origin"])
""")


def died(ctx: Context, text: str) -> tuple[str, str, float]:
    """Run job.py (the text) as a check does, until it ends: the check's message, its hint, and the
    seconds from its start to the message."""
    (ctx.workdir / "job.py").write_text(text)
    try:
        run = start(ctx, "job.py", "flights", tag="run 1")
        wait(run, 30)
        failed = ended_early(run, "before it wrote to counts")
        seconds = time.monotonic() - run.started
    finally:
        run_cleanups(ctx.cleanup)
    return str(failed), failed.hint, seconds


@pytest.mark.parametrize("mode", MODES)
def test_a_blank_script_is_not_written_yet(tmp_path, mode):
    ctx = context(tmp_path, mode)
    message, hint, seconds = died(ctx, BLANK)
    assert message.startswith("job.py is not written yet: it still raises NotImplementedError (run 1: it ended after")
    assert "before it wrote to counts" in message and "job-run 1.log" in message, message
    assert "expected:" not in message and "Traceback" not in message, message
    assert "Replace `raise NotImplementedError()` in the %%writefile job.py cell" in hint
    assert seconds < 10


@pytest.mark.parametrize("mode", MODES)
def test_a_script_that_raises_at_once_says_its_last_error(tmp_path, mode):
    ctx = context(tmp_path, mode)
    message, hint, seconds = died(ctx, RAISES)
    assert message.startswith("job.py (run 1) ended after"), message
    assert "before it wrote to counts (exit 1): KeyError: 'origin'" in message, message
    assert "the grader's log job-run 1.log" in message  # a grading's log is the grader's (ctx.logdir)
    assert "expected:" not in message and "found:" not in message and "not written" not in hint
    assert seconds < 10


def test_the_last_error_is_the_last_tracebacks_last_line():
    from cluster.scripts import last_error, not_written

    chained = (
        "noise\nTraceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "a.py", line 3, in <module>\n    f()\n'
        "kafka.errors.NoBrokersAvailable: NoBrokersAvailable\n26/01/01 INFO ShutdownHookManager: done\n"
    )
    assert last_error(chained) == "kafka.errors.NoBrokersAvailable: NoBrokersAvailable"
    py4j = "Traceback (most recent call last):\n  File ...\npy4j.protocol.Py4JJavaError: An error.\n: java.io.IOException: no\n"
    assert last_error(py4j) == "py4j.protocol.Py4JJavaError: An error. : java.io.IOException: no"
    assert last_error("just a line\n") is None
    assert last_error("Traceback (most recent call last):\n  File x\n" + "E" * 5000).endswith("...")
    assert not_written("NotImplementedError") and not not_written("KeyError: 'NotImplementedError'")
    assert not not_written("NotImplementedError: a library's feature it does not have")


def test_a_try_it_cell_sees_its_script_die_at_once(tmp_path, monkeypatch):
    """The kit's start_script: a wait on a script that died ends at once, saying why."""
    from cluster.scripts import ScriptEnded, run_script, start_script

    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.py").write_text(BLANK)
    (tmp_path / "bad.py").write_text(RAISES)
    app = start_script("app.py", "flights", log="laptop-a.log")
    began = time.monotonic()
    with pytest.raises(ScriptEnded, match=r"app.py is not written yet: .* its output is in laptop-a.log"):
        app.wait_for(lambda: False, timeout_s=120)
    assert time.monotonic() - began < 10
    with pytest.raises(
        ScriptEnded, match=r"bad.py ended after .* \(exit 1\): KeyError: 'origin' \(its output is in bad.log\)"
    ):
        run_script("bad.py")
    (tmp_path / "reads.py").write_text(
        "import sys, time\nprint(len(sys.stdin.read()))\ntime.sleep(float(sys.argv[1]))\n"
    )
    assert run_script("reads.py", "0", input=b"abc") == 0 and (tmp_path / "reads.log").read_text() == "3\n"
    planned = ["--crash-after", "0.2"]  # a planned crash of the harness is an exit the cell expects
    assert run_script("reads.py", "30", input=b"", harness=planned, crash_expected=True) == -9
