"""Lab 7's clusters of one's own (cluster/own.py): free ports that two gradings never share, and
no broker left behind when a start fails half-way."""

from __future__ import annotations

import os

import pytest

from cluster import own, settings


def test_two_clusters_starting_at_once_get_different_ports():
    first, fd1 = own._lock_free_port_base()
    try:
        second, fd2 = own._lock_free_port_base()
        os.close(fd2)
    finally:
        os.close(fd1)
    assert first != second
    assert {first, second} <= set(settings.OWN_PORT_BASES)


def test_a_start_that_fails_half_way_leaves_no_broker(tmp_path, monkeypatch, cluster):
    started = []

    def fail_after_the_brokers_started(c, namespace):
        started.extend(node.process() for node in c.nodes.values())
        raise RuntimeError("the user could not be made")

    monkeypatch.setattr(own, "_with_user", fail_after_the_brokers_started)
    with pytest.raises(RuntimeError, match="could not be made"):
        own.start(tmp_path / "own", "test-own")
    assert len(started) == 3 and all(started), "the brokers had started"
    assert not any(p.is_running() and p.status() != "zombie" for p in started), "a broker outlived the failed start"
    assert not (tmp_path / "own").exists()
