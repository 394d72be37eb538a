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

# One job a module: limits.py (the rlimits), cgroups.py (the whole-sandbox bounds), bwrap.py (the
# command line, and the "user" method), jail.py (a running sandbox: freeze, thaw, kill). Each name
# is re-exported here; a test that patches one patches it where it is looked up (e.g.
# "autograder.sandbox.cgroups.hierarchy"), not here.
from .bwrap import (
    COURSE_READABLE,
    ETC_ALLOWED,
    HOSTNAME,
    NOT_GUARANTEED,
    SANDBOX_UID,
    TMP_SIZE,
    USER_UIDS,
    Sandbox,
    available,
    exposed,
    give,
    method,
    new_uid,
    readable_by_all,
    runs_as_another_user,
    sweep,
)
from .cgroups import BOUNDS, CGROUP_ROOT, GRADER_LEAF, Cgroups, bounds_off, hierarchy, systemd_scope
from .jail import FREEZE_DEADLINE_S, Jail, describe_process, stopped
from .limits import Limits

__all__ = [
    "BOUNDS",
    "CGROUP_ROOT",
    "COURSE_READABLE",
    "ETC_ALLOWED",
    "FREEZE_DEADLINE_S",
    "GRADER_LEAF",
    "HOSTNAME",
    "NOT_GUARANTEED",
    "SANDBOX_UID",
    "TMP_SIZE",
    "USER_UIDS",
    "Cgroups",
    "Jail",
    "Limits",
    "Sandbox",
    "available",
    "bounds_off",
    "describe_process",
    "exposed",
    "give",
    "hierarchy",
    "method",
    "new_uid",
    "readable_by_all",
    "runs_as_another_user",
    "stopped",
    "sweep",
    "systemd_scope",
]
