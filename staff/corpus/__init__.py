"""The autograder's own corpus: realistic wrong and broken submissions, each with the score it
must get. Each scenario is the lab's solution (or its blank release) with a few edits, so the
corpus follows the solution when it changes. `python -m staff selftest --write-corpus DIR`
writes them out as notebooks, named for what they do.

The scenarios live in one file per lab, `labN.toml` beside this module, in three lists:
`[[scenario]]` (mistakes, broken notebooks, correct work in other styles, some shortcuts),
`[[attack]]` (aimed at the grading: the self-test's kernel mode leaves them out) and
`[[shortcut]]` (an answer from the public data or a printout). A scenario:

    [[scenario]]
    name = "counter-overwrites"          # unique in its lab; the notebook's file name
    story = "increase stores the amount instead of adding it"
    fails = ["lab1-q1"]                  # the parts that must score 0 (the others: full marks)
    note = "SyntaxError"                 # optional: a phrase the grader's notes must contain
    base = "release"                     # optional: start from the blank release

    [[scenario.edit]]
    cell = "lab1-increase"               # a cell's nbgrader id, or a snippet of its source
    old = 'counts[key] = counts.get(key, 0) + amt'
    new = 'counts[key] = amt'            # kind "sub" (the default): old becomes new

Other kinds (`kind = ...`): "replace" (the cell's source becomes `new`), "before"/"after" (a new
code cell), "markdown" (a new markdown cell after it, as a student's notes are), "copy" (a copy
of the cell found by `old`, inserted after `cell`), "answers" (every answer cell becomes `new`,
with {grade_id} filled in). Code goes in TOML's literal strings
('...' and '''...'''), so it reads as it runs. Code that several scenarios of a lab share
is written once in the file's `[code]` table and named by `new = {code = "name"}`; a large
text is made when the file loads, `{repeat = "0", times = 9437184}` (an attack's 9 MiB padding
costs nothing to parse); `new` and `old` may also be a list of such pieces and strings, joined.
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell


@dataclass(frozen=True)
class Edit:
    """Change one cell, found by its nbgrader id or by a snippet of its source.
    kind: "sub" (replace old by new in the cell), "replace" (the cell's whole source becomes new),
    "before"/"after" (insert a new code cell), "markdown" (insert a new markdown cell after it),
    "copy" (insert after the cell a copy of the cell found by old), "answers" (every answer
    cell's source becomes new, with {grade_id} filled in; `cell` is not used)."""

    cell: str
    kind: str
    new: str
    old: str = ""


@dataclass(frozen=True)
class Scenario:
    name: str
    lab: str
    story: str  # the mistake, as a student would make it
    edits: tuple[Edit, ...]
    fails: frozenset[str] = field(default_factory=frozenset)  # labels that must score 0
    note: str = ""  # a phrase the grader's notes must contain
    base: str = "solution"  # what the student starts from: "solution", or the blank "release"

    def build(
        self, solution: nbformat.NotebookNode, release: nbformat.NotebookNode | None = None
    ) -> nbformat.NotebookNode:
        if self.base == "release" and release is None:
            raise ValueError(f"{self.name} starts from the blank release: pass it")
        nb = copy.deepcopy(solution if release is None or self.base != "release" else release)
        added = 0
        for e in self.edits:
            if e.kind == "answers":
                for cell in nb.cells:
                    meta = cell.get("metadata", {}).get("nbgrader", {})
                    if meta.get("solution") and cell.cell_type == "code":
                        cell.source = e.new.replace("{grade_id}", repr(meta["grade_id"]))
                continue
            index = find_cell(nb, e.cell)
            cell = nb.cells[index]
            if e.kind == "replace":
                cell.source = e.new
                continue
            if e.kind == "sub":
                if e.old not in cell.source:
                    raise ValueError(f"{self.name}: {e.old!r} is not in cell {e.cell!r}")
                cell.source = cell.source.replace(e.old, e.new)
                continue
            if e.kind == "copy":  # a copy of the cell found by `old`, as JupyterLab's copy-paste makes it
                new = copy.deepcopy(nb.cells[find_cell(nb, e.old)])
                index += 1
            else:
                new = new_markdown_cell(e.new) if e.kind == "markdown" else new_code_cell(e.new)
                index += e.kind in ("after", "markdown")
            added += 1
            new.id = f"added-{added:02d}"  # the course's own cells keep their ids
            nb.cells.insert(index, new)
        return nb

    def notebook(self) -> nbformat.NotebookNode:
        """The scenario's notebook, built from the lab's solution (or blank release) on disk."""
        from autograder.pipeline import RELEASE, SOLUTIONS

        def read(root):
            return nbformat.read(root / self.lab / f"{self.lab}.ipynb", as_version=4)

        return self.build(read(SOLUTIONS), read(RELEASE) if self.base == "release" else None)


def find_cell(nb, key: str) -> int:
    for i, cell in enumerate(nb.cells):
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == key:
            return i
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and key in cell.source:
            return i
    raise KeyError(f"no cell with id or text {key!r}")


class CorpusError(ValueError):
    """A corpus file that does not say what the loader expects; the message names the place."""


HERE = Path(__file__).parent
GROUPS = ("scenario", "attack", "shortcut")  # in this order within a lab, as the self-test grades them
SCENARIO_KEYS = {"name", "story", "fails", "note", "base", "edit"}
EDIT_KEYS = {"cell", "kind", "old", "new"}
EDIT_KINDS = {"sub", "replace", "before", "after", "markdown", "copy", "answers"}


def lab_files() -> list[Path]:
    return sorted(HERE.glob("lab*.toml"), key=lambda p: int(p.stem.removeprefix("lab")))


def load(path: Path) -> dict[str, tuple[Scenario, ...]]:
    """One lab's file: its scenarios, attacks and shortcuts, each checked for unknown keys (a
    typo must not fall back to a default) and for code it names but does not define."""
    lab = path.stem
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise CorpusError(f"{path.name}: not valid TOML: {e}") from None
    unknown = set(data) - {"code", *GROUPS}
    if unknown:
        raise CorpusError(f"{path.name}: unknown tables {sorted(unknown)}; known: code, {', '.join(GROUPS)}")
    code: dict[str, str] = data.get("code", {})
    used: set[str] = set()

    def text(value, where: str) -> str:
        pieces = value if isinstance(value, list) else [value]
        out = []
        for piece in pieces:
            if isinstance(piece, dict) and set(piece) == {"repeat", "times"}:
                if not isinstance(piece["repeat"], str) or not isinstance(piece["times"], int) or piece["times"] < 0:
                    raise CorpusError(f"{where}: {piece!r}: repeat is text, times a count")
                piece = piece["repeat"] * piece["times"]
            elif isinstance(piece, dict):
                if set(piece) != {"code"} or piece["code"] not in code:
                    raise CorpusError(f"{where}: {piece!r} names no code of [code] (it has {sorted(code)})")
                used.add(piece["code"])
                piece = code[piece["code"]]
            if not isinstance(piece, str):
                raise CorpusError(f"{where}: {piece!r} is neither text nor {{code = ...}}")
            out.append(piece)
        return "".join(out)

    def scenario(entry: dict, group: str) -> Scenario:
        where = f"{path.name}: {group} {entry.get('name', '(no name)')!r}"
        if set(entry) - SCENARIO_KEYS or not {"name", "story", "edit"} <= set(entry):
            raise CorpusError(
                f"{where}: keys {sorted(entry)}; it needs name, story and edit, and may have fails, note, base"
            )
        edits = []
        for i, e in enumerate(entry["edit"], 1):
            at = f"{where}, edit {i}"
            kind = e.get("kind", "sub")
            if set(e) - EDIT_KEYS or kind not in EDIT_KINDS:
                raise CorpusError(
                    f"{at}: keys {sorted(e)}, kind {kind!r}; known keys {sorted(EDIT_KEYS)}, kinds {sorted(EDIT_KINDS)}"
                )
            edits.append(Edit(e.get("cell", ""), kind, text(e.get("new", ""), at), text(e.get("old", ""), at)))
        return Scenario(
            entry["name"],
            lab,
            entry["story"],
            tuple(edits),
            frozenset(entry.get("fails", ())),
            entry.get("note", ""),
            entry.get("base", "solution"),
        )

    groups = {g: tuple(scenario(entry, g) for entry in data.get(g, ())) for g in GROUPS}
    if set(code) - used:
        raise CorpusError(f"{path.name}: [code] {sorted(set(code) - used)} is used by no scenario")
    return groups


def load_all() -> dict[str, tuple[Scenario, ...]]:
    by_lab = [load(p) for p in lab_files()]
    groups = {g: tuple(s for lab in by_lab for s in lab[g]) for g in GROUPS}
    names = [f"{s.lab} {s.name}" for g in GROUPS for s in groups[g]]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CorpusError(f"scenario names used twice in a lab (each names a notebook): {twice}")
    return groups


_ALL = load_all()
SCENARIOS: tuple[Scenario, ...] = _ALL["scenario"]
ATTACKS: tuple[Scenario, ...] = _ALL["attack"]
SHORTCUTS: tuple[Scenario, ...] = _ALL["shortcut"]


def scenarios(lab: str | None = None) -> list[Scenario]:
    return [s for s in SCENARIOS + ATTACKS + SHORTCUTS if lab is None or s.lab == lab]


def student_work(lab: str | None = None) -> list[Scenario]:
    """The scenarios a student's own self-check must judge as the grader does: mistakes, broken
    notebooks, other styles and shortcuts. Not the attacks: they aim at the grading, and an
    attacker's own kernel (whose check library it may replace) proves nothing."""
    return [s for s in SCENARIOS + SHORTCUTS if lab is None or s.lab == lab]
