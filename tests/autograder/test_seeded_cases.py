"""The grader's seeded cases test every rule whatever the seed: a case that a known mistake
answers correctly by chance would pass that mistake (CI once saw lab 6's tombstone rule so)."""

from __future__ import annotations

import random
from types import SimpleNamespace

from autograder.checks.lab6 import compaction_case


def kept(closed, active):
    """What a compacted topic keeps: each key's newest closed write (a tombstone too), all active ones."""
    newest = {key: offset for offset, (key, _) in enumerate(closed)}
    return sorted(newest.values()) + list(range(len(closed), len(closed) + len(active)))


def tombstones_left_out(closed, active):
    newest = {}
    for offset, (key, value) in enumerate(closed):
        if value is None:
            newest.pop(key, None)
        else:
            newest[key] = offset
    return sorted(newest.values()) + list(range(len(closed), len(closed) + len(active)))


def first_write_wins(closed, active):
    first = {}
    for offset, (key, _) in enumerate(closed):
        first.setdefault(key, offset)
    return sorted(first.values()) + list(range(len(closed), len(closed) + len(active)))


def active_compacted_too(closed, active):
    newest = {key: offset for offset, (key, _) in enumerate(closed + active)}
    return sorted(newest.values())


def test_every_compaction_case_tells_each_mistake_from_the_rule():
    for seed in range(2000):
        closed, active = compaction_case(SimpleNamespace(rng=random.Random(seed)))
        truth = kept(closed, active)
        for mistake in (tombstones_left_out, first_write_wins, active_compacted_too):
            assert mistake(closed, active) != truth, f"seed {seed}: {mistake.__name__} passes {closed}, {active}"
