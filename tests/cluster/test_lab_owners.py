"""start_lab() clears your namespace but not under a running lab: whose each topic is (the
ledger), which labs run (their processes' markers), and the message that names them
(cluster/lab_owners.py, cluster/lab.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from cluster import lab_owners

NS = "owners-test"


def a_process_running(lab: str, then: str = "", env: dict | None = None) -> subprocess.Popen:
    """A Python process that calls what start_lab(lab) marks, runs `then`, says so and waits."""
    code = textwrap.dedent(f"""
        import time
        from cluster import lab_owners
        lab_owners.mark_started({NS!r}, {lab!r})
        {then}
        print("ready", flush=True)
        time.sleep(300)
        """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    said = [p.stdout.readline()]  # what `then` prints (start_lab's line), then "ready"
    while said[-1] and said[-1].strip() != "ready":
        said.append(p.stdout.readline())
    assert said[-1].strip() == "ready", said
    return p


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def test_a_running_lab_is_seen_until_its_process_ends(cache):
    kernel = a_process_running("lab12")
    try:
        assert lab_owners.running(NS, besides="lab15") == {"lab12": [kernel.pid]}
        assert lab_owners.running(NS, besides="lab12") == {}  # a lab's own leftovers are its own to clear
    finally:
        kernel.kill()
        kernel.wait()
    assert lab_owners.running(NS, besides="lab15") == {}


def test_a_reused_pid_is_not_the_lab(cache):
    (cache / "kafka-course" / "labs" / NS).mkdir(parents=True)
    pid, started = lab_owners.this_process()
    (cache / "kafka-course" / "labs" / NS / f"lab12.{pid}.kernel.json").write_text(
        f'{{"lab": "lab12", "pid": {pid}, "started": {started - 3600}}}'
    )
    assert [m.alive() for m in lab_owners.markers(NS)] == [False]


def test_topics_are_given_the_lab_that_made_them_or_the_labs_that_could_have(cache):
    lab_owners.made(NS, f"{NS}.made-by-fresh-topic", "lab11")
    kernel = a_process_running("lab12")
    try:
        owners = lab_owners.owners(NS, [f"{NS}.made-by-fresh-topic", f"{NS}.made-by-hand"])
        assert owners == {f"{NS}.made-by-fresh-topic": ["lab11"], f"{NS}.made-by-hand": ["lab12"]}
    finally:
        kernel.kill()
        kernel.wait()
    # lab 12 ended: its marker goes at the next sweep, what it made stays written against it
    assert lab_owners.owners(NS, [f"{NS}.made-by-hand"]) == {f"{NS}.made-by-hand": ["lab12"]}
    assert lab_owners.markers(NS) == []
    lab_owners.forget(NS, [f"{NS}.made-by-hand"])
    assert lab_owners.owners(NS, [f"{NS}.made-by-hand"]) == {f"{NS}.made-by-hand": []}  # made again: nobody known


def test_an_unwritable_cache_leaves_start_lab_working(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # a file: no folder can be made in it
    lab_owners.mark_started(NS, "lab12")
    lab_owners.made(NS, f"{NS}.t", "lab12")
    assert lab_owners.owners(NS, [f"{NS}.t"]) == {f"{NS}.t": []}


def test_start_lab_keeps_a_running_labs_topics_and_names_whose_it_removes(cluster, cache, capsys, monkeypatch):
    from cluster.lab import start_lab

    monkeypatch.setenv("LAB_NAMESPACE", NS)
    made = 'from cluster.lab import start_lab; start_lab("lab12").fresh_topic("counts", 1)'
    kernel = a_process_running("lab12", then=made, env=dict(os.environ))
    try:
        start_lab("lab11", clean=False).fresh_topic("flights", 1)
        start_lab("lab15")
        said = capsys.readouterr().out
        assert "removed 1 old topic(s) of lab11" in said, said
        assert f"kept 1 topic(s) of lab12, still running (pid {kernel.pid}): counts" in said, said
        kernel.kill()
        kernel.wait()
        start_lab("lab15")
        assert "removed 1 old topic(s) of lab12" in capsys.readouterr().out
    finally:
        kernel.kill()
