"""The self-checks: the student's side of grading. Students have this package (the student
kit ships it, the grading sandbox shows it read-only), so nothing in it is secret and nothing
in it imports the grader (autograder/) or the staff's tools (staff/); a test holds that line.

    from selfcheck import grade
    grade("lab1-q2")      # in a notebook: check one part against the live cluster

- checks/      one check per graded part, named by its label; the same code runs in the
               student's kernel (a self-check) and in the grader's process (the grade)
- errors.py    what a check says when a part is wrong (expected, found, a hint)
- plain.py     answers as plain values, whatever type the student's code holds them in
- protos.py    the labs' protobuf messages, compiled on first use
- harness.py   runs a student's script with the crashes a check plans (lab 5)
"""


def grade(label: str, user_ns: dict | None = None) -> None:
    """Run the check of one graded part (`label`, e.g. "lab1-q2") against this notebook and
    the live cluster: one line when it passes (and one more with what the check measured, or how
    your prediction compares, when it says so), a CheckFailed saying what and why when not."""
    from .checks import grade as run

    if user_ns is None:
        from IPython import get_ipython

        user_ns = get_ipython().user_ns
    run(label, user_ns)
