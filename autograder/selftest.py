"""python -m autograder selftest: the grader grades its own corpus through its real CLI.

Every solution must score full marks, every blank release 0 (without crashing), and every
scenario of autograder/corpus.py exactly its expected score, with the expected note. Runs
several gradings at once, as a class's submissions would, so a submission that breaks
things (deletes every topic, ...) would show up in its neighbours' scores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .corpus import Scenario, scenarios
from .pipeline import RELEASE, SOLUTIONS, graded_parts

CELL_TIMEOUT_S = 20      # short, so runaway cells cost little; the lab's cells take a few seconds
TOTAL_TIMEOUT_S = 240


@dataclass
class Case:
    name: str
    lab: str
    notebook: Path
    expected: dict[str, float]
    note: str = ""


@dataclass
class Outcome:
    case: Case
    scores: dict[str, float]
    output: str
    seconds: float
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.scores == self.case.expected and self.case.note in self.output


def labs() -> list[str]:
    return sorted(p.name for p in SOLUTIONS.iterdir() if (p / f"{p.name}.ipynb").exists())


def cases(selected: list[str], workdir: Path) -> list[Case]:
    out = []
    for lab in selected:
        solution = nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4)
        parts = graded_parts(solution)
        out.append(Case("solution", lab, SOLUTIONS / lab / f"{lab}.ipynb", dict(parts)))
        out.append(Case("blank-release", lab, RELEASE / lab / f"{lab}.ipynb", dict.fromkeys(parts, 0.0)))
        for s in scenarios(lab):
            path = workdir / lab / f"{s.name}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(s.build(solution), path)
            out.append(Case(s.name, lab, path, expected_scores(s, parts), s.note))
    return out


def expected_scores(s: Scenario, parts: dict[str, float]) -> dict[str, float]:
    unknown = s.fails - set(parts)
    if unknown:
        raise ValueError(f"scenario {s.name} names unknown parts {sorted(unknown)}")
    return {label: 0.0 if label in s.fails else points for label, points in parts.items()}


def run(case: Case, outdir: Path) -> Outcome:
    result = outdir / f"{case.lab}-{case.name}.json"
    cmd = [sys.executable, "-m", "autograder", "grade", case.lab, str(case.notebook), "--json", str(result),
           "--cell-timeout", str(CELL_TIMEOUT_S), "--total-timeout", str(TOTAL_TIMEOUT_S)]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TOTAL_TIMEOUT_S + 120)
    seconds = time.monotonic() - start
    try:
        data = json.loads(result.read_text())
    except (OSError, ValueError):
        return Outcome(case, {}, proc.stdout + proc.stderr, seconds, proc.returncode or 99)
    scores = {t["name"]: float(t["score"]) for t in data["tests"] if t.get("visibility") != "hidden"}
    return Outcome(case, scores, data["output"] + "\n" + proc.stdout, seconds, proc.returncode)


def selftest(labs: list[str] | None = None, jobs: int = 2, write_corpus: str | None = None) -> int:
    selected = labs or globals()["labs"]()
    with tempfile.TemporaryDirectory(prefix="selftest-") as tmp:
        tmp = Path(tmp)
        todo = cases(selected, Path(write_corpus) if write_corpus else tmp / "corpus")
        print(f"selftest: {len(todo)} gradings of {', '.join(selected)}, {jobs} at a time")
        with ThreadPoolExecutor(jobs) as pool:
            outcomes = list(pool.map(lambda c: run(c, tmp), todo))
    width = max(len(f"{o.case.lab} {o.case.name}") for o in outcomes)
    for o in outcomes:
        got, want = sum(o.scores.values()), sum(o.case.expected.values())
        line = f"{o.case.lab + ' ' + o.case.name:<{width}}  {'PASS' if o.ok else 'FAIL'}  {o.seconds:5.1f}s  " \
               f"score {got:g} (expected {want:g})"
        print(line)
        if not o.ok:
            wrong = {k: (o.scores.get(k), v) for k, v in o.case.expected.items() if o.scores.get(k) != v}
            print(f"    parts (found, expected): {wrong}; exit code {o.exit_code}")
            if o.case.note and o.case.note not in o.output:
                print(f"    the grader's notes should mention {o.case.note!r}")
            print("    " + o.output.strip().replace("\n", "\n    ")[:3000])
    failed = sum(not o.ok for o in outcomes)
    print(f"{len(outcomes) - failed} passed, {failed} failed")
    return 1 if failed else 0
