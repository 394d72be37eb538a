"""Whose are your topics, and is that lab still running? What start_lab() asks before it clears
your namespace, so that lab 15's first cell does not delete the topics of lab 12's open kernel.

Kafka's topic names do not say which lab made them ("<namespace>.flights" is lab 2's, 9's, 10's
and 12's), so the kit keeps two small records, per namespace, in the user's cache folder:

- a *marker* per process that called start_lab(name): its lab, pid and the process's start
  time. A marker whose process is gone (or whose pid now belongs to another process) is a lab
  that ended. A marker is the robust signal for a kernel that is open but idle: an idle kernel
  holds no connection the brokers could show. (The brokers' side is asked too: a consumer
  group of yours with members has its topics in use, whoever runs it; see `in_use_by_groups`.)
- a *ledger*, {topic: [labs]}: who made each topic. lab.fresh_topic() writes its topic's lab;
  a topic made some other way (your admin client, a stream app's internal topics) is given, at
  the next start_lab, the labs whose markers were there since the last start_lab, the labs that
  could have made it.

Both are hints kept on your own disk: lost or unwritable, start_lab falls back to what the
brokers say and deletes the topics no running lab can be named for.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from . import settings


def folder(namespace: str) -> Path:
    return settings.env_path("XDG_CACHE_HOME") / "kafka-course" / "labs" / namespace


@dataclass(frozen=True)
class Marker:
    lab: str
    pid: int
    started: float  # the process's start time (psutil): a pid reused by another process is not it
    path: Path

    def alive(self) -> bool:
        try:
            return abs(psutil.Process(self.pid).create_time() - self.started) < 1
        except psutil.Error:
            return False

    def mine(self) -> bool:
        return self.pid == os.getpid()


def this_process() -> tuple[int, float]:
    return os.getpid(), psutil.Process().create_time()


def markers(namespace: str) -> list[Marker]:
    found = []
    for f in sorted(folder(namespace).glob("*.kernel.json")):
        try:
            m = json.loads(f.read_text())
            found.append(Marker(str(m["lab"]), int(m["pid"]), float(m["started"]), f))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # half-written or foreign: not a lab
    return found


def mark_started(namespace: str, lab: str) -> None:
    """This process runs `lab` (start_lab's call): a marker, until the process ends."""
    try:
        pid, started = this_process()
        folder(namespace).mkdir(parents=True, exist_ok=True)
        path = folder(namespace) / f"{lab}.{pid}.kernel.json"
        path.write_text(json.dumps({"lab": lab, "pid": pid, "started": started}))
    except (OSError, psutil.Error):
        pass  # a read-only home, no /proc: the brokers' side is still asked


def running(namespace: str, besides: str) -> dict[str, list[int]]:
    """The labs other than `besides` with a live process (a kernel, a script), and their pids."""
    found: dict[str, list[int]] = {}
    for m in markers(namespace):
        if m.lab != besides and not m.mine() and m.alive():
            found.setdefault(m.lab, []).append(m.pid)
    return found


def _ledger_path(namespace: str) -> Path:
    return folder(namespace) / "topics.json"


def ledger(namespace: str) -> dict[str, list[str]]:
    try:
        got = json.loads(_ledger_path(namespace).read_text())
        return {str(t): [str(lab) for lab in labs] for t, labs in got.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def _write_ledger(namespace: str, entries: dict[str, list[str]]) -> None:
    try:
        folder(namespace).mkdir(parents=True, exist_ok=True)
        tmp = _ledger_path(namespace).with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=0, sort_keys=True))
        tmp.replace(_ledger_path(namespace))  # whole or not at all: two kernels may write at once
    except OSError:
        pass


def made(namespace: str, topic: str, lab: str) -> None:
    """`lab` made `topic` (lab.fresh_topic)."""
    entries = ledger(namespace)
    if entries.get(topic) != [lab]:
        _write_ledger(namespace, {**entries, topic: [lab]})


def owners(namespace: str, topics: list[str]) -> dict[str, list[str]]:
    """Each of `topics` (your namespace's, now) with the labs that may have made it: its lab
    from the ledger, else every lab with a marker (running, or ended since the last start_lab),
    [] if none. Written back to the ledger, which forgets topics that are gone; the markers of
    ended labs are dropped, since what they made is now written against them."""
    entries = ledger(namespace)
    found = markers(namespace)
    since = sorted({m.lab for m in found})
    result = {t: entries.get(t) or since for t in topics}
    _write_ledger(namespace, result)
    for m in found:
        if not m.alive():
            m.path.unlink(missing_ok=True)
    return result


def in_use_by_groups(admin, namespace: str) -> dict[str, list[str]]:
    """The brokers' side: {topic: [groups]} for the topics assigned to members of your consumer
    groups right now (a stream app, a consumer left open in a kernel, a script run by hand).
    Consumers without a group (assign()) and groups of Kafka's newer protocol are not seen, nor
    Kafka Connect's worker groups (lab 13's): their members hold connectors, not partitions, and
    kafka-python 3.0.12 cannot decode their description ("Buffer underrun decoding string")."""
    from .clients import in_namespace

    mine = sorted(
        str(g["group_id"])
        for g in admin.list_groups()
        if in_namespace(namespace, str(g["group_id"])) and g.get("protocol_type") != "connect"
    )
    if not mine:
        return {}
    used: dict[str, list[str]] = {}
    for group, state in admin.describe_groups(mine).items():
        for member in state.get("members") or []:
            for part in (member.get("member_assignment") or {}).get("assigned_partitions") or []:
                used.setdefault(part["topic"], [])
                if group not in used[part["topic"]]:
                    used[part["topic"]].append(group)
    return used


def forget(namespace: str, topics: list[str]) -> None:
    """`topics` were deleted: a topic made again under the same name may be another lab's."""
    entries = ledger(namespace)
    if any(t in entries for t in topics):
        _write_ledger(namespace, {t: labs for t, labs in entries.items() if t not in topics})
