"""The line between what students have and what only the grader and the staff have, held by
reading the code (autograder/__init__.py's table says which folder is on which side):

- the student side (selfcheck/, cluster/) never imports the grader or the staff's tools, in any
  form (import statements, importlib, __import__ strings), so the kit and the sandbox can take
  whole folders;
- the grader never imports the staff's tools (their commands are `python -m staff`);
- no file of the grader or the staff reaches a student: not in the sandbox's read-only view,
  the student kit or (for the staff's) the Gradescope package."""

from __future__ import annotations

import ast
from pathlib import Path

from autograder import GRADER, STAFF, STUDENT
from cluster.settings import ROOT


def imported(path: Path) -> set[str]:
    """Every module a file imports: statements, and string arguments of importlib.import_module
    and __import__ (how the checks reach the kernel's modules)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(str(node.args[0].value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "__import__('" in node.value:
            found.add(node.value.split("__import__('", 1)[1].split("'", 1)[0])
    return found


def crossings(folders: tuple[str, ...], forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> list[str]:
    bad = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel in allowed:
                continue
            for module in imported(path):
                if module.split(".")[0] in forbidden:
                    bad.append(f"{rel} imports {module}")
    return bad


def test_the_student_side_imports_neither_the_grader_nor_the_staff():
    student_code = tuple(f for f in STUDENT if (ROOT / f).is_dir() and any((ROOT / f).rglob("*.py")))
    assert "selfcheck" in student_code and "cluster" in student_code
    assert crossings(student_code, (*GRADER, "staff", "hub")) == []


def test_the_grader_imports_no_staff_tool():
    assert crossings(GRADER, ("staff", "tests", "bench")) == []


def test_a_planted_import_across_the_line_is_caught(tmp_path, monkeypatch):
    import tests.test_layout as layout

    planted = tmp_path / "selfcheck"
    planted.mkdir()
    (planted / "sneaky.py").write_text(
        "def f():\n    from autograder.pipeline import grade_notebook\nx = \"__import__('autograder.kernel')\"\n"
    )
    monkeypatch.setattr(layout, "ROOT", tmp_path)
    assert sorted(layout.crossings(("selfcheck",), ("autograder",))) == [
        "selfcheck/sneaky.py imports autograder.kernel",
        "selfcheck/sneaky.py imports autograder.pipeline",
    ]


def test_no_grader_or_staff_file_reaches_a_student(tmp_path):
    from autograder.gradescope import PACKAGED
    from autograder.sandbox import COURSE_READABLE
    from staff import kit

    assert not set(COURSE_READABLE) & {*GRADER, *STAFF}
    assert not set(PACKAGED) & set(STAFF)
    built = kit.build(tmp_path / "kit")
    tops = {f.split("/")[0] for f in kit.files(built)}
    assert not tops & {*GRADER, *STAFF}, tops


def other_labs_imported(path: Path) -> set[str]:
    """The other labs' check modules a lab's checks module imports: relative (`from .lab7 import`)
    or absolute, in statements or in strings for the kernel."""
    own = path.stem
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.add((node.module or "").split(".")[0])
            found.update(a.name for a in node.names if not node.module)
    found |= {m.split(".")[2] for m in imported(path) if m.startswith("selfcheck.checks.") and m.count(".") >= 2}
    return {m.split(":")[0] for m in found if m.split(":")[0].startswith("lab") and m.split(":")[0] != own}


def test_each_labs_checks_stand_alone():
    """What several labs' checks share lives in shared modules beside them (flights.py, spark_labs.py,
    own_cluster.py, kafka_state.py, scripts.py), so a lab can be changed, or a new one added,
    without reading another lab's checks."""
    found = {p.name: other_labs_imported(p) for p in sorted((ROOT / "selfcheck" / "checks").glob("lab*.py"))}
    assert len(found) >= 13 and {name: labs for name, labs in found.items() if labs} == {}


def test_a_lab_importing_another_is_caught(tmp_path):
    planted = tmp_path / "lab20.py"
    planted.write_text(
        "from .lab7 import retried\nfrom . import lab9\nX = \"__import__('selfcheck.checks.lab12', fromlist=['_'])\"\n"
        "Y = \"__import__('selfcheck.checks.lab20', fromlist=['_'])\"\n"
    )
    assert other_labs_imported(planted) == {"lab7", "lab9", "lab12"}


def test_every_function_the_checks_call_in_the_kernel_exists():
    """A check calls the grader's helpers in the student's kernel through strings
    (`IN_KERNEL = "__import__('selfcheck.checks.lab9', ...)"`, then f"{IN_KERNEL}.utc_text(...)"):
    no linter sees those names, so a helper moved to another module must be found here."""
    import importlib
    import re

    missing = []
    for path in sorted((ROOT / "selfcheck" / "checks").glob("*.py")):
        text = path.read_text()
        modules = dict(re.findall(r"^([A-Z_0-9]+) = \"__import__\('([\w.]+)'", text, re.M))
        for var, name in re.findall(r"\{([A-Z_0-9]+)\}\.([a-z_]\w*)", text):
            if var in modules and not hasattr(importlib.import_module(modules[var]), name):
                missing.append(f"{path.name}: {var} ({modules[var]}) has no {name}")
    assert missing == []
