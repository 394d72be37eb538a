"""The autograder: runs a student's notebook against the live cluster and checks what it did.

A grade is a straight line: CLI (__main__.py) -> pipeline.py (a list of small steps) ->
kernel.py (the notebook in a fresh, limited kernel) -> checks/ (one per graded part, run
in the grader's own process) -> results.py (a table, Gradescope's results.json).
"""

import sys

# nbformat validates notebooks with jsonschema, which on import builds a parser for RFC 3987
# IRIs (the `rfc3987_syntax` package, an optional extra that Jupyter's packages pull in): 0.85 s
# of CPU in every grading process, for a format no notebook field uses. Without it, jsonschema
# simply skips that one format check.
sys.modules.setdefault("rfc3987_syntax", None)
