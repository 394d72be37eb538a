"""The test suite's two layers of whole gradings and notebooks (`make test`, `make test-heavy`).

The labs whose gradings start programs for the student's work (JVMs, or lab 12's stream apps)
take tens of seconds of both cores each: their self-tests, solution runs and checks with a cluster are the `heavy` layer, graded two
at a time on a machine that does nothing else."""

HEAVY = {
    "lab9": "two Spark drivers a grading (the kernel's and the student's job, run three times)",
    "lab10": "a Spark driver in the kernel, which every part's check runs queries on",
    "lab11": "a Kafka Connect worker, started twice in lab11-q4",
    "lab12": "the student's two stream apps, one killed and started again, each making its own topics",
}


def heavy(lab: str) -> bool:
    return lab in HEAVY
