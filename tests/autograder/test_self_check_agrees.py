"""The self-check a student runs in their own kernel (a test cell's `grade(label)`) says what
the grader will: pieces of the corpus's student work, run as their students run them
(staff/as_student.py: a kernel of their own, their own login, no sandbox), pass exactly the
parts the grader gives full marks. One case per lab of this layer, each a shortcut or mistake
that the grader's own seeded data catches; `python -m staff selftest --via kernel` runs
all of the corpus's student work this way (see the README, "Honest scoring")."""

import pytest

from layers import GRADINGS_LOG, heavy
from staff.selftest import grade_corpus, labs, verdict

pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]

CASES = [
    ("lab1", "consume-counts-from-memory"),
    ("lab2", "location-copied-from-a-printout"),
    ("lab3", "partitions-copied-from-the-printout"),
    ("lab4", "count-written-down-and-bookmarked"),
    ("lab5", "alerts-over-sixty"),
    ("lab6", "rebuild-from-the-dataset"),
    ("lab7", "producer-acks-without-sending"),
    ("lab8", "acks-changed-after-construction"),
]
assert {lab for lab, _ in CASES} == {lab for lab in labs() if not heavy(lab)}, "one case per lab"


@pytest.fixture(scope="module")
def report(cluster):
    return grade_corpus(
        sorted({lab for lab, _ in CASES}), only=[name for _, name in CASES], via="kernel", log=GRADINGS_LOG
    )


@pytest.mark.parametrize("lab,case", CASES, ids=[f"{lab}-{case}" for lab, case in CASES])
def test_the_self_check_agrees_with_the_grader(report, lab, case):
    assert verdict(report, lab, case) is None, verdict(report, lab, case)
