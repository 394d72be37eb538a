"""The capstone's self-test, the `capstone` layer (`make test-capstone`, which CI runs last): every
grading starts a three-broker cluster of its own, the student's job (Spark) twice, and stops and
kills brokers, so they run one at a time, apart from the other layers. Same rules as
test_selftest.py: every case its exact score, nothing left behind."""

import pytest

from layers import GRADINGS_LOG, capstone
from proven import self_test
from staff.selftest import case_names, labs

pytestmark = [pytest.mark.timeout(3000), pytest.mark.slow, pytest.mark.heavy, pytest.mark.capstone]

LABS = [lab for lab in labs() if capstone(lab)]


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
