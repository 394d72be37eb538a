"""Answers as plain Python values, whatever type the student's code holds them in.

A check compares the student's answer with the truth it computed. The answer may be a
numpy scalar (`np.int64(42)`), a `Counter`, a `defaultdict`, a pandas Series, a namedtuple:
all correct, none a Python literal. `plain()` turns them into int, float, bool, str, bytes,
None, list, tuple, set and dict, so the check judges the value and not its type. It runs
where the answer lives (the grading kernel, or the student's kernel for a self-check).
"""

from __future__ import annotations

import decimal
import numbers
from collections.abc import Mapping, Set

MAX_ITEMS = 1_000_000  # a bound on the walk; a check's answers are far smaller


class NotPlain(TypeError):
    pass


def plain(value, _depth: int = 0):
    """The value as plain Python; NotPlain says what could not be converted."""
    if _depth > 50:
        raise NotPlain("nested more than 50 levels deep")
    if value is None or isinstance(value, (bool, str, bytes)):
        return value if type(value) in (bool, str, bytes, type(None)) else _exact(value)
    type_name = type(value).__module__.split(".")[0] + "." + type(value).__name__
    if type_name in ("numpy.bool_", "numpy.bool"):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, numbers.Complex):
        return complex(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if hasattr(value, "to_dict") and type(value).__module__.startswith("pandas"):
        return plain(value.to_dict(), _depth + 1)  # a Series: index -> value
    if hasattr(value, "tolist") and type(value).__module__.startswith("numpy"):
        return plain(value.tolist(), _depth + 1)  # an array, or a numpy scalar
    if isinstance(value, Mapping):
        _bounded(value)
        return {plain(k, _depth + 1): plain(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, Set):
        _bounded(value)
        return {plain(v, _depth + 1) for v in value}
    if isinstance(value, tuple):  # namedtuples too
        return tuple(plain(v, _depth + 1) for v in value)
    if isinstance(value, (list, range)) or type(value).__name__ in ("deque", "array"):
        _bounded(value)
        return [plain(v, _depth + 1) for v in value]
    raise NotPlain(f"a {type(value).__name__}, not a number, string, bytes, list, tuple, set or dict")


def _exact(value):
    """A subclass of str, bytes or bool (an enum member, say) as the base type."""
    if isinstance(value, str):
        return str.__str__(value)  # str() of a str-valued Enum would give its name
    if isinstance(value, bytes):
        return bytes(value)
    return bool(value)


def _bounded(collection) -> None:
    if len(collection) > MAX_ITEMS:
        raise NotPlain(f"{len(collection):,} items (at most {MAX_ITEMS:,})")


def plain_repr(value) -> str:
    """What the grader reads out of the kernel: repr(("ok", the plain value)), or
    repr(("not plain", why))."""
    try:
        return repr(("ok", plain(value)))
    except NotPlain as e:
        return repr(("not plain", str(e)))
