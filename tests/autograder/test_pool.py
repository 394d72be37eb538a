"""Gradings admitted by what they cost (autograder/pool.py): never more cores at once than given,
a lab's cap held, the costliest first, every result in the items' order, a runner's exception
raised once all have ended. Timed with real threads and short sleeps, no cluster."""

import threading
import time

import pytest

from autograder.pool import run_by_cost

COSTS = {"heavy": (1.0, 2), "light": (0.25, None), "capped": (0.25, 1)}


def test_never_more_cores_than_given_and_results_in_order():
    lock, now, peak, seen = threading.Lock(), {"cores": 0.0, "capped": 0}, {"cores": 0.0, "capped": 0}, []
    items = [("light", i) for i in range(10)] + [("heavy", i) for i in range(3)] + [("capped", i) for i in range(3)]

    def runner(item):
        lab, _ = item
        with lock:
            seen.append(lab)
            now["cores"] += COSTS[lab][0]
            now["capped"] += lab == "capped"
            peak["cores"], peak["capped"] = max(peak["cores"], now["cores"]), max(peak["capped"], now["capped"])
        time.sleep(0.05)
        with lock:
            now["cores"] -= COSTS[lab][0]
            now["capped"] -= lab == "capped"
        return item

    ended = []
    results = run_by_cost(items, runner, 2.0, lambda i: i[0], lambda i, r: ended.append(i), cost=COSTS.__getitem__)
    assert results == items and sorted(ended) == sorted(items)
    assert peak["cores"] <= 2.0 and peak["capped"] == 1
    assert peak["cores"] > 1.0, "cheap gradings run beside a costly one"
    assert seen[0] == "heavy", "the costliest lab starts first"


def test_a_grading_costlier_than_the_machine_still_runs_alone():
    assert run_by_cost([("huge", 1)], lambda i: i[1] * 2, 1.0, lambda i: i[0], cost=lambda lab: (3.0, None)) == [2]


def test_a_runner_that_raises_is_raised_after_the_others_ended():
    ended = []

    def runner(n):
        if n == 0:
            raise RuntimeError("broken grading")
        time.sleep(0.05)
        ended.append(n)
        return n

    with pytest.raises(RuntimeError, match="broken grading"):
        run_by_cost([0, 1, 2], runner, 1.0, lambda n: "light", cost=COSTS.__getitem__)
    assert sorted(ended) == [1, 2]
