"""The jail that all student code runs in while it is graded: bubblewrap (bwrap).

Every grading kernel, and every script of the student's that a check runs (lab 4's group
members, lab 5's consumer under the crash harness), is a process tree inside its own
bubblewrap sandbox:

- its own PID namespace: when the sandbox is killed, everything in it dies, double-forked
  daemons included (bwrap's init is pid 1 inside, and dies with the grader);
- its own user namespace, as an unprivileged user with no capabilities;
- a filesystem of its own: the system's programs and libraries, the Python environment,
  the course's helper packages and the lab's release files, all read-only; a private
  writable working folder and /tmp; nothing else (no solutions/, no cluster data, no other
  grading's folder, no /proc of the grader: /proc shows only the sandbox's processes);
- a minimal environment (the caller gives it whole: no secrets, no seed);
- resource limits set inside before the student's code starts (rlimits cannot be raised
  again): address space, processes, file size, CPU time, open files; and where the machine
  lets us make control groups (v1, a writable v2 subtree, or systemd's scopes), a bound on the
  memory and processes of the sandbox as a whole (`Cgroups`; `bounds_off()` says what is off);
- freeze/thaw: while a check runs, every process of the sandbox is stopped (SIGSTOP), so
  nothing the student left running can act during the check.

The network namespace is shared: student code must reach the brokers. What it may do there
is the brokers' business (authentication and ACLs), not the sandbox's.

Where bubblewrap cannot make namespaces (inside most containers: Docker's default seccomp
profile forbids them, Gradescope's included) and the grader runs as root, the sandbox is an
unprivileged user instead ("user" method, the usual Gradescope practice): each grading's
sandboxes run as a uid of that grading's own (setpriv: no groups, no capabilities, no new
privileges), each under a supervisor that stays root, so
- files the grader keeps private (mode 0600/0700: the grading secret, the cluster's folder,
  other gradings' folders, the grader's logs) cannot be read; the grading refuses to start
  while anything of the staff's (solutions/, the corpus, the tests) is readable by others
  (`exposed()`): grade from the Gradescope package, which has none of it;
- it cannot signal or trace the grader's processes (another uid), and everything running as
  its uid is found and killed at the end, double-forked daemons included;
- the rlimits are per uid, so the process limit bounds the whole sandbox.
What it keeps: it sees the machine's other processes in /proc (not their environment), the
system's files that are readable by all, and /tmp (its TMPDIR is in its own folder).

Where neither works (macOS, Windows; Linux without namespaces, not as root), `method()` says
why; the grader then refuses to grade unless told `--no-sandbox`, and every result says what
is not guaranteed.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from functools import cache, partial
from pathlib import Path

import psutil

from cluster.settings import ROOT, env, jars_cache
from cluster.waiting import wait_for

from selfcheck.checks.scripts import kill_tree, running, wait_dead

from . import STAFF, STUDENT

SANDBOX_UID = 65534  # "nobody" inside the sandbox
USER_UIDS = range(61000, 65000)  # the "user" method's uids: one per grading, in no /etc/passwd
HOSTNAME = "grading"  # the sandbox's own host name (its UTS namespace)
FREEZE_DEADLINE_S = 20  # to stop every process of a sandbox before a check (5 s once ran out under CI's load)
TMP_SIZE = 512 * 2**20  # the sandbox's /tmp, in memory
# The parts of /etc that programs need (TLS roots, users, name lookup, the JDK's links);
# the rest of /etc stays out.
ETC_ALLOWED = (
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "passwd",
    "group",
    "resolv.conf",
    "nsswitch.conf",
    "host.conf",
    "localtime",
    "timezone",
    "alternatives",
    "java-17-openjdk",
    "java-21-openjdk",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "mime.types",
    "fonts",
    "matplotlibrc",
    "gai.conf",
    "protocols",
    "services",
)
# What the student's kernel may read of the course: what students have anyway (autograder.STUDENT:
# the self-checks, the connection helper, the data, the released labs), whole folders. Never the
# grader, the staff's tools, solutions/, the cluster's data folders or the grader's results.
COURSE_READABLE = (*STUDENT, "pyproject.toml")
NOT_GUARANTEED = (
    "graded WITHOUT a sandbox (--no-sandbox): the student's code ran with the grader's "
    "own powers; it could read files it should not, outlive the grading, or change what "
    "the checks see. Use this grade for feedback only."
)


@dataclass(frozen=True)
class Limits:
    """Resource limits of every process in a sandbox (rlimits, per process)."""

    memory_mb: int = 4096  # address space: a memory hog gets MemoryError, not the machine
    processes: int = 256  # threads and processes of the sandbox's user (a fork bomb stops here)
    file_mb: int = 512  # largest file it may write
    cpu_s: int = 900  # CPU seconds per process
    open_files: int = 1024

    def rlimits(self) -> dict[str, int]:
        return {
            "RLIMIT_AS": self.memory_mb * 2**20,
            "RLIMIT_NPROC": self.processes,
            "RLIMIT_FSIZE": self.file_mb * 2**20,
            "RLIMIT_CPU": self.cpu_s,
            "RLIMIT_NOFILE": self.open_files,
            "RLIMIT_CORE": 0,
        }


# Three small programs the sandbox runs with `python -I -S -c` (no file of the checkout needs to
# be visible where they run): autograder/sandbox_programs/ says what each does.
_PROGRAMS = Path(__file__).with_name("sandbox_programs")
_SET_LIMITS = (_PROGRAMS / "set_limits.py").read_text()  # inside the sandbox, before the program
_SUPERVISE = (_PROGRAMS / "supervise.py").read_text()  # the user method's outer process
_JOIN_CGROUPS = (_PROGRAMS / "join_cgroups.py").read_text()  # outside, just before bwrap
CGROUP_ROOT = Path("/sys/fs/cgroup")  # where the machine mounts its control groups (tests mount their own)
BOUNDS = ("memory", "pids")  # the whole-sandbox bounds: total memory, number of processes
GRADER_LEAF = "kafka-course-grader"  # cgroup v2: where the grader's own processes move (see _delegated)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _mounts() -> dict[str, str]:
    """Mount point -> filesystem type, from /proc/self/mountinfo (the last mount on a point wins)."""
    found = {}
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        fields = line.split()
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])  # a space is \040
        found[point] = fields[fields.index("-") + 1]
    return found


def hierarchy(root: Path = CGROUP_ROOT) -> str | None:
    """Which control groups the machine has at root: "v1" (a pids or memory controller mounted at
    root/<controller>: older distributions, and hybrid ones), "v2" (root is the unified hierarchy:
    Debian 12, Ubuntu 22.04 and later, Fedora), or None."""
    mounts, top = _mounts(), os.path.realpath(root)
    if any(mounts.get(os.path.join(top, controller)) == "cgroup" for controller in BOUNDS):
        return "v1"
    if mounts.get(top) == "cgroup2" and os.path.exists(os.path.join(top, "cgroup.controllers")):
        return "v2"
    return None


def _delegated(root: Path, parent: str | None) -> tuple[Path | None, str]:
    """cgroup v2: the group to make the sandboxes' groups in (or None, and why not): `parent`, a
    path in the hierarchy as /proc/self/cgroup writes them (made if missing), else the grader's
    own group if the grader may write it (delegated to it, or the grader is root)."""
    if parent:
        group = root / parent.strip("/")
        try:
            group.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            return None, f"cannot make the cgroup v2 parent {group} ({e.strerror})"
    else:
        own = [line[3:] for line in _read(Path("/proc/self/cgroup")).splitlines() if line.startswith("0::")]
        if not own:
            return None, "the grader is in no cgroup v2 group"
        group = root / own[0].strip("/")
        if group.name == GRADER_LEAF:  # an earlier grading of this grader moved it there
            group = group.parent
    if not all(os.access(path, os.W_OK) for path in (group, group / "cgroup.procs", group / "cgroup.subtree_control")):
        return None, f"no writable cgroup v2 subtree: the grader may not write its group {group}"
    # v2's rule: a group with processes of its own (any but the root, which has no cgroup.type)
    # cannot enable controllers for its children; so its processes, the grader's, move to a leaf.
    if (group / "cgroup.type").exists() and _read(group / "cgroup.procs").split():
        leaf = group / GRADER_LEAF
        try:
            leaf.mkdir(exist_ok=True)
        except OSError as e:
            return None, f"cannot make {leaf} for the grader's own processes ({e.strerror})"
        for pid in _read(group / "cgroup.procs").split():
            try:
                (leaf / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # it has exited
    return group, ""


@cache
def systemd_scope(limits: "Limits") -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """Where systemd runs: a prefix that starts a program in a transient scope of its own
    (`systemd-run --scope`; the user's manager when the grader is not root) with the sandbox's
    memory and process bounds, which of BOUNDS hold there (read back from inside a probe's
    scope: a controller systemd was not delegated is silently not applied), and why not."""
    run, env_program = shutil.which("systemd-run"), shutil.which("env") or "/usr/bin/env"
    if run is None or not Path("/run/systemd/system").exists():
        return (), (), "no systemd here"
    memory = limits.memory_mb * 2**20
    prefix = [
        run,
        "--scope",
        "--quiet",
        "--collect",
        "-p",
        f"MemoryMax={memory}",
        "-p",
        "MemorySwapMax=0",
        "-p",
        f"TasksMax={limits.processes}",
        "--",
    ]
    if os.geteuid() != 0:
        # systemd-run finds the user's manager through XDG_RUNTIME_DIR, which the sandbox's
        # environment leaves out: systemd-run gets it, the program does not
        prefix = [
            env_program,
            f"XDG_RUNTIME_DIR=/run/user/{os.getuid()}",
            run,
            "--user",
            *prefix[1:],
            env_program,
            "-u",
            "XDG_RUNTIME_DIR",
        ]
    probe = (
        "g=[l[3:] for l in open('/proc/self/cgroup').read().splitlines() if l.startswith('0::')][0]\n"
        "for f in ('memory.max','pids.max'):\n"
        " try:print(open('/sys/fs/cgroup'+g+'/'+f).read().strip())\n"
        " except (OSError,IndexError):print('-')"
    )
    try:
        out = subprocess.run(
            [*prefix, sys.executable, "-I", "-S", "-c", probe],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin"},
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return (), (), f"systemd-run --scope did not run ({e})"
    if out.returncode != 0:
        return (), (), f"systemd-run --scope failed: {out.stderr.strip()[:200]}"
    held = tuple(
        bound
        for bound, wanted, seen in zip(BOUNDS, (memory, limits.processes), out.stdout.split())
        if seen == str(wanted)
    )
    return tuple(prefix), held, "" if held == BOUNDS else "systemd's scopes here are not given both controllers"


class Cgroups:
    """Control groups that bound a whole sandbox: its total memory and its number of processes
    (all of one grading's sandboxes together). Only where this machine lets us make them (as
    root, or where an admin delegated them); elsewhere the per-process rlimits are the bound, and
    missing() says which whole-sandbox bounds are off. RLIMIT_NPROC alone does not hold when the
    grader runs as root, so there the pids group is needed.

    cgroup v1: a group per controller, /sys/fs/cgroup/<controller>/kafka-course/<name>. cgroup
    v2: one group, <parent>/kafka-course-<name>, under `parent` (a path in the hierarchy) or the
    grader's own group. Where v2 has no group the grader may write and systemd runs: a systemd
    scope for each sandbox (`systemd-run --scope`), so bounds per sandbox, not per grading."""

    def __init__(self, name: str, limits: "Limits", root: Path = CGROUP_ROOT, parent: str | None = None):
        self.dirs: list[Path] = []
        self.scope: tuple[str, ...] = ()  # systemd-run's prefix, where that is the way
        self.held: list[str] = []  # which of BOUNDS hold
        self.why: list[str] = []  # why the others do not, for staff
        self.kind = hierarchy(root)
        if self.kind == "v1":
            self._v1(root, name, limits)
        elif self.kind == "v2":
            self._v2(root, name, limits, parent)
        else:
            self.why.append(f"no cgroup v1 controllers and no cgroup v2 hierarchy at {root}")

    def _v1(self, root: Path, name: str, limits: "Limits") -> None:
        wanted = {
            "pids": {"pids.max": str(limits.processes)},
            "memory": {"memory.limit_in_bytes": str(limits.memory_mb * 2**20), "memory.swappiness": "0"},
        }
        mounts = _mounts()
        for controller, settings in wanted.items():
            if mounts.get(os.path.join(os.path.realpath(root), controller)) != "cgroup":
                self.why.append(f"no cgroup v1 {controller} controller at {root / controller}")
                continue
            folder = root / controller / "kafka-course" / name
            try:
                folder.mkdir(parents=True, exist_ok=True)
                for key, value in settings.items():
                    if (folder / key).exists():
                        (folder / key).write_text(value)
                self.dirs.append(folder)
                self.held.append(controller)
            except OSError as e:
                self.why.append(f"cannot make {folder} ({e.strerror})")

    def _v2(self, root: Path, name: str, limits: "Limits", parent: str | None) -> None:
        group, why = _delegated(root, parent)
        if group is None:
            scope, held, systemd_why = systemd_scope(limits)
            if held:
                self.scope, self.held = scope, list(held)
            self.why.append(f"{why}; {systemd_why}" if systemd_why else why)
            return
        wanted = {
            "memory": {"memory.max": str(limits.memory_mb * 2**20), "memory.swap.max": "0"},
            "pids": {"pids.max": str(limits.processes)},
        }
        offered, refused = _read(group / "cgroup.controllers").split(), {}
        for controller in wanted:
            if controller in offered:
                try:  # one at a time: the kernel refusing one must not stop the other
                    (group / "cgroup.subtree_control").write_text(f"+{controller}")
                except OSError as e:
                    refused[controller] = e.strerror
        folder = group / f"kafka-course-{name}"
        try:
            folder.mkdir(exist_ok=True)
        except OSError as e:
            self.why.append(f"cannot make {folder} ({e.strerror})")
            return
        self.dirs.append(folder)
        for controller, settings in wanted.items():
            if not (folder / next(iter(settings))).exists():  # a controller's files exist only where it is enabled
                if controller in offered:
                    self.why.append(
                        f"cannot enable {controller} in {group}/cgroup.subtree_control "
                        f"({refused.get(controller, 'its files did not appear')})"
                    )
                continue
            try:
                for key, value in settings.items():
                    if (folder / key).exists():
                        (folder / key).write_text(value)
                self.held.append(controller)
            except OSError as e:
                self.why.append(f"cannot set {controller}'s limit in {folder} ({e.strerror})")
        unoffered = [controller for controller in wanted if controller not in offered]
        if unoffered:
            self.why.append(
                f"no {' or '.join(unoffered)} controller in {group}/cgroup.controllers (bound to "
                "cgroup v1, or not delegated)"
            )

    def missing(self) -> list[str]:
        """The whole-sandbox bounds that do not hold here ("memory", "pids"); the rlimits still do."""
        return [bound for bound in BOUNDS if bound not in self.held]

    def prefix(self) -> list[str]:
        if self.scope:
            return list(self.scope)
        return [sys.executable, "-I", "-S", "-c", _JOIN_CGROUPS, *map(str, self.dirs), "--"] if self.dirs else []

    def remove(self, timeout_s: float = 5) -> None:
        """Delete the groups (possible once their last process has exited)."""

        def removed(folder: Path) -> bool:
            folder.rmdir()
            return True

        for folder in self.dirs:
            if folder.exists():
                wait_for(partial(removed, folder), timeout_s=timeout_s, every_s=0.1, retry_on=(OSError,))


def bounds_off(cgroups: Cgroups | None = None, parent: str | None = None) -> str:
    """For staff (a result's details, grade's first line): which whole-sandbox bounds are off here
    and why, or "" when all hold. Without a grading's groups, makes and removes a throwaway one
    (under `parent`, as Cgroups)."""
    if cgroups is None:
        probe = Cgroups(f"probe-{os.getpid()}", Limits(), parent=parent)
        probe.remove()
        return bounds_off(probe)
    off = cgroups.missing()
    if not off:
        return ""
    return f"whole-sandbox bounds off: {', '.join(off)} ({'; '.join(cgroups.why)}); per-process rlimits still apply"


def method() -> tuple[str | None, str]:
    """How student code is jailed here: ("bwrap", "") or ("user", why not bwrap), or (None,
    why neither) . COURSE_SANDBOX chooses one; unset, bwrap where it works, else the user
    method where the grader is root."""
    wanted = env("COURSE_SANDBOX")
    if wanted not in (None, "bwrap", "user"):
        return None, f"COURSE_SANDBOX={wanted!r} is not a sandbox method; use bwrap or user, or unset it."
    why = available() if wanted != "user" else "COURSE_SANDBOX=user"
    if why is None:
        return "bwrap", ""
    if wanted == "bwrap":
        return None, why
    if os.geteuid() != 0:
        return None, (
            f"{why} The other method, an unprivileged user of its own for each grading, needs "
            "the grader to run as root (e.g. in a container)."
        )
    if shutil.which("setpriv") is None:
        return None, f"{why} The user method needs setpriv (util-linux): apt install util-linux."
    if not runs_as_another_user(sys.executable):
        return None, (
            f"{why} The user method runs student code as another user, who cannot run this Python "
            f"({sys.executable}: a folder on its way, e.g. /root, is private). Install the course's "
            "environment from a Python that all users can run, as the Gradescope package's setup.sh does."
        )
    return "user", why


@cache
def runs_as_another_user(python: str) -> bool:
    """Whether an unprivileged user can start this interpreter (pyenv's under /root cannot)."""
    probe = subprocess.run(
        [
            "setpriv",
            f"--reuid={USER_UIDS[-1]}",
            f"--regid={USER_UIDS[-1]}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "/bin/sh",
            "-c",
            'exec "$0" -I -S -c pass',
            python,
        ],
        capture_output=True,
        timeout=30,
        cwd="/",
    )
    return probe.returncode == 0


def exposed(cluster_home: Path) -> list[Path]:
    """What student code running as another user could read that is the staff's alone."""
    found = []
    for path in [*(ROOT / name for name in STAFF), cluster_home]:
        try:
            mode = path.stat().st_mode
        except OSError:
            continue
        if mode & 0o004 or (path.is_dir() and mode & 0o001):
            found.append(path)
    return found


def readable_by_all(path: Path) -> bool:
    """Whether any user may read path: every folder on the way open to all (x), it too (r)."""
    path = Path(path).resolve()
    try:
        if not path.stat().st_mode & 0o004:
            return False
        return all(parent.stat().st_mode & 0o001 for parent in path.parents)
    except OSError:
        return False


def new_uid() -> int:
    """A uid for one grading's sandboxes that no running process has."""
    taken = {p.info["uids"].real for p in psutil.process_iter(["uids"]) if p.info.get("uids")}
    while (uid := USER_UIDS[secrets.randbelow(len(USER_UIDS))]) in taken:
        pass
    return uid


def sweep(uid: int, deadline_s: float = 10) -> int:
    """Kill every process of the user method's uid (whatever outlived its sandbox's
    supervisor, were it killed first); returns how many there were."""
    deadline, killed = time.monotonic() + deadline_s, 0
    while time.monotonic() < deadline:  # again, while anything of it was still forking
        found = [
            p for p in psutil.process_iter(["uids"]) if p.info.get("uids") and p.info["uids"].real == uid and running(p)
        ]
        if not found:
            break
        for p in found:
            try:
                p.kill()
            except psutil.Error:
                pass
        wait_dead(found, min(1.0, max(0.0, deadline - time.monotonic())))
        killed += len(found)
    return killed


def give(folder: Path, uid: int) -> None:
    """Hand a grading's working folder to its sandbox's user (the user method): the folder and
    what the sandbox writes in it; the release files stay the grader's, readable by all."""
    for path in (folder, *(p for p in folder.iterdir() if p.is_dir() and p.name.startswith("."))):
        os.chown(path, uid, uid)
    folder.chmod(0o700)


@cache
def available() -> str | None:
    """None if bubblewrap can make a sandbox here; otherwise why not, in words."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed; on Debian/Ubuntu: sudo apt install bubblewrap. It needs Linux."
    probe = subprocess.run(
        [bwrap, "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return (
            f"bubblewrap cannot create namespaces here ({probe.stderr.strip()[:200]}); unprivileged user "
            "namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1)."
        )
    return None


@cache
def _hosts_file() -> Path:
    """The machine's /etc/hosts plus the sandbox's own name: a JVM asks for its host's address
    when it starts (Spark's driver does), and fails if the name does not resolve."""
    import atexit
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="kafka-course-sandbox-"))
    atexit.register(shutil.rmtree, folder, True)  # one per grader process, gone with it
    try:
        known = Path("/etc/hosts").read_text()
    except OSError:
        known = "127.0.0.1 localhost\n"
    (folder / "hosts").write_text(f"{known.rstrip()}\n127.0.1.1 {HOSTNAME}\n")
    return folder / "hosts"


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", str(_hosts_file()), "/etc/hosts"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64"):
        path = Path("/") / top
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.exists():
            args += ["--ro-bind", str(path), str(path)]
    for name in ETC_ALLOWED:
        path = Path("/etc") / name
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    return args


def _python_binds() -> list[str]:
    """The interpreter, the virtual environment and the course packages, read-only, at their
    own paths (the venv's editable install points at the course folder)."""
    paths = {Path(sys.base_prefix), Path(sys.prefix)}
    paths.update(ROOT / name for name in COURSE_READABLE)
    cache_dir = jars_cache()  # Spark's connector jars
    if cache_dir.exists():
        paths.add(cache_dir)
    java_home = env("JAVA_HOME")
    if java_home and Path(java_home).exists():
        paths.add(Path(java_home).resolve())
    args = []
    for path in sorted(p for p in paths if p.exists()):
        if not str(path).startswith("/usr/"):
            args += ["--ro-bind", str(path), str(path)]
    return args


@dataclass
class Sandbox:
    """How to jail a command: the working folder it may write, the files it may read, limits."""

    workdir: Path
    readonly: tuple[Path, ...] = ()  # extra read-only files or folders (the release files)
    # extra folders it may write: a grader's folder given to one process the grader starts in the
    # sandbox (lab 11's Connect worker), which the kernel's sandbox never sees
    writable: tuple[Path, ...] = ()
    limits: Limits = field(default_factory=Limits)
    enabled: bool = True  # False: --no-sandbox (limits still apply)
    cgroups: Cgroups | None = None  # whole-sandbox bounds, where the machine allows them
    uid: int | None = None  # set: the user method, as this uid (see method()); else bwrap
    python: str = sys.executable  # the interpreter of the limits wrapper

    def wrap(self, argv: list[str]) -> list[str]:
        """The command line that runs argv in the sandbox, with the limits set."""
        limited = [
            self.python,
            "-I",
            "-S",
            "-c",
            _SET_LIMITS,
            *(f"{k}={v}" for k, v in self.limits.rlimits().items()),
            "--",
            *argv,
        ]
        prefix = self.cgroups.prefix() if self.cgroups else []
        if not self.enabled:
            return prefix + limited
        if self.user is not None:
            return [
                *prefix,
                sys.executable,
                "-I",
                "-S",
                "-c",
                _SUPERVISE,
                shutil.which("setpriv") or "setpriv",
                f"--reuid={self.uid}",
                f"--regid={self.uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
                *limited,
            ]
        workdir = str(Path(self.workdir).resolve())
        args = [
            *prefix,
            shutil.which("bwrap") or "bwrap",
            "--unshare-user",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            HOSTNAME,
            "--die-with-parent",
            "--new-session",
            # ipykernel would take its parent (bwrap's init, pid 1 inside) for an exited one;
            # --die-with-parent already ties the sandbox's life to the grader's.
            "--unsetenv",
            "JPY_PARENT_PID",
            # /tmp first: the course (and so the venv) may itself live under /tmp, and a
            # tmpfs mounted later would hide it.
            "--size",
            str(TMP_SIZE),
            "--tmpfs",
            "/tmp",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            *_system_binds(),
            *_python_binds(),
            "--bind",
            workdir,
            workdir,
        ]
        for path in self.writable:
            args += ["--bind", str(path), str(path)]
        for path in self.readonly:
            args += ["--ro-bind", str(path), str(path)]
        args += ["--remount-ro", "/", "--chdir", workdir, "--", *limited]
        return args

    def with_writable(self, folder: Path) -> "Sandbox":
        """The same sandbox, also allowed to write `folder` (a grader's folder, outside the
        working folder); under the user method the folder is handed to the sandbox's user."""
        if (uid := self.user) is not None:
            os.chown(folder, uid, uid)
        return replace(self, writable=(*self.writable, Path(folder)))

    def popen(self, argv: list[str], env: dict[str, str], **kwargs) -> subprocess.Popen:
        """Start argv in a sandbox of its own (its own PID namespace)."""
        return subprocess.Popen(self.wrap(argv), env=env, cwd=self.workdir, start_new_session=True, **kwargs)

    @property
    def user(self) -> int | None:
        """The uid its processes run as, under the user method (else None)."""
        return self.uid if self.enabled else None

    def jail(self, pid: int | None) -> "Jail":
        """The running sandbox whose outer process is pid."""
        return Jail(pid, supervised=self.user is not None)


def stopped(p: psutil.Process) -> bool:
    """Whether a process can run none of its own code: stopped, dead, or with a SIGSTOP pending
    that it has not taken yet (a process in an uninterruptible wait, on a machine whose disks are
    busy, takes it only when the wait ends: it stops then, before its next instruction; and no
    process of the sandbox is left running to send it SIGCONT meanwhile)."""
    if p.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
        return True
    try:
        status = Path(f"/proc/{p.pid}/status").read_text()
    except OSError:
        return False
    pending = 0
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return bool(pending & (1 << (signal.SIGSTOP - 1)))


def describe_process(p: psutil.Process) -> str:
    """pid, name and state of a process, for staff notes."""
    try:
        return f"{p.pid} {p.name()} {p.status()}"
    except psutil.Error:
        return f"{p.pid} (gone)"


class Jail:
    """A running sandbox, by the pid of its outer process (bwrap, or the user method's
    supervisor): freeze, thaw, kill, all at once."""

    def __init__(self, pid: int | None, supervised: bool = False):
        self.pid, self.supervised = pid, supervised
        self.unfrozen: list[str] = []  # what a failed freeze could not stop: pid, name, state

    def processes(self) -> list[psutil.Process]:
        """Every process of the sandbox. Inside a PID namespace, orphans are adopted by its
        pid 1, and under the user method by its supervisor (a subreaper), so they stay
        descendants of the outer process."""
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except (psutil.Error, TypeError, ValueError):
            return []

    def alive(self) -> bool:
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except (psutil.Error, TypeError, ValueError):
            return False

    def main(self) -> psutil.Process | None:
        """The program the sandbox was started for (the kernel): the deepest process on the
        chain of first children (bwrap -> bwrap's init -> the limits wrapper's exec)."""
        try:
            proc = psutil.Process(self.pid)
            if self.supervised:
                kids = proc.children()
                return min(kids, key=lambda p: (p.create_time(), p.pid)) if kids else None
            while proc.name() == "bwrap":
                kids = proc.children()
                if not kids:
                    return None
                proc = min(kids, key=lambda p: p.pid)
            return proc
        except (psutil.Error, TypeError, ValueError):
            return None

    def signal(self, signum: int) -> None:
        """Send signum to the sandboxed program (e.g. SIGINT: interrupt the running cell)."""
        proc = self.main()
        if proc is not None:
            try:
                proc.send_signal(signum)
            except psutil.Error:
                pass

    def freeze(self, deadline_s: float = FREEZE_DEADLINE_S) -> bool:
        """Stop every process in the sandbox, and return True once all of them are stopped at
        the same moment (then none can resume another). A process that forks, or resumes
        others (SIGCONT), while we stop them is caught by looking again; False if the sandbox
        could not be frozen within the deadline (the caller kills it)."""

        def still_running() -> list:
            running = []
            for p in self.processes()[1:]:
                try:
                    if not stopped(p):
                        running.append(p)
                        p.suspend()
                except psutil.Error:
                    pass
            return running

        # a short pause: let the signals land before looking again
        waited = wait_for(still_running, timeout_s=deadline_s, until=lambda running: not running, every_s=0.005)
        if not waited:
            self.unfrozen = [describe_process(p) for p in waited.last[:5]]  # for the staff notes
        return waited.done

    def thaw(self, main_only: bool = False) -> None:
        main = self.main()
        for p in [main] if main_only and main else self.processes()[1:]:
            try:
                p.resume()
            except psutil.Error:
                pass

    def kill(self) -> None:
        """Kill the sandbox and everything in it. With bwrap, SIGKILL to the outer process
        takes its init (and so the whole PID namespace) down; without a sandbox, every
        descendant is killed one by one."""
        if self.pid:
            kill_tree(self.pid)
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
