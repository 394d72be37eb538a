"""The test suite's layers of whole gradings and notebooks (`make test`, `make test-heavy`,
`make test-capstone`).

The labs whose gradings start programs for the student's work (JVMs, or lab 12's stream apps)
take tens of seconds of both cores each: their self-tests, solution runs and checks with a cluster
are the `heavy` layer, graded two at a time on a machine that does nothing else. The capstone,
whose every grading runs a cluster of its own, a Spark job and the faults between them, is a layer
of its own (`capstone`, also marked heavy), so that neither layer outgrows half an hour.

A lab whose self-test a passing run proved on exactly these inputs is not graded again: its record
in tests/proven/ says so (tests/proven.py). A layer's figures below are for a run that grades
everything (a clone without records, or COURSE_PROVE_AGAIN=1)."""

from cluster.settings import ROOT

# One line per self-test grading as it ends (case, seconds, CPU, score), every layer's: .ci/run
# prints the slowest, so a CI log says where the time went.
GRADINGS_LOG = ROOT / "build" / "gradings.log"

# Each layer's budget in minutes on 2 cores from a clean clone (CI's .ci/run: all three and the
# set-up within 60), and what it took: .ci/durations.py prints them side by side. A new lab states
# its cost in its entry below (or, for a light lab, adds its gradings to `make test`'s self-test).
# Measured (a clean clone's .ci/run, November 2026): make test 26 min alone (35 with other work on
# the machine), make test-heavy 23, make test-capstone 14; the jars 1 (a warm cache; an empty one
# also downloads the jars and makes Spark's class archive: 10.5 min on a machine busy with other
# work). Since the class archives (cluster/class_sharing.py) and forked gradings, the light
# self-test's 174 gradings used 951 CPU s (1167 for 170 before): lab 7 28 CPU s a grading (36).
# On Kafka 4.3.1 and PySpark 4.2.0 (a clean clone of 1ff73b9 with nothing recorded, three other
# sessions' work on the machine): jars 1:11, make test 23:53, test-heavy 23:07, test-capstone 14:17,
# all 62:28; every layer passed. Everything merged (26e1ef7: lab 10's real-time mode, lab 12's
# transformWithState, the CDC groundwork's tests), nothing recorded, helpers beside it: jars 2:54,
# test 26:56, test-heavy 24:05, test-capstone 15:08, all 69:03, every layer passed.
# Lab 4's share groups (lab4-q6: four JVM share members and two tool JVMs a grading) took its
# gradings from about 4 CPU s to 11: its 22 in 278 s and 234 CPU s on 2 cores (November 2026).
# Every lab worth 10, predictions parts of their own (a clean clone of b939502, labs 1, 2, 3, 7 and
# 8 recorded, the rest graded; a helper's Connect run beside it for 2 minutes): jars 1:24, make
# test 16:05, test-heavy 23:22, test-capstone 14:53, all 55:44 (one test of the capstone layer
# failed, on the design note's old points; fixed after). With every lab recorded (a clean clone
# of 525f2fa): jars 1:17, test 10:28, test-heavy 4:42, test-capstone 0:51, all 17:18, every test
# passed (932 passed, 303 skipped as proven). Lab 11 on schemas alone, the CDC lab (13, four gradings
# at once) and the capstone renumbered 14 (a clean clone of 7a75d15, nothing recorded, the machine
# otherwise quiet): jars 1:09, make test 25:32, test-heavy 27:25 (its self-test 88 gradings in
# 1619 s), test-capstone 14:50, all 68:56; 1267 passed. With every lab recorded the run is about 18.
# November 29th, a new and slower machine, a clean clone of 3f90fda (lab 14 added, every record void):
# jars 2:25, make test 41:18 (its tests' own times sum to 4910 s, about 1.6 times the last run's;
# lab 4's gradings 65-145 s six at once against 65 s before, alone 60 s on both versions of the
# code), and 4 of lab 4's gradings lost lab4-q6 to its 12 s idle (now 20); the run stopped there.
# At that pace a full run with nothing recorded is about two hours: past CI's 90 minutes.
# Lab 14 (running Kafka) joined the capstone layer: its self-test (8 gradings, two at a time, about
# 4.5 minutes on 2 cores) and its solution run (about 3 minutes), so that layer's budget grew to 24.
# The same machine, a clean clone of 7153357 (lab 14 in, lab4-q1's timeout 5 s, nothing recorded,
# nothing else running; each layer run even if one before failed): jars 2:03, make test 34:56
# (1175 passed), test-heavy 32:15 (105), test-capstone 24:15 (33; lab 14's 8 gradings 30-110 s
# each), all 93:29, every test passed; a whole run's records written and committed. Over CI's 90
# with nothing recorded on this machine: the layers fit their budgets only on the faster one above.
BUDGET_MIN = {"test": 28, "test-heavy": 30, "test-capstone": 24}

HEAVY = {
    "lab9": "two Spark drivers a grading (the kernel's and the student's job, run three times): 21 gradings, 39 CPU s each",
    "lab10": "a Spark driver in the kernel, which every part's check runs queries on: 18 gradings, 30 CPU s each",
    # Since its Connect part moved to lab 13 (November 2026), lab 11 starts nothing but its kernel: 21
    # gradings of 1.4 CPU s each, its self-test 45 s on 2 cores (27-32 s with two other seeds). It stays
    # in this layer, where the budget it had (26 gradings of 11 CPU s) is kept; it could join `make test`
    # with a case in test_self_check_agrees.py (its --via kernel run agrees: 18 of 18).
    "lab11": "nothing but its kernel since its Connect part moved to lab 13: 21 gradings, 1.4 CPU s each",
    "lab12": "the student's three stream apps, one killed and started again, each making its own topics: 13 gradings, "
    "10 CPU s each (lab12-q3's app about 5 s and 2 CPU s of it; the self-test 336 s, 120 CPU s, on 2 cores)",
    "lab13": "PostgreSQL and two Connect workers of the grader's a grading, a worker killed, the student's sink run four "
    "times: 15 gradings, 11-16 CPU s each, 40-135 s, mostly waiting; 1.8 GB at a grading's peak, brokers included. "
    "Four at once (its POLICY): the self-test in 338 s and 213 CPU s on 2 cores (two at a time: about 14 minutes; "
    "November 2026); its solution run about 3.5 minutes",
}
CAPSTONE = {
    "lab14": "a three-broker cluster of the grading's own and a fourth broker added, the grader's producer and "
    "consumer working while the student's rebalance moves its topics and its script restarts every broker: "
    "8 gradings, two at a time (measured: see the self-test's line per grading)",
    "lab15": "a three-broker cluster of the grading's own, the student's Spark job started twice, brokers stopped and "
    "killed: 21 gradings, 56 CPU s each (before the class archives), two at a time",
}


def heavy(lab: str) -> bool:
    """In the heavy layer or the capstone's: not in `make test`."""
    return lab in HEAVY or lab in CAPSTONE


def capstone(lab: str) -> bool:
    return lab in CAPSTONE
