"""The one wait helper (cluster/waiting.py): it ends as soon as its condition holds, gives up at
its deadline with the last thing seen, retries only the exceptions it is told to, and stops early
when asked."""

from __future__ import annotations

import itertools
import time

import pytest

from cluster.waiting import wait_for


def test_it_returns_the_first_value_that_holds_without_waiting_longer():
    counter = itertools.count()
    waited = wait_for(lambda: next(counter), timeout_s=10, until=lambda n: n >= 3, every_s=0.01)
    assert waited and waited.last == 3
    assert waited.seconds < 5


def test_at_the_deadline_it_says_so_with_the_last_value():
    start = time.monotonic()
    waited = wait_for(lambda: "not yet", timeout_s=0.3, until=lambda v: v == "ready", every_s=0.05)
    assert not waited and waited.last == "not yet" and not waited.stopped
    assert 0.3 <= time.monotonic() - start < 3


def test_it_retries_the_exceptions_it_is_told_to_and_no_others():
    tries = itertools.count()

    def flaky():
        if next(tries) < 2:
            raise ConnectionError("refused")
        return "up"

    assert wait_for(flaky, timeout_s=5, every_s=0.01, retry_on=(ConnectionError,)).last == "up"
    timed_out = wait_for(lambda: 1 / 0, timeout_s=0.1, every_s=0.01, retry_on=(ZeroDivisionError,))
    assert isinstance(timed_out.last, ZeroDivisionError)
    with pytest.raises(ZeroDivisionError):
        wait_for(lambda: 1 / 0, timeout_s=5, retry_on=(ConnectionError,))


def test_stop_if_ends_the_wait_before_its_deadline():
    waited = wait_for(lambda: False, timeout_s=30, every_s=0.01, stop_if=lambda: True)
    assert not waited and waited.stopped and waited.seconds < 5


def test_a_condition_met_as_the_wait_is_stopped_still_counts():
    """A script that printed its last line and exited: done, not stopped."""
    waited = wait_for(lambda: "all printed", timeout_s=5, stop_if=lambda: True)
    assert waited and not waited.stopped
