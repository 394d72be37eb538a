"""The autograder: runs a student's notebook against the live cluster and checks what it did.

A grade is a straight line: CLI (__main__.py) -> pipeline.py (a list of small steps) ->
kernel.py (the notebook in a fresh, limited kernel) -> checks/ (one per graded part, run
in the grader's own process) -> results.py (a table, Gradescope's results.json).
"""
