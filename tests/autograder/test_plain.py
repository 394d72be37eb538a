"""Answers are judged by value, whatever type the student's code holds them in."""

from __future__ import annotations

import ast
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
from decimal import Decimal
from enum import Enum

import numpy as np
import pandas as pd
import pytest

from selfcheck.plain import NotPlain, plain, plain_repr

Point = namedtuple("Point", "x y")


class Color(str, Enum):  # noqa: UP042 - the str-and-Enum style students meet in older code
    RED = "red"


@pytest.mark.parametrize(
    "value,expected",
    [
        (np.int64(42), 42),
        (np.float32(0.5), 0.5),
        (np.bool_(True), True),
        (np.str_("JFK"), "JFK"),
        (Counter("aab"), {"a": 2, "b": 1}),
        (defaultdict(int, {"x": np.int8(3)}), {"x": 3}),
        (OrderedDict(b=1, a=2), {"b": 1, "a": 2}),
        (Point(1, np.int16(2)), (1, 2)),
        (np.array([[1, 2], [3, 4]]), [[1, 2], [3, 4]]),
        (pd.Series({"EWR": np.float64(1.25)}), {"EWR": 1.25}),
        (deque([1, 2]), [1, 2]),
        (range(3), [0, 1, 2]),
        (frozenset({1}), {1}),
        (Decimal("2.5"), 2.5),
        (Color.RED, "red"),
        ({np.int64(0): [np.int64(5)]}, {0: [5]}),
        (b"x", b"x"),
        (None, None),
    ],
)
def test_other_types_become_plain_python(value, expected):
    found = plain(value)
    assert found == expected and type(found) is type(expected)
    assert ast.literal_eval(plain_repr(value)) == ("ok", expected)


def test_types_with_no_plain_value_say_what_they_are():
    with pytest.raises(NotPlain, match="a object"):
        plain(object())
    kind, why = ast.literal_eval(plain_repr(lambda: 1))
    assert kind == "not plain" and "function" in why
    deep = []
    for _ in range(60):
        deep = [deep]
    with pytest.raises(NotPlain, match="nested"):
        plain(deep)
