"""The grading sandbox on real processes: what student code can see, change, start and keep."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from autograder.sandbox import Cgroups, Jail, Limits, Sandbox, available
from cluster.settings import ROOT

pytestmark = pytest.mark.skipif(available() is not None, reason=f"no sandbox here: {available()}")

ENV = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "LAB_NAMESPACE": "sandbox-test"}


def run(tmp_path: Path, code: str, limits: Limits = Limits(), timeout: float = 60) -> subprocess.CompletedProcess:
    (tmp_path / "probe.py").write_text(textwrap.dedent(code))
    cgroups = Cgroups(f"test-{os.getpid()}-{time.monotonic_ns()}", limits)
    try:
        proc = Sandbox(tmp_path, limits=limits, cgroups=cgroups).popen(
            [sys.executable, "probe.py"], dict(ENV), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=timeout)
    finally:
        cgroups.remove()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_filesystem_shows_the_course_code_read_only_and_nothing_of_the_grader(tmp_path):
    out = run(tmp_path, f"""
        import os, pathlib
        root = pathlib.Path({str(ROOT)!r})
        print(sorted(os.listdir(root)))
        for target in (root / "autograder" / "checks" / "lab1.py", pathlib.Path({sys.prefix!r}) / "x", pathlib.Path("/x")):
            try:
                target.write_text("pwned")
                print("WROTE", target)
            except OSError as e:
                print("refused", e.strerror)
        pathlib.Path("mine.txt").write_text("ok")          # its own folder is writable
        print("proc", sorted(p for p in os.listdir("/proc") if p.isdigit()))
        print("env", sorted(os.environ))
    """)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    visible = eval(lines[0])
    assert "solutions" not in visible and ".cluster" not in visible and ".grading-secret" not in visible
    assert {"cluster", "autograder", "datasets"} <= set(visible)
    assert [ln for ln in lines if ln.startswith("refused")] == ["refused Read-only file system"] * 3
    assert (tmp_path / "mine.txt").read_text() == "ok"
    pids = eval(lines[-2].split(" ", 1)[1])
    assert len(pids) <= 3, f"the sandbox's /proc shows other processes: {pids}"   # init, the probe
    assert set(eval(lines[-1].split(" ", 1)[1])) <= set(ENV) | {"PWD", "LC_CTYPE"}


def test_a_double_forked_daemon_dies_with_the_sandbox(tmp_path):
    marker = str(86000 + os.getpid() % 400)
    proc = Sandbox(tmp_path).popen(["sh", "-c", f"setsid sh -c 'sleep {marker}' & sleep 60"], dict(ENV))
    deadline = time.monotonic() + 10
    while not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]]:
        assert time.monotonic() < deadline, "the daemon never started"
        time.sleep(0.1)
    Jail(proc.pid).kill()
    proc.wait(10)
    time.sleep(0.5)
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]]


def test_memory_processes_and_file_size_are_bounded(tmp_path):
    out = run(tmp_path, """
        import os, subprocess
        try:
            bytearray(8 * 2**30)
        except MemoryError:
            print("memory: MemoryError")
        children = []
        try:
            for _ in range(100):
                children.append(subprocess.Popen(["sleep", "30"]))
        except OSError as e:
            print("processes:", len(children), type(e).__name__)
        for c in children:
            c.kill()
        try:
            with open("big", "wb") as f:
                f.write(b"x" * (3 * 2**20))
        except OSError as e:
            print("file:", e.strerror)
    """, limits=Limits(memory_mb=2048, processes=40, file_mb=2))
    assert "memory: MemoryError" in out.stdout, out.stdout + out.stderr
    assert "processes:" in out.stdout and int(out.stdout.split("processes: ")[1].split()[0]) < 40
    assert "file: File too large" in out.stdout


def test_freeze_stops_every_process_until_thawed(tmp_path):
    counter = tmp_path / "count"
    (tmp_path / "tick.py").write_text(textwrap.dedent(f"""
        import os, time
        if os.fork() == 0:          # a child ticks too: it must stop as well
            pass
        n = 0
        while True:
            n += 1
            with open({str(counter)!r} + str(os.getpid()), "w") as f:
                f.write(str(n))
            time.sleep(0.02)
    """))
    proc = Sandbox(tmp_path).popen([sys.executable, "tick.py"], dict(ENV))
    jail = Jail(proc.pid)
    try:
        deadline = time.monotonic() + 15
        while len(list(tmp_path.glob("count*"))) < 2:
            assert time.monotonic() < deadline, "the ticking processes never started"
            time.sleep(0.1)

        def ticks():
            return {p.name: p.read_text() for p in tmp_path.glob("count*")}

        jail.freeze()
        time.sleep(0.2)
        frozen = ticks()
        time.sleep(0.5)
        assert ticks() == frozen, "a process kept running while the sandbox was frozen"
        jail.thaw()
        time.sleep(0.5)
        assert all(ticks()[k] != v for k, v in frozen.items()), "the sandbox did not resume"
    finally:
        jail.kill()
        proc.wait(10)


def test_the_kernel_cannot_reach_the_grader(tmp_path):
    out = run(tmp_path, """
        import os, signal, sys
        print("parent", os.getppid())
        if os.getpid() > 10:   # not in a PID namespace of its own: never kill anything outside
            sys.exit("no PID namespace")
        for pid in range(1, 200):
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        print("still here")
    """)
    assert "still here" in out.stdout and out.stdout.startswith("parent 1")


def test_the_sandbox_resolves_its_own_host_name(tmp_path):
    """A JVM (Spark's driver, lab 9) looks up its own host name when it starts, and dies if
    the name does not resolve: the sandbox's name is in its /etc/hosts."""
    out = run(tmp_path, """
        import socket
        print(socket.gethostname(), socket.gethostbyname(socket.gethostname()))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["grading", "127.0.1.1"]
