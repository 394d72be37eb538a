"""The grader opens student-reachable paths only through cluster.safe_files (or in the
grading's sandbox, checks/in_sandbox.py). This test reads the grader's and the checks' code:

- in selfcheck/checks/ (run by the grader against a student's folder), no plain file call at
  all, except inside the functions a module lists in IN_SANDBOX (they run in the sandbox) and
  on lines marked `# grader-only: <why>` (a path of the course's or the grader's own);
- in the grader's own modules, no plain file call on a path that names the student's side
  (the working folder, the submission, a notebook), unless marked the same way."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from cluster.settings import ROOT

FILE_CALLS = {
    "open",
    "read_text",
    "write_text",
    "read_bytes",
    "write_bytes",
    "mkdir",
    "makedirs",
    "chmod",
    "chown",
    "unlink",
    "rmtree",
    "symlink_to",
    "iterdir",
    "glob",
    "rglob",
    "copytree",
    "copy",
    "copyfile",
    "listdir",
    "scandir",
    "connect",
    "touch",
    "rename",
}
QUALIFIED = {
    "connect": {"sqlite3"},
    "copy": {"shutil"},
    "rename": {"os"},
    "listdir": {"os"},
}  # names used for other things too
STUDENT_SIDE = re.compile(r"workdir|submission|notebook|student")
GRADER_MODULES = (
    "pipeline.py",
    "kernel.py",
    "grade_all.py",
    "gradescope.py",
    "exchange.py",
    "nbgrader_step.py",
    "sandbox/__init__.py",
    "sandbox/limits.py",
    "sandbox/cgroups.py",
    "sandbox/bwrap.py",
    "sandbox/jail.py",
    "results.py",
)
MARK = "# grader-only:"


def statement_spans(top: ast.AST) -> list[tuple[int, int]]:
    """The lines of each statement (a compound one: its header only), smallest last."""
    spans = []
    for node in ast.walk(top):
        if isinstance(node, ast.stmt):
            body = getattr(node, "body", None)
            end = body[0].lineno - 1 if isinstance(body, list) and body else node.end_lineno or node.lineno
            spans.append((node.lineno, end))
    return sorted(spans, key=lambda span: span[0] - span[1])


def file_calls(source: str):
    """(line, source of the statement that makes the call, enclosing top-level function) of every
    plain file call: the whole statement, so a mark on any of its lines counts (the formatter
    puts a comment after the statement's last bracket)."""
    tree, lines = ast.parse(source), source.splitlines()
    for top in tree.body:
        spans = statement_spans(top)
        for node in ast.walk(top):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
            if name not in FILE_CALLS:
                continue
            if name in QUALIFIED and not (
                isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id in QUALIFIED[name]
            ):
                continue
            if isinstance(fn, ast.Name) and name != "open":
                continue  # our own helpers of the same name (safe_files' write_text, ...)
            first, last = next(((a, b) for a, b in reversed(spans) if a <= node.lineno <= b), (node.lineno,) * 2)
            yield node.lineno, " ".join(line.strip() for line in lines[first - 1 : last]), getattr(top, "name", "")


def violations(path: Path, source: str | None = None) -> list[str]:
    source = source if source is not None else path.read_text()
    in_checks = path.parent.name == "checks"
    sandboxed = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "IN_SANDBOX" for t in node.targets):
            sandboxed = set(ast.literal_eval(node.value))
    found = []
    for line, text, function in file_calls(source):
        if MARK in text or function in sandboxed:
            continue
        if in_checks or STUDENT_SIDE.search(text):
            found.append(f"{path.relative_to(ROOT)}:{line}: {text.strip()}")
    return found


def test_no_plain_file_call_on_a_student_reachable_path():
    files = [
        *sorted((ROOT / "selfcheck" / "checks").glob("*.py")),
        *(ROOT / "autograder" / name for name in GRADER_MODULES),
    ]
    assert len(files) > 20 and all(f.exists() for f in files), files  # the walk looks at the real code
    found = [v for f in files for v in violations(f)]
    assert not found, (
        "plain file calls the grader could make through a student's link (use cluster.safe_files, "
        "in_sandbox.call, or mark a path of the grader's own with '# grader-only: why'):\n" + "\n".join(found)
    )


def test_a_planted_plain_open_is_caught():
    check = ROOT / "selfcheck" / "checks" / "lab5.py"
    planted = check.read_text() + "\n\ndef sneaky(ctx):\n    return open(ctx.workdir / 'checkpoint.json').read()\n"
    assert any("open(ctx.workdir" in v for v in violations(check, planted))
    pipeline = ROOT / "autograder" / "pipeline.py"
    planted = pipeline.read_text() + "\n\ndef sneaky(job):\n    (job.workdir / 'x').write_text('y')\n"
    assert any("write_text" in v for v in violations(pipeline, planted))
    marked = pipeline.read_text() + "\n\ndef fine(job):\n    (job.workdir / 'x').mkdir()   # grader-only: fresh\n"
    assert violations(pipeline, marked) == violations(pipeline)
