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

from autograder.sandbox import (
    CGROUP_ROOT,
    GRADER_LEAF,
    Cgroups,
    Limits,
    Sandbox,
    available,
    bounds_off,
    exposed,
    give,
    hierarchy,
    method,
    new_uid,
    readable_by_all,
    runs_as_another_user,
    sweep,
)
from cluster.settings import ROOT

pytestmark = pytest.mark.skipif(available() is not None, reason=f"no sandbox here: {available()}")
as_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="the user method needs root and setpriv"
)

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
            [sys.executable, "probe.py"], dict(ENV), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        out, err = proc.communicate(timeout=timeout)
    finally:
        cgroups.remove()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_filesystem_shows_the_course_code_read_only_and_nothing_of_the_grader(tmp_path):
    out = run(
        tmp_path,
        f"""
        import os, pathlib
        root = pathlib.Path({str(ROOT)!r})
        print(sorted(os.listdir(root)))
        for target in (root / "selfcheck" / "checks" / "lab1.py", pathlib.Path({sys.prefix!r}) / "x", pathlib.Path("/x")):
            try:
                target.write_text("pwned")
                print("WROTE", target)
            except OSError as e:
                print("refused", e.strerror)
        pathlib.Path("mine.txt").write_text("ok")          # its own folder is writable
        print("proc", sorted(p for p in os.listdir("/proc") if p.isdigit()))
        print("env", sorted(os.environ))
    """,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    visible = eval(lines[0])
    for hidden in ("solutions", ".cluster", ".grading-secret", "autograder", "staff", "tests"):
        assert hidden not in visible, hidden  # the grader and the staff's tools are not there at all
    assert {"cluster", "selfcheck", "datasets"} <= set(visible)
    assert [ln for ln in lines if ln.startswith("refused")] == ["refused Read-only file system"] * 3
    assert (tmp_path / "mine.txt").read_text() == "ok"
    pids = eval(lines[-2].split(" ", 1)[1])
    assert len(pids) <= 3, f"the sandbox's /proc shows other processes: {pids}"  # init, the probe
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
    out = run(
        tmp_path,
        """
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
    """,
        limits=Limits(memory_mb=2048, processes=40, file_mb=2),
    )
    assert "memory: MemoryError" in out.stdout, out.stdout + out.stderr
    assert "processes:" in out.stdout and int(out.stdout.split("processes: ")[1].split()[0]) < 40
    assert "file: File too large" in out.stdout


def test_freeze_stops_every_process_until_thawed(sandbox):
    tmp_path = Path(sandbox.workdir)
    counter = tmp_path / "count"
    (tmp_path / "tick.py").write_text(
        textwrap.dedent(f"""
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
    """)
    )
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
        time.sleep(0.5)  # a stopped process writes nothing, however long we look
        assert ticks() == frozen, "a process kept running while the sandbox was frozen"
        jail.thaw()
        deadline = time.monotonic() + 15  # a busy machine may take a while to run them again
        while not all(ticks()[k] != v for k, v in frozen.items()):
            assert time.monotonic() < deadline, f"the sandbox did not resume within 15 s: {frozen} then {ticks()}"
            time.sleep(0.05)
    finally:
        jail.kill()
        proc.wait(10)


def test_the_kernel_cannot_reach_the_grader(tmp_path):
    out = run(
        tmp_path,
        """
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
    """,
    )
    assert "still here" in out.stdout and out.stdout.startswith("parent 1")


def test_the_sandbox_resolves_its_own_host_name(tmp_path):
    """A JVM (Spark's driver, lab 9) looks up its own host name when it starts, and dies if
    the name does not resolve: the sandbox's name is in its /etc/hosts."""
    out = run(
        tmp_path,
        """
        import socket
        print(socket.gethostname(), socket.gethostbyname(socket.gethostname()))
    """,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["grading", "127.0.1.1"]


# --- the user method: an unprivileged user of its own (containers without namespaces) ---------
@as_root
def test_the_user_method_keeps_the_graders_files_and_processes_out_of_reach(user_sandbox, tmp_path):
    private = Path(tempfile.mkdtemp(prefix="sandbox-test-grader-"))  # like the cluster's folder: 0700
    (private / "secrets.json").write_text("{}")
    other = Path(tempfile.mkdtemp(prefix="sandbox-test-other-"))  # another grading's folder
    give(other, new_uid())
    (user_sandbox.workdir / "probe.py").write_text(
        textwrap.dedent(f"""
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
    """)
    )
    try:
        proc = user_sandbox.popen(
            [user_sandbox.python, "probe.py"], dict(ENV), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
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
    while psutil.Process(escaped.pid).uids().real != uid:  # setpriv has not switched yet
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert sweep(uid) == 1
    escaped.wait(10)  # a sleep of 300 s has ended (killed, and reaped by the sweep)
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
    assert (ROOT / "solutions") in found  # a checkout: the user method refuses to grade from it
    assert not readable_by_all(private) and not readable_by_all(private / "inside")
    assert not readable_by_all(shared)  # it is open, but pytest's folder above it is not
    open_to_all = Path(tempfile.mkdtemp())
    try:
        open_to_all.chmod(0o755)
        assert readable_by_all(open_to_all) and readable_by_all(Path("/usr/bin"))
    finally:
        open_to_all.rmdir()


# --- whole-sandbox bounds: control groups, v1 (this machine) and v2 -----------------------------
def own_v2_group(pid: int | str = "self") -> str:
    """A process's group in the cgroup v2 hierarchy, as /proc writes it (e.g. /user.slice/x.scope)."""
    return next(line[3:] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if line.startswith("0::"))


def members(group: Path) -> set[int]:
    return {int(pid) for pid in (group / "cgroup.procs").read_text().split()}


def cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def sandboxed_sleep(sandbox: Sandbox) -> tuple[subprocess.Popen, list[int]]:
    """A sandbox running `sleep`, and the pids of all its processes once the sleep has started."""
    proc = sandbox.popen(["sleep", "60"], dict(ENV))
    deadline = time.monotonic() + 15
    while True:
        procs = sandbox.jail(proc.pid).processes()
        if any(cmdline(p) == ["sleep", "60"] for p in procs):
            return proc, [p.pid for p in procs]
        assert time.monotonic() < deadline, "the sandbox's sleep never started"
        time.sleep(0.05)


@pytest.fixture
def cgroup2():
    """A cgroup v2 hierarchy: the machine's own unified one, mounted again in a folder of ours.
    On a v1 or hybrid machine (this one) the controllers bound to v1, memory and pids among
    them, are not in it; on a v2 machine they are, and the tests below check the real bounds."""
    if os.geteuid() != 0:
        pytest.skip("mounting a cgroup2 hierarchy needs root")
    point = Path(tempfile.mkdtemp(prefix="cgroup2-test-"))
    mounted = subprocess.run(["mount", "-t", "cgroup2", "none", str(point)], capture_output=True, text=True)
    if mounted.returncode != 0:
        point.rmdir()
        pytest.skip(f"cannot mount a cgroup2 hierarchy here: {mounted.stderr.strip()}")
    yield point
    subprocess.run(["umount", str(point)], check=True)
    point.rmdir()


def test_the_cgroup_hierarchy_is_told_from_the_mounts(cgroup2, tmp_path):
    assert hierarchy(cgroup2) == "v2"
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")  # looks like v2, but is no cgroup2 mount
    (tmp_path / "memory").mkdir()  # nor is this a v1 controller
    assert hierarchy(tmp_path) is None
    table = subprocess.run(["mount"], capture_output=True, text=True, check=True).stdout  # read another way
    v1 = any(f" on {CGROUP_ROOT}/{c} type cgroup " in table for c in ("memory", "pids"))
    v2 = f" on {CGROUP_ROOT} type cgroup2 " in table
    assert hierarchy() == ("v1" if v1 else "v2" if v2 else None)


def test_where_there_are_no_control_groups_staff_are_told_which_bounds_are_off(tmp_path):
    cgroups = Cgroups("nothing-here", Limits(), root=tmp_path)
    assert (cgroups.kind, cgroups.dirs, cgroups.prefix(), cgroups.missing()) == (None, [], [], ["memory", "pids"])
    assert bounds_off(cgroups) == (
        f"whole-sandbox bounds off: memory, pids (no cgroup v1 controllers and no cgroup v2 "
        f"hierarchy at {tmp_path}); per-process rlimits still apply"
    )


@pytest.mark.skipif(os.geteuid() != 0 or hierarchy() != "v1", reason="needs root on a cgroup v1 machine")
def test_on_cgroup_v1_a_grading_gets_a_group_per_controller_holding_both_bounds(tmp_path):
    name = f"test-{os.getpid()}-{time.monotonic_ns()}"
    cgroups = Cgroups(name, Limits(memory_mb=300, processes=30))
    try:
        pids, memory = CGROUP_ROOT / "pids" / "kafka-course" / name, CGROUP_ROOT / "memory" / "kafka-course" / name
        assert cgroups.dirs == [pids, memory]
        assert (pids / "pids.max").read_text() == "30\n"
        assert (memory / "memory.limit_in_bytes").read_text() == f"{300 * 2**20}\n"
        assert cgroups.missing() == [] and bounds_off(cgroups) == "" and bounds_off() == ""
        proc, inside = sandboxed_sleep(Sandbox(tmp_path, cgroups=cgroups))
        try:
            assert set(inside) <= members(pids) and set(inside) <= members(memory)
        finally:
            Sandbox(tmp_path).jail(proc.pid).kill()
            proc.wait(10)
    finally:
        cgroups.remove()
    assert not pids.exists() and not memory.exists()


def test_a_folder_named_like_a_v1_controller_is_not_taken_for_one(tmp_path, monkeypatch):
    """On a v2 machine /sys/fs/cgroup/pids/kafka-course/<name> would be a v2 group named "pids" that
    bounds nothing: a v1 controller counts only where one is mounted."""
    monkeypatch.setattr("autograder.sandbox.cgroups.hierarchy", lambda root: "v1")
    (tmp_path / "pids").mkdir()
    cgroups = Cgroups("g1", Limits(), root=tmp_path)
    assert (cgroups.dirs, cgroups.prefix(), cgroups.missing()) == ([], [], ["memory", "pids"])
    assert not (tmp_path / "pids" / "kafka-course").exists()
    assert bounds_off(cgroups) == (
        f"whole-sandbox bounds off: memory, pids (no cgroup v1 pids controller at "
        f"{tmp_path}/pids; no cgroup v1 memory controller at {tmp_path}/memory); "
        "per-process rlimits still apply"
    )


def test_on_cgroup_v2_a_grading_gets_a_group_under_the_configured_parent(cgroup2, tmp_path):
    parent = cgroup2 / f"kafka-course-test-{os.getpid()}"
    cgroups = Cgroups("g1", Limits(memory_mb=300, processes=30), root=cgroup2, parent=f"/{parent.name}")
    group = parent / "kafka-course-g1"
    try:
        offered = (parent / "cgroup.controllers").read_text().split()  # here not memory nor pids: v1 has them
        assert (cgroups.kind, cgroups.dirs) == ("v2", [group])
        assert cgroups.missing() == [c for c in ("memory", "pids") if c not in offered]
        if "memory" in offered:
            assert (group / "memory.max").read_text() == f"{300 * 2**20}\n"
        if "pids" in offered:
            assert (group / "pids.max").read_text() == "30\n"
        if cgroups.missing():
            assert bounds_off(cgroups) == (
                f"whole-sandbox bounds off: {', '.join(cgroups.missing())} (no {' or '.join(cgroups.missing())} "
                f"controller in {parent}/cgroup.controllers (bound to cgroup v1, or not delegated)); per-process "
                "rlimits still apply"
            )
        proc, inside = sandboxed_sleep(Sandbox(tmp_path, cgroups=cgroups))  # joined: one cgroup.procs on v2
        try:
            assert set(inside) <= members(group)
            assert {own_v2_group(pid) for pid in inside} == {f"/{parent.name}/{group.name}"}
        finally:
            Sandbox(tmp_path).jail(proc.pid).kill()
            proc.wait(10)
    finally:
        cgroups.remove()
        parent.rmdir()
    assert not group.exists()


def test_on_cgroup_v2_the_graders_own_group_is_used_once_its_processes_moved_to_a_leaf(cgroup2):
    """v2's rule: a group (but the root) that has processes cannot enable controllers for its
    children. The grader, in a group of its own, moves to a leaf; later gradings find it there."""
    before = own_v2_group()
    group = cgroup2 / f"kafka-course-test-{os.getpid()}"
    group.mkdir()
    (group / "cgroup.procs").write_text(str(os.getpid()))
    made = []
    try:
        made.append(Cgroups("g1", Limits(), root=cgroup2))
        assert own_v2_group() == f"/{group.name}/{GRADER_LEAF}"
        assert members(group) == set()
        made.append(Cgroups("g2", Limits(), root=cgroup2))  # beside the first, not under the leaf
        assert [c.dirs for c in made] == [[group / "kafka-course-g1"], [group / "kafka-course-g2"]]
        offered = (group / "cgroup.controllers").read_text().split()
        # on a v2 machine: both offered, and enabled only because the grader left the group
        assert made[0].missing() == [c for c in ("memory", "pids") if c not in offered]
    finally:
        (cgroup2 / before.lstrip("/") / "cgroup.procs").write_text(str(os.getpid()))
        for folder in sorted((p for p in group.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            folder.rmdir()  # the deepest first: a group with groups in it cannot go
        group.rmdir()


def test_the_v2_limits_are_written_where_the_kernel_shows_the_controllers(tmp_path, monkeypatch):
    """A folder laid out as a v2 kernel shows a delegated group once memory and pids are enabled
    for its children: this machine's v2 hierarchy has neither (v1 holds them), so the limits'
    writes are checked here; on a v2 machine the tests above check them against the kernel."""
    monkeypatch.setattr("autograder.sandbox.cgroups.hierarchy", lambda root: "v2")  # a folder is no cgroup2 mount
    parent, group = tmp_path / "delegated", tmp_path / "delegated" / "kafka-course-g1"
    group.mkdir(parents=True)
    for name, text in {
        "cgroup.controllers": "cpu memory pids\n",
        "cgroup.subtree_control": "\n",
        "cgroup.procs": "",
        "cgroup.type": "domain\n",
    }.items():
        (parent / name).write_text(text)
    for name in ("memory.max", "memory.swap.max", "pids.max", "cgroup.procs"):
        (group / name).write_text("max\n")
    cgroups = Cgroups("g1", Limits(memory_mb=300, processes=30), root=tmp_path, parent="/delegated")
    assert {n: (group / n).read_text() for n in ("memory.max", "memory.swap.max", "pids.max")} == {
        "memory.max": str(300 * 2**20),
        "memory.swap.max": "0",
        "pids.max": "30",
    }
    assert cgroups.missing() == [] and bounds_off(cgroups) == ""
    assert cgroups.prefix()[-2:] == [str(group), "--"]  # the sandbox joins the one group
    (parent / "cgroup.controllers").write_text("cpu memory\n")  # pids not delegated: memory still holds
    (group / "pids.max").unlink()
    again = Cgroups("g1", Limits(), root=tmp_path, parent="/delegated")
    assert again.missing() == ["pids"]
    assert bounds_off(again) == (
        f"whole-sandbox bounds off: pids (no pids controller in {parent}/cgroup.controllers "
        "(bound to cgroup v1, or not delegated)); per-process rlimits still apply"
    )


def test_without_a_writable_v2_group_a_systemd_scope_bounds_each_sandbox_where_systemd_runs(tmp_path, monkeypatch):
    """tmp_path as a v2 hierarchy in which the grader's own group is not there to write."""
    monkeypatch.setattr("autograder.sandbox.cgroups.hierarchy", lambda root: "v2")
    limits = Limits(memory_mb=300, processes=30)
    cgroups = Cgroups("g1", limits, root=tmp_path)
    own = tmp_path / own_v2_group().lstrip("/")
    if not Path("/run/systemd/system").exists():
        assert (cgroups.prefix(), cgroups.missing()) == ([], ["memory", "pids"])
        assert bounds_off(cgroups) == (
            f"whole-sandbox bounds off: memory, pids (no writable cgroup v2 subtree: the "
            f"grader may not write its group {own}; no systemd here); per-process rlimits "
            "still apply"
        )
        return
    assert cgroups.missing() == [], bounds_off(cgroups)  # a systemd that cannot bound its scopes: staff should know
    proc, inside = sandboxed_sleep(Sandbox(tmp_path, limits=limits, cgroups=cgroups))
    try:
        scope = CGROUP_ROOT / own_v2_group(proc.pid).lstrip("/")  # systemd-run moved itself there, then exec'd
        assert scope.name.endswith(".scope")
        assert ((scope / "memory.max").read_text(), (scope / "pids.max").read_text()) == (f"{300 * 2**20}\n", "30\n")
    finally:
        Sandbox(tmp_path).jail(proc.pid).kill()
        proc.wait(10)


def run_in_v2_group(
    cgroup2: Path, tmp_path: Path, code: str, bounds: Limits, bound: str
) -> subprocess.CompletedProcess:
    """Run code in a sandbox whose rlimits are the defaults (so they cannot be what stops it),
    in a v2 group with these bounds; skip where the group cannot have the bound."""
    parent = cgroup2 / f"kafka-course-test-{os.getpid()}"
    cgroups = Cgroups("bounded", bounds, root=cgroup2, parent=f"/{parent.name}")
    (tmp_path / "probe.py").write_text(textwrap.dedent(code))
    try:
        if bound in cgroups.missing():
            pytest.skip(
                f"{bounds_off(cgroups)}: run this test as root on a cgroup v2 machine (Debian 12, "
                "Ubuntu 22.04+, Fedora)"
            )
        proc = Sandbox(tmp_path, cgroups=cgroups).popen(
            [sys.executable, "probe.py"], dict(ENV), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        out, err = proc.communicate(timeout=120)
    finally:
        cgroups.remove()
        parent.rmdir()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_on_cgroup_v2_the_group_bounds_the_sandboxs_processes(cgroup2, tmp_path):
    out = run_in_v2_group(
        cgroup2,
        tmp_path,
        """
        import subprocess
        children = []
        try:
            for _ in range(60):
                children.append(subprocess.Popen(["sleep", "30"]))
        except OSError as e:
            print("processes:", len(children), type(e).__name__)
        for c in children:
            c.kill()
    """,
        Limits(processes=20),
        "pids",
    )
    assert "processes:" in out.stdout, out.stdout + out.stderr
    assert int(out.stdout.split("processes: ")[1].split()[0]) < 20


def test_on_cgroup_v2_the_group_bounds_the_sandboxs_memory(cgroup2, tmp_path):
    out = run_in_v2_group(
        cgroup2,
        tmp_path,
        """
        import subprocess, sys, time
        hogs = [subprocess.Popen([sys.executable, "-c", "import time; b = b'x' * (128 * 2**20); time.sleep(30)"])
                for _ in range(3)]   # 128 MB each, under the rlimit; 384 MB together, over the group's 256
        time.sleep(10)
        print("alive:", sum(h.poll() is None for h in hogs))
        for h in hogs:
            h.kill()
    """,
        Limits(memory_mb=256),
        "memory",
    )
    # the kernel's OOM killer took a hog (or the probe itself): never all three alive
    assert "alive: 3" not in out.stdout and ("alive:" in out.stdout or out.returncode != 0), out.stdout + out.stderr
