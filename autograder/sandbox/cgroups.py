"""Control groups: a bound on the memory and processes of a sandbox as a whole (all of one
grading's sandboxes together), where the machine lets us make them (cgroup v1, a writable v2
subtree, or systemd's scopes); `bounds_off()` says which bounds are off, and why."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from functools import cache, partial
from pathlib import Path

from cluster.waiting import wait_for

from .limits import _PROGRAMS, Limits

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

    def members(self) -> Path | None:
        """The file that lists every process of the grading's sandboxes (cgroup.procs of its pids
        group): a sandbox's processes are found among them, not among all the machine's (a class
        graded many at a time runs hundreds). None where there is no such group of ours."""
        for folder in self.dirs:
            if self.kind == "v2" or folder.parent.parent.name == "pids":
                return folder / "cgroup.procs"
        return None

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
