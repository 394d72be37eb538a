"""What a check says when a part is wrong. Shared by the checks (which raise them) and the
kernel runner (which raises them when a value cannot be read), so neither imports the other."""

from __future__ import annotations

from typing import Any


class CheckFailed(AssertionError):
    """A graded part is wrong. The message says expected vs found, and a hint."""

    def __init__(self, what: str, expected: Any = None, found: Any = None, hint: str = ""):
        self.what, self.expected, self.found, self.hint = what, expected, found, hint
        msg = what
        if expected is not None or found is not None:
            msg += f"\n  expected: {_short(expected)}\n  found:    {_short(found)}"
        if hint:
            msg += f"\n  hint: {hint}"
        super().__init__(msg)


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


class MissingAnswer(CheckFailed):
    def __init__(self, name: str, error: str = ""):
        hint = (f"Run the cell that defines `{name}` before this test." if not error else
                "Run your notebook from the top (Kernel > Restart & Run All) and fix the first error.")
        super().__init__(f"`{name}` is not defined or could not be evaluated" + (f" ({error})" if error else ""),
                         hint=hint)
