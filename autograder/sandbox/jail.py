"""The jail: a running sandbox, by the pid of its outer process (`Jail`): every process of it
frozen (SIGSTOP) while a check runs and thawed after, its program signalled, the whole of it
killed."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil

from cluster.waiting import wait_for

from selfcheck.checks.scripts import kill_tree

FREEZE_DEADLINE_S = 20  # to stop every process of a sandbox before a check (5 s once ran out under CI's load)


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


def descendants(root: int, members: Path) -> list[psutil.Process] | None:
    """The processes listed in `members` (a cgroup.procs file) that descend from root, parents
    before children; None if the file cannot be read (the caller looks at every process)."""
    try:
        pids = {int(line) for line in members.read_text().split()}
    except (OSError, ValueError):
        return None
    children: dict[int, list[int]] = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue  # ended meanwhile
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        try:
            found.append(psutil.Process(pid))
        except psutil.Error:
            continue
        todo += children.get(pid, [])
    return found


class Jail:
    """A running sandbox, by the pid of its outer process (bwrap, or the user method's
    supervisor): freeze, thaw, kill, all at once."""

    def __init__(self, pid: int | None, supervised: bool = False, members: Path | None = None):
        self.pid, self.supervised, self.members = pid, supervised, members
        self.unfrozen: list[str] = []  # what a failed freeze could not stop: pid, name, state

    def processes(self) -> list[psutil.Process]:
        """Every process of the sandbox. Inside a PID namespace, orphans are adopted by its
        pid 1, and under the user method by its supervisor (a subreaper), so they stay
        descendants of the outer process. Where the grading's cgroup lists its processes
        (`members`: no process of it can leave that group), they are looked for there only:
        psutil's walk reads every process of the machine, dozens of times a grading."""
        try:
            root = psutil.Process(self.pid)
            if self.members is not None:
                found = descendants(root.pid, self.members)
                if found is not None:
                    return [root, *found]
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
