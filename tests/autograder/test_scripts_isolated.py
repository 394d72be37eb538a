"""A student's script as the grader runs it (selfcheck/checks/scripts.py): the grader's own copy,
taken the first time a check runs a script; an interpreter that finds nothing in the working folder
before the harness is loaded; a HOME and TMPDIR new and empty at every run; "another machine" an
empty folder. In the grading sandbox (bubblewrap) and as a self-check runs it (plain processes).
Real processes, no cluster."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from autograder.sandbox import Sandbox, available
from selfcheck.checks import CheckFailed, Context, run_cleanups
from selfcheck.checks.scripts import start, wait

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
