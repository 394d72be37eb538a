"""The one way the course waits for something: ask again until it holds or a deadline passes.

    waited = wait_for(lambda: topic in admin.list_topics(), timeout_s=30)
    if not waited:
        raise RuntimeError(f"{topic} did not appear within 30 s (last: {waited.last})")

`wait_for` never raises on its own account: it returns what it saw, and the caller says what a
timeout means where it happens (a grader's CheckFailed with a hint, a ClusterError with a log's
tail). Deadlines, never fixed sleeps: a wait ends as soon as its condition holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_EVERY_S = 0.25


@dataclass
class Waited:
    """How a wait ended: `done` if the condition held (also the object's truth value), else it
    timed out or was stopped; `last` is the probe's last value, or the last exception it raised
    of those the wait was told to retry."""

    done: bool
    last: Any
    seconds: float
    stopped: bool = False

    def __bool__(self) -> bool:
        return self.done


def wait_for(
    probe: Callable[[], Any],
    *,
    timeout_s: float,
    until: Callable[[Any], bool] = bool,
    every_s: float = DEFAULT_EVERY_S,
    retry_on: tuple[type[BaseException], ...] = (),
    stop_if: Callable[[], bool] | None = None,
) -> Waited:
    """Call probe() until until(value) holds (by default: the value is true), at most timeout_s
    seconds, pausing every_s between tries. An exception of a type in `retry_on` counts as "not
    yet" (it becomes `last`); any other propagates. `stop_if()`, asked after each try that did
    not succeed, ends the wait early when waiting longer cannot help (a process that exited)."""
    start = time.monotonic()
    deadline = start + timeout_s
    last: Any = None
    while True:
        try:
            last = probe()
            if until(last):
                return Waited(True, last, time.monotonic() - start)
        except retry_on as e:
            last = e
        if stop_if is not None and stop_if():
            return Waited(False, last, time.monotonic() - start, stopped=True)
        if time.monotonic() >= deadline:
            return Waited(False, last, time.monotonic() - start)
        time.sleep(min(every_s, max(0.0, deadline - time.monotonic())))
