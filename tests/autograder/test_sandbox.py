"""The grading sandbox on real processes: what student code can see, change, start and keep."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from autograder.sandbox import (Cgroups, Limits, Sandbox, available, exposed, give, method, new_uid,
                                readable_by_all, runs_as_another_user, sweep)
from cluster.settings import ROOT

pytestmark = pytest.mark.skipif(available() is not None, reason=f"no sandbox here: {available()}")
as_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                             reason="the user method needs root and setpriv")

ENV = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "LAB_NAMESPACE": "sandbox-test"}
# The user method's processes run as another user: this Python may be out of its reach (pyenv's
# under /root); the system's is not.
USER_PYTHON = sys.executable if os.geteuid() != 0 or runs_as_another_user(sys.executable) else "/usr/bin/python3"


@pytest.fixture
def user_sandbox():
    """A working folder handed to a uid of its own, as the pipeline does for the user method
    (under /tmp: pytest's own folders are closed to other users)."""
    folder, uid = Path(tempfile.mkdtemp(prefix="sandbox-test-")), new_uid()
    (folder / ".home").mkdir()
    give(folder, uid)
    yield Sandbox(folder, uid=uid, python=USER_PYTHON)
    sweep(uid)
    shutil.rmtree(folder, ignore_errors=True)


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


@pytest.fixture(params=["bwrap", pytest.param("user", marks=as_root)])
def sandbox(request, tmp_path):
    """A sandbox of each method, bubblewrap's and the user method's."""
    if request.param == "bwrap":
        return Sandbox(tmp_path)
    return request.getfixturevalue("user_sandbox")


def test_a_double_forked_daemon_dies_with_the_sandbox(sandbox):
    marker = str(86000 + os.getpid() % 400)
    proc = sandbox.popen(["sh", "-c", f"setsid sh -c 'sleep {marker}' & sleep 60"], dict(ENV))
    deadline = time.monotonic() + 10
    while not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]]:
        assert time.monotonic() < deadline, "the daemon never started"
        time.sleep(0.1)
    sandbox.jail(proc.pid).kill()
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


def test_freeze_stops_every_process_until_thawed(sandbox):
    tmp_path = Path(sandbox.workdir)
    counter = tmp_path / "count"
    (tmp_path / "tick.py").write_text(textwrap.dedent(f"""
        import os, time
        if os.fork() == 0:          # a child ticks too: it must stop as well
            pass
        n, mine = 0, {str(counter)!r} + str(os.getpid())
        while True:
            n += 1
            with open(mine + ".tmp", "w") as f:     # a whole number or none: never a half-written file
                f.write(str(n))
            os.replace(mine + ".tmp", mine)
            time.sleep(0.02)
    """))
    proc = sandbox.popen([sandbox.python, "tick.py"], dict(ENV))
    jail = sandbox.jail(proc.pid)

    def ticks():
        return {p.name: p.read_text() for p in tmp_path.glob("count*") if not p.name.endswith(".tmp")}

    try:
        deadline = time.monotonic() + 15
        while len(ticks()) < 2:
            assert time.monotonic() < deadline, "the ticking processes never started"
            time.sleep(0.1)

        assert jail.freeze(), "the sandbox could not be frozen"
        frozen = ticks()
        time.sleep(0.5)   # a stopped process writes nothing, however long we look
        assert ticks() == frozen, "a process kept running while the sandbox was frozen"
        jail.thaw()
        deadline = time.monotonic() + 15   # a busy machine may take a while to run them again
        while not all(ticks()[k] != v for k, v in frozen.items()):
            assert time.monotonic() < deadline, f"the sandbox did not resume within 15 s: {frozen} then {ticks()}"
            time.sleep(0.05)
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


# --- the user method: an unprivileged user of its own (containers without namespaces) ---------
@as_root
def test_the_user_method_keeps_the_graders_files_and_processes_out_of_reach(user_sandbox, tmp_path):
    private = Path(tempfile.mkdtemp(prefix="sandbox-test-grader-"))     # like the cluster's folder: 0700
    (private / "secrets.json").write_text("{}")
    other = Path(tempfile.mkdtemp(prefix="sandbox-test-other-"))        # another grading's folder
    give(other, new_uid())
    (user_sandbox.workdir / "probe.py").write_text(textwrap.dedent(f"""
        import os, signal
        print("uid", os.getuid(), os.getgid(), os.getgroups())
        for path in ({str(private / "secrets.json")!r}, {str(other)!r}):
            try:
                open(path).read() if path.endswith(".json") else os.listdir(path)
                print("READ", path)
            except OSError as e:
                print("refused", e.strerror)
        try:
            os.kill({os.getpid()}, signal.SIGSTOP)
            print("SIGNALLED the grader")
        except OSError as e:
            print("refused", e.strerror)
        open("mine.txt", "w").write("ok")
    """))
    try:
        proc = user_sandbox.popen([user_sandbox.python, "probe.py"], dict(ENV), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=60)
    finally:
        shutil.rmtree(private), shutil.rmtree(other)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines[0] == f"uid {user_sandbox.uid} {user_sandbox.uid} []"
    assert lines[1:] == ["refused Permission denied", "refused Permission denied", "refused Operation not permitted"]
    assert (user_sandbox.workdir / "mine.txt").stat().st_uid == user_sandbox.uid


@as_root
def test_the_user_methods_sandbox_ends_with_its_program(user_sandbox):
    """As with bwrap: the program's exit status comes out (128 + signal if killed), and what it
    left running in the background dies with it."""
    marker = str(87000 + os.getpid() % 400)
    proc = user_sandbox.popen(["sh", "-c", f"(setsid sleep {marker} &) ; exit 3"], dict(ENV))
    assert proc.wait(30) == 3
    time.sleep(0.3)
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]]
    assert user_sandbox.popen(["sh", "-c", "kill -9 $$"], dict(ENV)).wait(30) == 137


@as_root
def test_whatever_runs_as_the_gradings_user_is_swept(user_sandbox):
    uid = user_sandbox.uid
    escaped = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "300"])
    deadline = time.monotonic() + 10
    while psutil.Process(escaped.pid).uids().real != uid:   # setpriv has not switched yet
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert sweep(uid) == 1
    escaped.wait(10)      # a sleep of 300 s has ended (killed, and reaped by the sweep)
    assert sweep(uid) == 0


def test_the_user_method_is_chosen_only_where_it_holds(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_SANDBOX", "chroot")
    assert method()[0] is None and "use bwrap or user" in method()[1]
    monkeypatch.setenv("COURSE_SANDBOX", "user")
    assert method()[0] == ("user" if os.geteuid() == 0 and runs_as_another_user(sys.executable) else None)
    monkeypatch.delenv("COURSE_SANDBOX")
    assert method() == ("bwrap", "")
    private, shared = tmp_path / "private", tmp_path / "shared"
    private.mkdir(mode=0o700)
    shared.mkdir(mode=0o755)
    private.chmod(0o700), shared.chmod(0o755)
    found = exposed(shared) + exposed(private)
    assert shared in found and private not in found
    assert (ROOT / "solutions") in found      # a checkout: the user method refuses to grade from it
    assert not readable_by_all(private) and not readable_by_all(private / "inside")
    assert not readable_by_all(shared)        # it is open, but pytest's folder above it is not
    open_to_all = Path(tempfile.mkdtemp())
    try:
        open_to_all.chmod(0o755)
        assert readable_by_all(open_to_all) and readable_by_all(Path("/usr/bin"))
    finally:
        open_to_all.rmdir()
