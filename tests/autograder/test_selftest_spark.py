"""The self-test of the labs whose gradings run Spark (lab 9), the `spark` layer of the suite
(`make test-spark`, which CI runs after `make test`): each grading starts two Spark drivers and
takes both cores for about a minute, so they are graded two at a time, on a machine that does
nothing else, instead of beside the other labs' time-sensitive checks. Same rules as
test_selftest.py: every case its exact score, nothing left behind."""

import pytest

from autograder.checks import uses_spark
from autograder.selftest import case_names, grade_all, labs, verdict

pytestmark = [pytest.mark.timeout(2400), pytest.mark.slow, pytest.mark.spark]

LABS = [lab for lab in labs() if uses_spark(lab)]


@pytest.fixture(scope="module")
def report(cluster):
    return grade_all(LABS, jobs=2)


@pytest.mark.parametrize("lab,case", case_names(LABS), ids=[f"{lab}-{case}" for lab, case in case_names(LABS)])
def test_case(report, lab, case):
    assert verdict(report, lab, case) is None, verdict(report, lab, case)


def test_nothing_outside_the_gradings_changed(report):
    assert report.changed == []
