"""Gradings run at once by what they cost, not by a fixed count.

Each lab declares in its checks' policy how many cores one of its gradings keeps busy on average
(`LabPolicy.grading_cores`: measured, its own processes and the brokers' work for it). A pool
admits the next grading while the running gradings' cores and its own fit in the cores it was
given, so a light lab's gradings (mostly waiting on polls and deadlines) run many at once and a
Spark or own-cluster grading runs within the cores; a lab's `gradings_at_once` caps it further
(memory: lab 15's own cluster). Nothing running: the next grading is admitted whatever it costs.
Used by grade-all and the self-test."""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def machine_cores() -> int:
    """The cores this process may run on (a container's or a cgroup's share, where set)."""
    return len(os.sched_getaffinity(0))


def grading_cost(lab: str) -> tuple[float, int | None]:
    """(cores one grading of `lab` keeps busy, the most of its gradings at once or None)."""
    from selfcheck.checks import policy

    p = policy(lab)
    return p.grading_cores, p.gradings_at_once


def at_once(lab: str, cores: float) -> int:
    """How many gradings of one lab fit in `cores` (at least one)."""
    cost, most = grading_cost(lab)
    n = max(1, int(cores / cost + 1e-9))
    return min(n, most) if most else n


def run_by_cost(
    items: Iterable[T],
    runner: Callable[[T], R],
    cores: float,
    lab_of: Callable[[T], str],
    done: Callable[[T, R | BaseException], None] | None = None,
    cost: Callable[[str], tuple[float, int | None]] = grading_cost,
) -> list[R]:
    """runner(item) for every item, as many at once as their labs' costs fit in `cores`; the
    results in the items' order. The costliest labs' items start first (the longest gradings,
    so the cheap ones fill the gaps and the end); within a lab, the items' order is kept.
    `done(item, result)` is called as each ends. An exception in a runner is raised here once
    all have ended. `cost(lab)` is grading_cost, or a test's."""
    todo = list(items)
    costs = {lab: cost(lab) for lab in {lab_of(i) for i in todo}}
    pending = sorted(todo, key=lambda i: -costs[lab_of(i)][0])
    results: dict[int, object] = {}
    running: Counter = Counter()
    used = [0.0]
    turn = threading.Condition()

    def fits(item: T) -> bool:
        lab = lab_of(item)
        cores_of_one, most = costs[lab]
        if most is not None and running[lab] >= most:
            return False
        return not running.total() or used[0] + cores_of_one <= cores + 1e-9

    def work(item: T) -> None:
        try:
            result: object = runner(item)
        except BaseException as e:  # raised below, by the calling thread
            result = e
        if done is not None:
            done(item, result)  # type: ignore[arg-type]
        with turn:
            results[id(item)] = result
            running[lab_of(item)] -= 1
            used[0] -= costs[lab_of(item)][0]
            turn.notify_all()

    threads = []
    with turn:
        while pending:
            item = next((i for i in pending if fits(i)), None)
            if item is None:
                turn.wait()
                continue
            pending.remove(item)
            running[lab_of(item)] += 1
            used[0] += costs[lab_of(item)][0]
            t = threading.Thread(target=work, args=(item,), daemon=True)
            t.start()
            threads.append(t)
    for t in threads:
        t.join()
    for result in results.values():
        if isinstance(result, BaseException):
            raise result
    return [results[id(i)] for i in todo]  # type: ignore[misc]
