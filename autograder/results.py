"""Results are data; the table, Gradescope's results.json and nbgrader's points are views."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def visible_scores(results_json: dict) -> dict[str, float]:
    """label -> score of each graded part in a results.json (the staff-only tests left out)."""
    return {t["name"]: float(t["score"]) for t in results_json["tests"] if t.get("visibility") != "hidden"}


@dataclass
class CheckResult:
    """One graded part: its label (e.g. "lab1-q2") is the nbgrader cell id, the check's name
    and the results.json test name."""

    label: str
    max_score: float
    score: float = 0.0
    passed: bool = False
    seconds: float = 0.0
    message: str = ""  # shown to the student: expected vs found, and a hint
    details: str = ""  # hidden from the student: a traceback, for course staff


@dataclass
class GradingResult:
    lab: str
    notebook: str
    checks: list[CheckResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what went wrong while running the notebook
    infrastructure_error: str = ""  # set when we could not grade at all
    seconds: float = 0.0
    seed: int = 0
    nonce: str = ""  # the grading's own part of its seed; "" when the seed was given (a replay)
    namespace: str = ""
    staff: list[str] = field(default_factory=list)  # hidden from the student: e.g. the grading's memory
    # label -> points of the answers a person grades (the capstone's design note): not scored here
    manual: dict[str, float] = field(default_factory=dict)
    graded_notebook: Any = field(default=None, repr=False)  # the notebook as run, with its outputs

    @property
    def score(self) -> float:
        return sum(c.score for c in self.checks)

    @property
    def max_score(self) -> float:
        return sum(c.max_score for c in self.checks)

    # --- views -------------------------------------------------------------------------
    def gradescope(self) -> dict:
        """Gradescope's results.json: score, per-test entries, visible output."""
        header = [f"Graded {self.lab} in {self.seconds:.1f} s."]
        if self.infrastructure_error:
            header.append(
                "Infrastructure error: "
                + self.infrastructure_error
                + " This is not a problem with your work; course staff have been told."
            )
        header.extend(self.notes)
        header.extend(
            f"{label} ({points:g} points) is graded by your instructor, not here."
            for label, points in self.manual.items()
        )
        tests = [
            {
                "name": c.label,
                "score": c.score,
                "max_score": c.max_score,
                "status": "passed" if c.passed else "failed",
                "output": c.message or ("Passed." if c.passed else "Failed."),
                "visibility": "visible",
            }
            for c in self.checks
        ]
        tests.extend(
            {
                "name": f"{c.label} (staff details)",
                "score": 0,
                "max_score": 0,
                "output": c.details,
                "visibility": "hidden",
            }
            for c in self.checks
            if c.details
        )
        # Staff only: the seed replays this grading (--seed); students never see it. Each grading
        # has a seed of its own (the nonce): the next grading of the same work gets other data.
        seeded = [f"seed {self.seed}", f"nonce {self.nonce}" if self.nonce else "a replay of a given seed"]
        tests.append(
            {
                "name": "grading (staff details)",
                "score": 0,
                "max_score": 0,
                "visibility": "hidden",
                "output": "; ".join([*seeded, f"namespace {self.namespace}", *self.staff]),
            }
        )
        return {
            "score": self.score,
            "max_score": self.max_score,
            "output": "\n".join(header),
            "execution_time": round(self.seconds, 1),
            "tests": tests,
        }

    def write_json(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.gradescope(), indent=2))

    def table(self) -> str:
        """One line per check: label, PASS/FAIL, seconds, points; then what went wrong."""
        lines = [f"{self.lab}  {self.notebook}  seed={self.seed}"]
        if self.infrastructure_error:
            lines.append(f"INFRASTRUCTURE ERROR: {self.infrastructure_error}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        width = max((len(c.label) for c in self.checks), default=8)
        for c in self.checks:
            lines.append(
                f"  {c.label:<{width}}  {'PASS' if c.passed else 'FAIL'}  {c.seconds:5.1f}s  "
                f"{c.score:g}/{c.max_score:g}"
            )
            if c.message and not c.passed:
                lines.extend("      " + ln for ln in c.message.splitlines())
        for label, points in self.manual.items():
            lines.append(f"  {label:<{width}}  by the instructor: -/{points:g}")
        lines.append(f"  total: {self.score:g}/{self.max_score:g} in {self.seconds:.1f}s")
        return "\n".join(lines)
