"""What a check says when a part is wrong. Shared by the checks (which raise them) and the
kernel runner (which raises them when a value cannot be read), so neither imports the other."""

from __future__ import annotations

from typing import Any


class CheckFailed(AssertionError):
    """A graded part is wrong. The message says expected vs found, and a hint."""

    def __init__(self, what: str, expected: Any = None, found: Any = None, hint: str = ""):
        self.what, self.expected, self.found, self.hint = what, expected, found, hint
        msg = what
        if expected is not None:  # (a failure that says only what it found has no "expected: None")
            msg += f"\n  expected: {_short(expected)}"
        if expected is not None or found is not None:
            msg += f"\n  found:    {_short(found)}"
        if hint:
            msg += f"\n  hint: {hint}"
        super().__init__(msg)

    def _render_traceback_(self) -> list[str]:
        """In JupyterLab, a failed self-check shows its message, expected, found and hint:
        not thirty lines of the grader's own source before them."""
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {str(self).splitlines()[0]}", *str(self).splitlines()[1:]]


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


RUN_ALL = "Kernel > Restart Kernel and Run All Cells…"


class MissingAnswer(CheckFailed):
    def __init__(self, name: str, error: str = ""):
        hint = (
            f"Run the cell that defines `{name}` before this test."
            if not error
            else f"Run your notebook from the top ({RUN_ALL}) and fix the first error."
        )
        super().__init__(
            f"`{name}` is not defined or could not be evaluated" + (f" ({error})" if error else ""), hint=hint
        )


def answer_name(expr: str) -> str:
    """The student's name in an expression a check evaluates: the first function it calls that is
    not a builtin ("parse" in "[str(r) for r in parse(raw)]"), else its first name that is
    neither a builtin, an attribute nor a keyword argument ("with_weather" in
    "__import__('m').start_join(with_weather, 'x')")."""
    import builtins
    import keyword
    import re

    code = re.sub(r"'[^']*'|\"[^\"]*\"", "''", expr)  # no names from inside strings
    for m in re.finditer(r"(?<![\w.])([A-Za-z_]\w*)\s*\(", code):
        if not hasattr(builtins, m.group(1)):
            return m.group(1)
    for m in re.finditer(r"(?<![\w.])([A-Za-z_]\w*)\b(?!\s*=[^=])", code):
        if not hasattr(builtins, m.group(1)) and not keyword.iskeyword(m.group(1)):
            return m.group(1)
    first = re.match(r"\s*([A-Za-z_]\w*)", expr)
    return first.group(1) if first else expr


class DemoName(CheckFailed):
    """The student's answer uses a name that only an example cell defines: grading skips those."""

    def __init__(self, answer: str, name: str):
        super().__init__(
            f"`{answer}` uses `{name}`, which only an example cell of the notebook defines, and "
            "the grader does not run the example cells",
            hint=f"The grader calls `{answer}` with its own data: work from what it is given (its "
            "arguments) and from the cells you write, not from the notebook's examples.",
        )


class NotWritten(CheckFailed):
    """The answer's cell still says `raise NotImplementedError()`."""

    def __init__(self, expr: str):
        name = answer_name(expr)
        super().__init__(
            f"`{name}` is not written yet (it still raises NotImplementedError)",
            hint=f"Replace `raise NotImplementedError()` in the cell that defines `{name}` with your "
            "code, run that cell, then this test.",
        )


class NotPlainValue(CheckFailed):
    def __init__(self, expr: str, why: str):
        super().__init__(
            f"`{expr}` is {why}",
            hint="Keep the answer in numbers, strings, lists, tuples, sets or dicts (numpy and pandas "
            "values, Counter and defaultdict are fine too).",
        )


class RaisedInKernel(CheckFailed):
    """The student's code raised while a check read `expr`: a check that asks whether it raises
    (a registry refusing a schema) catches this one; others report it as a failure."""

    def __init__(self, expr: str, ename: str, evalue: str):
        super().__init__(
            f"`{expr}` raised {ename}: {evalue}",
            hint="Fix the error in your code, then run the notebook again from the top.",
        )
        self.ename, self.evalue = ename, evalue
