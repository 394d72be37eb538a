"""The test suite's layers of whole gradings and notebooks (`make test`, `make test-heavy`,
`make test-capstone`).

The labs whose gradings start programs for the student's work (JVMs, or lab 12's stream apps)
take tens of seconds of both cores each: their self-tests, solution runs and checks with a cluster
are the `heavy` layer, graded two at a time on a machine that does nothing else. The capstone,
whose every grading runs a cluster of its own, a Spark job and the faults between them, is a layer
of its own (`capstone`, also marked heavy), so that neither layer outgrows half an hour."""

from cluster.settings import ROOT

# One line per self-test grading as it ends (case, seconds, CPU, score), every layer's: .ci/run
# prints the slowest, so a CI log says where the time went.
GRADINGS_LOG = ROOT / "build" / "gradings.log"

HEAVY = {
    "lab9": "two Spark drivers a grading (the kernel's and the student's job, run three times)",
    "lab10": "a Spark driver in the kernel, which every part's check runs queries on",
    "lab11": "a Kafka Connect worker, started twice in lab11-q4",
    "lab12": "the student's two stream apps, one killed and started again, each making its own topics",
}
CAPSTONE = {
    "lab13": "a three-broker cluster of the grading's own, the student's Spark job started twice, brokers stopped and killed",
}


def heavy(lab: str) -> bool:
    """In the heavy layer or the capstone's: not in `make test`."""
    return lab in HEAVY or lab in CAPSTONE


def capstone(lab: str) -> bool:
    return lab in CAPSTONE
