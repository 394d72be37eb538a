"""python -m autograder grade <lab> <notebook.ipynb> [--json FILE] | grade-all <lab> <folder>
| gradescope build [LAB ...] | gradescope run LAB

The staff's own commands (the self-test, the student kit) are `python -m staff`: nothing here
imports the staff package, which no student, sandbox or Gradescope package has."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .kernel import CELL_TIMEOUT_S, TOTAL_TIMEOUT_S

EXIT_INFRASTRUCTURE = 2


def cmd_grade(a) -> int:
    from cluster.settings import env

    from .pipeline import grade_notebook
    from .sandbox import bounds_off

    if not a.no_sandbox and (off := bounds_off(parent=env("COURSE_CGROUP_PARENT"))):
        print(off)  # the first line: what this machine cannot bound
    result = grade_notebook(
        a.lab,
        Path(a.notebook),
        seed=a.seed,
        student=a.student,
        cell_timeout=a.cell_timeout,
        total_timeout=a.total_timeout,
        sandbox=not a.no_sandbox,
    )
    result.write_json(Path(a.json))
    print(result.table())
    print(f"results written to {a.json}")
    if result.infrastructure_error:
        print(f"infrastructure error: {result.infrastructure_error}", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    return 0


def cmd_grade_all(a) -> int:
    from .grade_all import grade_all

    graded = grade_all(
        a.lab,
        Path(a.submissions),
        Path(a.out),
        jobs=a.jobs,
        regrade=a.regrade,
        retries=a.retries,
        progress=not a.no_progress,
    )
    return EXIT_INFRASTRUCTURE if any(g.status == "not graded" for g in graded) else 0


def cmd_gradescope(a) -> int:
    from .gradescope import main

    return main(a)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m autograder", description="Grade notebooks against the live cluster.")
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log each step with its time (-vv: everything, Kafka clients included)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade one submission; writes Gradescope's results.json")
    g.add_argument("lab", help="the lab, e.g. lab1")
    g.add_argument("notebook", help="the student's notebook")
    g.add_argument("--json", default="results/results.json", help="where to write results.json (default: %(default)s)")
    g.add_argument(
        "--student",
        default="",
        help="the student's id: with the lab's secret and a nonce of each grading's own, it makes the "
        "seed of the checks' random inputs (a new one every grading: a result shows nothing the next can use)",
    )
    g.add_argument(
        "--seed",
        type=int,
        default=None,
        help="replay a grading exactly with its seed instead (staff only: "
        "the seed is printed in the table and in results.json's hidden details)",
    )
    g.add_argument(
        "--no-sandbox",
        action="store_true",
        help="grade without the bubblewrap sandbox (macOS, Windows); every result then says what is not guaranteed",
    )
    g.add_argument("--cell-timeout", type=float, default=CELL_TIMEOUT_S, help="seconds per cell (default: %(default)s)")
    g.add_argument(
        "--total-timeout",
        type=float,
        default=TOTAL_TIMEOUT_S,
        help="seconds for the whole notebook (default: %(default)s)",
    )
    g.set_defaults(func=cmd_grade)
    ga = sub.add_parser(
        "grade-all", help="grade a folder of submissions, several at a time; a gradebook CSV and a plot of the scores"
    )
    ga.add_argument("lab", help="the lab, e.g. lab1")
    ga.add_argument(
        "submissions",
        help="a folder of <student>.ipynb, or of <student>/.../<lab>.ipynb (nbgrader's submitted/ layout)",
    )
    ga.add_argument(
        "--out",
        default="grades",
        help="where results.json per student, gradebook.csv and scores.png go (default: %(default)s)",
    )
    ga.add_argument(
        "--jobs",
        type=int,
        help="gradings run at the same time (default: as many as fit in this machine's cores, by what "
        "one of the lab's gradings costs: its checks' grading_cores)",
    )
    ga.add_argument("--regrade", action="store_true", help="grade again what an earlier run already graded")
    ga.add_argument(
        "--retries",
        type=int,
        default=1,
        help="times a grading that failed for the grader's own reasons "
        "is tried again, once the cluster works (default: %(default)s)",
    )
    ga.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    ga.set_defaults(func=cmd_grade_all)
    gs = sub.add_parser(
        "gradescope", help="build Gradescope's autograder zip of each lab, or (inside Gradescope) grade its submission"
    )
    gs.add_argument("action", choices=("build", "run"), help="build: the zips; run: what run_autograder does")
    gs.add_argument("labs", nargs="*", help="build: the labs (default: all); run: the one lab")
    gs.add_argument("--out", default="build/gradescope", help="build: where the zips go (default: %(default)s)")
    gs.add_argument("--root", default="/autograder", help="run: Gradescope's folder (default: %(default)s)")
    gs.set_defaults(func=cmd_gradescope)
    return p


def main(argv=None) -> int:
    from cluster import cli

    return cli.run(parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
