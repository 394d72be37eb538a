"""The grader grades its own corpus through its real CLI, two submissions at a time: every
solution full marks, every blank release 0, every wrong or broken submission its expected
score (see autograder/corpus.py)."""

from autograder.selftest import selftest


def test_selftest(cluster, capsys):
    code = selftest(jobs=2)
    out = capsys.readouterr().out
    print(out)
    assert code == 0, out
