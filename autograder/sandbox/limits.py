"""Resource limits: the rlimits of every process in a sandbox (`Limits`: address space, processes,
file size, CPU time, open files), set inside the sandbox before the student's program starts
(programs/set_limits.py), so they cannot be raised again."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
# be visible where they run): autograder/sandbox/programs/ says what each does. Each is read
# where it is used: set_limits.py here, join_cgroups.py in cgroups.py, supervise.py in bwrap.py.
_PROGRAMS = Path(__file__).with_name("programs")
_SET_LIMITS = (_PROGRAMS / "set_limits.py").read_text()  # inside the sandbox, before the program
