"""The autograder: runs a student's notebook against the live cluster and checks what it did.

A grade is a straight line: CLI (__main__.py) -> pipeline.py (a list of small steps) ->
kernel.py (the notebook in a fresh, limited kernel, in sandbox/'s jail) -> selfcheck/checks/
(one per graded part, run in the grader's own process) -> results.py (a table, Gradescope's
results.json).

This package is the grading machine's: students never have it (the kit does not ship it, the
sandbox does not show it), and the Gradescope package does. Which side each folder of the
course is on is the table below, the one place the sandbox, the kit and the Gradescope package
read it from (tests/test_layout.py keeps the line: no import across it, no file over it).
"""

import sys

# Students have these (the student kit ships them; the grading sandbox shows them read-only):
# the self-checks, the cluster and its connection helper, the data, the released labs.
STUDENT = ("selfcheck", "cluster", "datasets", "labs")
# A grading machine adds the grader; the Gradescope package is GRADER + STUDENT.
GRADER = ("autograder",)
# Course staff only: never in the kit, the sandbox or the Gradescope package (the user method
# refuses to grade while any is readable by others).
STAFF = ("staff", "solutions", "tests", "bench", "nbgrader_config.py", ".grading-secret")

# nbformat validates notebooks with jsonschema, which on import builds a parser for RFC 3987
# IRIs (the `rfc3987_syntax` package, an optional extra that Jupyter's packages pull in): 0.85 s
# of CPU in every grading process, for a format no notebook field uses. Without it, jsonschema
# simply skips that one format check.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  # None: "not installed"
