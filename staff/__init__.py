"""The course staff's own tools, never handed out: neither the student kit, the grading
sandbox nor the Gradescope package has this package.

- corpus/       the grading corpus, one TOML file per lab: mistakes students make, other styles,
                shortcuts and attacks, with their exact scores
- selftest.py   grades the solutions, the blank releases and the corpus (python -m staff selftest)
- kit.py        builds the student kit (python -m staff student-kit)
"""
