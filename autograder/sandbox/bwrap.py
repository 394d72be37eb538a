"""Bubblewrap: how to jail a command (`Sandbox`: the bwrap command line, its namespaces, the
files it may see, its limits), and where bubblewrap cannot make namespaces, the "user"
method (a uid of each grading's own, and its helpers); `method()` says which one works here."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import psutil

from cluster.settings import ROOT, env, jars_cache

from selfcheck.checks.scripts import running, wait_dead

from .. import STAFF, STUDENT
from .cgroups import Cgroups
from .jail import Jail
from .limits import _PROGRAMS, _SET_LIMITS, Limits

SANDBOX_UID = 65534  # "nobody" inside the sandbox
USER_UIDS = range(61000, 65000)  # the "user" method's uids: one per grading, in no /etc/passwd
HOSTNAME = "grading"  # the sandbox's own host name (its UTS namespace)
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

_SUPERVISE = (_PROGRAMS / "supervise.py").read_text()  # the user method's outer process


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
    # sandbox (lab 13's Connect workers), which the kernel's sandbox never sees
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

    def popen(self, argv: list[str], env: dict[str, str], pass_fds: tuple[int, ...] = (), **kwargs) -> subprocess.Popen:
        """Start argv in a sandbox of its own (its own PID namespace). pass_fds: file descriptors
        the program gets, at the same numbers (lab 14's control channel: a pipe each way); every
        other descriptor of the grader's is closed at the fork (close_fds). bwrap, the limits
        wrapper, the cgroups joiner and the user method's supervisor all exec or fork without
        closing descriptors, so these reach the program (tests/autograder/test_broker_channel.py)."""
        return subprocess.Popen(
            self.wrap(argv), env=env, cwd=self.workdir, start_new_session=True, pass_fds=pass_fds, **kwargs
        )

    @property
    def user(self) -> int | None:
        """The uid its processes run as, under the user method (else None)."""
        return self.uid if self.enabled else None

    def jail(self, pid: int | None) -> "Jail":
        """The running sandbox whose outer process is pid."""
        return Jail(pid, supervised=self.user is not None, members=self.cgroups.members() if self.cgroups else None)
