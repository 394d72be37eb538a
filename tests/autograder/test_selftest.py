"""The grader grades its own corpus through its real CLI, six submissions at a time: every
solution full marks, every blank release 0, every mistake and attack its expected score (see
staff/corpus/). All cases are graded once, in parallel, by a fixture; each case is then
its own test, so a failed one shows by name and the others still report. The labs that run
Spark have their own module, test_selftest_heavy.py (the `heavy` layer)."""

import pytest

from layers import GRADINGS_LOG, heavy
from proven import self_test
from staff.selftest import case_names, labs

LABS = [lab for lab in labs() if not heavy(lab)]
CASES = case_names(LABS)

# The first test waits for the fixture's ~130 gradings (each bounded by its own deadline), so it
# may take longer than pytest-timeout's default for one test.
pytestmark = [pytest.mark.timeout(2400), pytest.mark.slow]


@pytest.fixture(scope="module")
def report(cluster):
    # Gradings mostly wait (kernels, polls, groups, crashes, cell deadlines): on 2 cores six at a
    # time used about half the CPU and took 6m47s for 93 gradings, three at a time 10m53s.
    return self_test(LABS, log=GRADINGS_LOG)


@pytest.mark.parametrize("lab,case", CASES, ids=[f"{lab}-{case}" for lab, case in CASES])
def test_case(report, lab, case):
    if lab in report.proofs:
        pytest.skip(report.proofs[lab].says())
    assert report.verdict(lab, case) is None, report.verdict(lab, case)


def test_nothing_outside_the_gradings_changed(report):
    assert report.report.changed == []
