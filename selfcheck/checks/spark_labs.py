"""What the Spark labs' checks (9 and 10) share: a grading's policy with Spark drivers in it, the
time a value computed by Spark in the kernel may take, the bound on what the grader reads of an
output, and the folders it acts on, which must not be links."""

from __future__ import annotations

from pathlib import Path

from . import LabPolicy, expect

SPARK_VALUE_S = 120  # a value the grader reads by running a Spark job in the kernel
MAX_OUTPUT_ROWS = 100_000  # of the job's output (or lab 10's table), read by the grader (a day holds a few hundred)
SPARK_POLICY = LabPolicy(
    # Two Spark drivers at once (the kernel's and the job's): a grading's sandbox peaked at 306
    # threads and processes (its pids group's pids.peak), past the course's 256, where the job's
    # JVM died. Memory stays as it is, which holds both.
    sandbox_processes=768,
    # At most two such gradings at once: up to two Spark drivers each, whose sandbox peaked at 1.3 GB
    # (memory cgroup's max_usage), and a core while they run (1.14 cores measured alone).
    grading_cores=1.0,
    gradings_at_once=2,
    slowest_cell_s=120,  # the set-up cell starts Spark: seconds alone, far more when loaded
    # (each lab sets its checks_budget_s)
)


def no_links(workdir: Path, *names: str) -> None:
    """The grader acts on these paths in the notebook's folder: none may be a link (the grader
    follows none; cluster.safe_files refuses them too, this says so in the student's words)."""
    for name in names:
        expect(
            not (Path(workdir) / name).is_symlink(),
            f"{name} is a symbolic link",
            hint="Let Spark create its folders; the grader follows no links out of your folder.",
        )
