"""How large a class one shared three-broker cluster holds, from measurements.

What a class leaves on the cluster is partitions: a lab's first cell deletes the topics of
the student's earlier lab, so each student holds at most one lab's topics
(FOOTPRINT_PARTITIONS), and each grading running at once holds at most a namespace's budget. Partitions cost the brokers heap (each replica's
state) and restart time (a killed broker reopens and checks every replica it holds before it
serves again). Measured on the kit's brokers, 2 cores (issue 27's table; `python -m bench --only
load`: 30 students producing and reading, a runaway loop and grade-all beside, one broker killed):

    partitions (RF 3)   resident memory   a killed broker back:  quiet    under a class's load
    1,000               200-225 MB                              17 s
    1,560               310-460 MB                                       17 s
    3,000-3,120         260-520 MB                              34 s     64 s
    5,187               420-650 MB                                       84-120 s
    6,000               325-436 MB                              54 s
    ~12,000             two of three brokers died: OutOfMemoryError (Java heap space)

So one cluster on a 2-core machine serves up to 3,000 partitions (a broker back within about a
minute while the class works: max_partitions()), with a heap that grows with the partitions it
holds (heap_for). A larger machine holds more: measure it (`python -m bench --only load
--students N` on the hub's machine) and set COURSE_MAX_PARTITIONS to what held.

    python -m cluster capacity 250      # what a class of 250 needs, or why one cluster cannot hold it
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import settings as S

# The most partitions one student holds at once: every lab's solution run as a student, demos
# included (staff/as_student.py --demos): lab 8 in its middle, 16 topics (39 partitions; its
# last cell frees them), lab 3 35, lab 9 26, lab 2 20, the others 4-18.
FOOTPRINT_PARTITIONS = 39
# Gradings at once (grade-all's default jobs, and a few students' own gradings): each may fill
# its namespace's budget while it runs.
GRADINGS_AT_ONCE = 8
# Heap: what 3,000 partitions need with room to spare is the kit's 256 MB; above that, more
# per thousand partitions, as resident memory grew (~40 MB per 1,000 from 3,000 to 6,000) with
# room for the GC.
BASE_HEAP_MB, BASE_PARTITIONS, HEAP_MB_PER_1000 = 256, 3_000, 64


@dataclass(frozen=True)
class Plan:
    students: int
    partitions: int  # what the class and its gradings may hold at once (RF 3)
    heap_mb: int  # each broker's
    fits: bool

    def summary(self) -> str:
        return (
            f"{self.students} students hold up to {self.partitions:,} partitions (RF 3): "
            f"{FOOTPRINT_PARTITIONS} each for one lab's topics, and {S.PARTITION_BUDGET} for each of "
            f"{GRADINGS_AT_ONCE} gradings at once"
            + (
                ""
                if self.fits
                else f", more than the {max_partitions():,} one cluster holds with a broker back within a minute of "
                "a crash under a class's load (COURSE_MAX_PARTITIONS: measured on 2 cores)"
            )
        )

    def advice(self) -> str:
        return (
            f"Split the class across clusters (a hub each, up to {max_students():,} students), or run it on "
            "Kubernetes (python -m cluster k8s, docs/scaling.md). On a machine with more cores, measure what "
            "it holds (python -m bench --only load --students N) and set COURSE_MAX_PARTITIONS."
        )


def max_partitions() -> int:
    """What one cluster holds: COURSE_MAX_PARTITIONS if the hub's machine was measured, else the
    kit's 2-core figure (a killed broker back in 64 s under a class's load at 3,120 partitions)."""
    return int(S.env_value("COURSE_MAX_PARTITIONS"))


def partitions_for(students: int) -> int:
    return students * FOOTPRINT_PARTITIONS + GRADINGS_AT_ONCE * S.PARTITION_BUDGET


def heap_for(partitions: int) -> int:
    """Each broker's heap (MB) for a cluster that holds `partitions`."""
    extra = max(0, partitions - BASE_PARTITIONS)
    return BASE_HEAP_MB + HEAP_MB_PER_1000 * math.ceil(extra / 1000)


def max_students() -> int:
    return (max_partitions() - GRADINGS_AT_ONCE * S.PARTITION_BUDGET) // FOOTPRINT_PARTITIONS


def plan(students: int) -> Plan:
    partitions = partitions_for(students)
    return Plan(students, partitions, heap_for(partitions), partitions <= max_partitions())
