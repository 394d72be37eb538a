"""A member of a share group (KIP-932, "queues for Kafka") from Python.

    from cluster.share import ShareConsumer

    with ShareConsumer(topic_name("jobs"), group_name("workers")) as queue:
        for record in queue.records(idle_s=5):    # one record at a time, locked for you
            do_the_work(record.value)
            queue.acknowledge(record)              # done: the brokers never hand it out again
            # queue.acknowledge(record, "release") # give it back: delivered again, delivery + 1
            # queue.acknowledge(record, "reject")  # never again (a poison record)

None of the Python clients the course serves is a share consumer (kafka-python has none;
confluent-kafka has one from 2.15, and quixstreams holds it below 2.13), so this one drives
Kafka's own Java KafkaShareConsumer in a child JVM, one line a command
(cluster/share_member/ShareMember.java), with your login. It holds one record at a time and
commits each acknowledgement to the brokers before `acknowledge` returns. A record neither
acknowledged nor released is locked to this member until its lock times out or the member's
connection ends; then the brokers hand it to another member.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import class_sharing, jars, settings
from .clients import account, bootstrap_servers
from .errors import ClusterError
from .java import java_executable
from .process import properties

ACKS = ("accept", "release", "reject")
POLL_MS = 500  # one poll's wait inside the JVM; records() asks again until idle_s have passed
START_TIMEOUT_S = 60


def member_classpath() -> str:
    """The share consumer's classpath: Kafka's client jars and the kit's ShareMember, compiled once
    into the jar cache. A grading names it (COURSE_SHARE_MEMBER_CLASSPATH): the sandbox only reads
    the cache, and finding the jars writes to it."""
    return settings.env("COURSE_SHARE_MEMBER_CLASSPATH") or os.pathsep.join(
        map(str, [*jars.jars("kafka-tools"), jars.share_member_jar()])
    )


@dataclass(frozen=True)
class ShareRecord:
    """A record as a share consumer gets it: the fields of kafka-python's ConsumerRecord that a
    share group has, and how many times the brokers have handed it out (1 the first time)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    delivery_count: int


class ShareConsumer:
    """A member of share group `group` (a full name: group_name(...)) reading `topic`."""

    def __init__(self, topic: str, group: str, client_id: str = "", **java_config: str):
        self.topic, self.group = topic, group
        config = {
            "bootstrap.servers": bootstrap_servers(),
            "group.id": group,
            **account().java(),
            **({"client.id": client_id} if client_id else {}),
            **{k.replace("_", "."): str(v) for k, v in java_config.items()},
            "course.topic": topic,
        }
        self._err: collections.deque[str] = collections.deque(maxlen=40)
        java, classpath = java_executable(), member_classpath()
        # Class data sharing, as Kafka's tools have it: the first member that exits cleanly writes
        # the archive (where the jar cache can be written), every later one maps it.
        self._classes = [Path(p) for p in classpath.split(os.pathsep)]
        sharing, self._partial = class_sharing.tool_options(java, self._classes)
        self._java = java
        self._proc = subprocess.Popen(
            [
                java,
                "-Xmx128m",
                "-Xss512k",
                "-XX:TieredStopAtLevel=1",
                "-XX:ReservedCodeCacheSize=32m",
                "-XX:+UseSerialGC",
                "-Dorg.apache.logging.log4j.level=WARN",
                *sharing,
                "-cp",
                classpath,
                "ShareMember",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        threading.Thread(target=self._keep_errors, daemon=True).start()
        self._send(properties(config))  # the login goes through a pipe: never on a command line or disk
        self._held: ShareRecord | None = None

    def _keep_errors(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self._err.append(line.rstrip()[:500])

    def _send(self, text: str) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(text + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None

    def _died(self) -> ClusterError:
        self._proc.wait(5)
        said = [line for line in self._err if line.strip()]
        return ClusterError(
            f"the share consumer's JVM ended (exit code {self._proc.returncode}): " + " | ".join(said[-4:]),
            hint="Is the cluster up, and the topic and group names full ones (topic_name, group_name)?",
        )

    def _ask(self, command: str) -> dict:
        self._send(command)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise self._died()
        answer = json.loads(line)
        if "error" in answer:
            raise ClusterError(f"share consumer: {answer['error']}")
        return answer

    def poll(self, timeout_s: float = POLL_MS / 1000) -> ShareRecord | None:
        """The next record handed to this member (locked to it until acknowledged), or None if
        none came within timeout_s. Acknowledge the record you hold before you poll again."""
        got = self._ask(f"poll {max(1, int(timeout_s * 1000))}")
        if got.get("none"):
            return None

        def raw(field: str) -> bytes | None:
            return None if got[field] is None else base64.b64decode(got[field])

        self._held = ShareRecord(
            got["topic"], got["partition"], got["offset"], raw("key"), raw("value"), got["delivery"] or 1
        )
        return self._held

    def records(self, idle_s: float = 5.0) -> Iterator[ShareRecord]:
        """Records one at a time until none has come for idle_s seconds."""
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            record = self.poll()
            if record is not None:
                yield record
                last = time.monotonic()

    def acknowledge(self, record: ShareRecord, kind: str = "accept") -> None:
        """Tell the brokers what became of `record` and wait until they have it: "accept" (done),
        "release" (give it back, to be delivered again) or "reject" (never deliver it again)."""
        if kind not in ACKS:
            raise ValueError(f"kind must be one of {ACKS}, not {kind!r}")
        if record != self._held:
            raise ClusterError("share consumer: acknowledge the record you hold (the last one poll gave you)")
        self._ask(kind)
        self._held = None

    def close(self) -> None:
        """Leave the group (a record still held is released by the brokers) and stop the JVM."""
        if self._proc.poll() is None:
            try:
                self._send("close")
                self._proc.wait(30)
            except (ClusterError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait(5)
        class_sharing.keep_tool_archive(self._java, self._classes, self._partial, self._proc.returncode == 0)
        self._partial = None

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
