"""python -m staff selftest [LAB ...] | student-kit DIR | outdated: the course staff's own commands (the
grader's are `python -m autograder`; this package is never handed out)."""

from __future__ import annotations

import argparse
import sys


def cmd_selftest(a) -> int:
    from .selftest import labs, selftest

    unknown = [lab for lab in a.labs if lab not in labs()]
    if unknown:
        print(f"selftest: no lab {', '.join(unknown)}; the course's labs are {' '.join(labs())}", file=sys.stderr)
        return 2
    return selftest(labs=a.labs, cores=a.cores, write_corpus=a.write_corpus, only=a.only, via=a.via)


def cmd_student_kit(a) -> int:
    from .kit import main

    return main(a.dir)


def cmd_outdated(a) -> int:
    from .outdated import main

    return main()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m staff", description="The course staff's tools.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log each step with its time")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("selftest", help="solutions score full marks, blanks 0, the corpus its expected scores")
    s.add_argument("labs", nargs="*", help="only these labs (default: all)")
    s.add_argument(
        "--cores",
        type=float,
        help="the cores its gradings may keep busy; as many run at once as their labs' costs fit "
        "(default: this machine's)",
    )
    s.add_argument("--write-corpus", metavar="DIR", help="also write the corpus notebooks to DIR, to read them")
    s.add_argument("--only", nargs="+", metavar="NAME", help="only the cases whose names contain one of these")
    s.add_argument(
        "--via",
        choices=("cli", "nbgrader", "kernel"),
        default="cli",
        help="grade through the CLI (default), or through real `nbgrader autograde` in a course folder "
        "of its own (one lab at a time: slower); kernel: run the student work of the corpus as "
        "students do, the self-checks in their kernels, which must agree with the grader",
    )
    s.set_defaults(func=cmd_selftest)
    k = sub.add_parser("student-kit", help="write what students get (labs, cluster, self-checks; no solutions)")
    k.add_argument("dir", help="the folder to write (replaced if it exists)")
    k.set_defaults(func=cmd_student_kit)
    o = sub.add_parser("outdated", help="each pin beside the newest version its registry serves (needs the network)")
    o.set_defaults(func=cmd_outdated)
    return p


def main(argv=None) -> int:
    from cluster import cli

    return cli.run(parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
