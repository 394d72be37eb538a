"""The self-test of the labs whose gradings start programs for the student's work (lab 9: two Spark
drivers, lab 12: three stream apps, one started twice, lab 13: PostgreSQL and two Connect workers;
lab 11 stays here since its Connect part left), the `heavy` layer of the suite (`make test-heavy`,
which CI runs after `make test`): they keep cores busy for tens of seconds, so they are graded by
their cost (tests/layers.py, each lab's POLICY), on a machine that does nothing else,
instead of beside the other labs' time-sensitive checks. Same rules as test_selftest.py: every case
its exact score, nothing left behind."""

import pytest

from layers import GRADINGS_LOG, capstone, heavy
from proven import self_test
from staff.selftest import case_names, labs

pytestmark = [pytest.mark.timeout(3000), pytest.mark.slow, pytest.mark.heavy]

LABS = [lab for lab in labs() if heavy(lab) and not capstone(lab)]


@pytest.fixture(scope="module")
def report(cluster):
    return self_test(LABS, log=GRADINGS_LOG)


@pytest.mark.parametrize("lab,case", case_names(LABS), ids=[f"{lab}-{case}" for lab, case in case_names(LABS)])
def test_case(report, lab, case):
    if lab in report.proofs:
        pytest.skip(report.proofs[lab].says())
    assert report.verdict(lab, case) is None, report.verdict(lab, case)


def test_nothing_outside_the_gradings_changed(report):
    assert report.report.changed == []
