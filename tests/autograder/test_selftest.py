"""The grader grades its own corpus through its real CLI, six submissions at a time: every
solution full marks, every blank release 0, every mistake and attack its expected score (see
autograder/corpus.py). All cases are graded once, in parallel, by a fixture; each case is then
its own test, so a failed one shows by name and the others still report."""

import pytest

from autograder.corpus import scenarios
from autograder.selftest import describe, grade_all, labs

# The first test waits for the fixture's ~90 gradings (each bounded by its own deadline), so it
# may take longer than pytest-timeout's default for one test.
pytestmark = [pytest.mark.timeout(2400), pytest.mark.slow]

CASES = [(lab, s.name) for lab in labs() for s in scenarios(lab)] + \
        [(lab, name) for lab in labs() for name in ("blank-release", "solution")]


@pytest.fixture(scope="module")
def report(cluster):
    # Gradings mostly wait (kernels, polls, groups, crashes, cell deadlines): on 2 cores six at a
    # time used about half the CPU and took 6m47s for 93 gradings, three at a time 10m53s.
    return grade_all(labs(), jobs=6)


@pytest.mark.parametrize("lab,case", CASES, ids=[f"{lab}-{case}" for lab, case in CASES])
def test_case(report, lab, case):
    outcome = next((o for o in report.outcomes if (o.case.lab, o.case.name) == (lab, case)), None)
    assert outcome is not None, f"{lab} {case} was not graded"
    assert outcome.ok, describe(outcome)


def test_nothing_outside_the_gradings_changed(report):
    assert report.changed == []
