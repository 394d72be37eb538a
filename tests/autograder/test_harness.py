"""The crash harness, on real processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

WRITER = textwrap.dedent("""
    import json, os, sys
    for i in range(1, 6):
        if sys.argv[1] == "atomic":
            with open("checkpoint.json.tmp", "w") as f:
                json.dump({"n": i, "pad": "x" * 1000}, f)
            os.replace("checkpoint.json.tmp", "checkpoint.json")
        else:
            with open("checkpoint.json", "w") as f:
                json.dump({"n": i, "pad": "x" * 1000}, f)
    print("done")
""")


def run(tmp_path: Path, *args: str, script: str = WRITER) -> subprocess.CompletedProcess:
    (tmp_path / "writer.py").write_text(script)
    return subprocess.run(
        [sys.executable, "-m", "selfcheck.harness", *args], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )


def test_crash_on_write_kills_halfway_through_the_nth_write(tmp_path):
    out = run(tmp_path, "--crash-on-write", "checkpoint:3", "writer.py", "in-place")
    assert out.returncode == -9 and "done" not in out.stdout
    text = (tmp_path / "checkpoint.json").read_text()
    assert 0 < len(text) < 500  # half of the first chunk written: corrupt JSON
    try:
        json.loads(text)
        raise AssertionError("the checkpoint should be corrupt")
    except ValueError:
        pass


def test_an_atomic_writer_keeps_its_last_good_checkpoint(tmp_path):
    out = run(tmp_path, "--crash-on-write", "checkpoint:3", "writer.py", "atomic")
    assert out.returncode == -9
    assert json.loads((tmp_path / "checkpoint.json").read_text())["n"] == 2


def test_crash_after_a_time(tmp_path):
    out = run(tmp_path, "--crash-after", "0.3", "writer.py", "x", script="import time\ntime.sleep(30)\nprint('woke')\n")
    assert out.returncode == -9 and "woke" not in out.stdout


def test_no_crash_runs_to_the_end(tmp_path):
    out = run(tmp_path, "writer.py", "atomic")
    assert out.returncode == 0 and "done" in out.stdout


def test_crash_on_write_catches_other_file_apis(tmp_path):
    """A writer that goes around open() (os.open, or the original open saved away) still dies
    at its nth checkpoint; an in-place writer is left with an empty file, as after a power cut."""
    script = textwrap.dedent("""
        import _io, os
        for i in range(1, 6):
            fd = os.open("checkpoint.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if i % 2 else None
            if fd is not None:
                os.write(fd, b'{"n": %d}' % i)
                os.close(fd)
            else:
                with _io.open("checkpoint.json", "w") as f:
                    f.write('{"n": %d}' % i)
        print("done")
    """)
    out = run(tmp_path, "--crash-on-write", "checkpoint:3", "writer.py", script=script)
    assert out.returncode == -9 and "done" not in out.stdout
    assert (tmp_path / "checkpoint.json").read_text() == ""


def test_a_save_through_a_differently_named_temporary_file_counts_at_its_rename(tmp_path):
    """tempfile's names do not start with "checkpoint": the save is counted when the file is
    renamed onto the checkpoint, and the crash comes just before that rename."""
    script = textwrap.dedent("""
        import json, os, tempfile
        for i in range(1, 6):
            with tempfile.NamedTemporaryFile("w", dir=".", delete=False) as f:
                json.dump({"n": i}, f)
            os.replace(f.name, "checkpoint.json")
        print("done")
    """)
    out = run(tmp_path, "--crash-on-write", "checkpoint:3", "writer.py", script=script)
    assert out.returncode == -9 and "done" not in out.stdout
    assert json.loads((tmp_path / "checkpoint.json").read_text())["n"] == 2


PRODUCER = textwrap.dedent("""
    import sys
    from kafka import KafkaProducer
    from cluster import connection, transactional_id
    topic, sizes = sys.argv[1], sys.argv[2:] or ["5", "5"]     # records per transaction
    producer = KafkaProducer(**connection(), transactional_id=transactional_id(topic.split(".")[-1]))
    producer.init_transactions()
    for batch, size in enumerate(sizes):
        producer.begin_transaction()
        for i in range(int(size)):
            producer.send(topic, f"{batch}-{i}".encode())
        producer.commit_transaction()
    producer.close()
    print("done")
""")


def read(topic: str, isolation_level: str) -> list[str]:
    from kafka import KafkaConsumer, TopicPartition

    from cluster import connection

    consumer = KafkaConsumer(**connection(), isolation_level=isolation_level, consumer_timeout_ms=3000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    values = [r.value.decode() for r in consumer]
    consumer.close()
    return values


def fresh_topic(name: str) -> str:
    from cluster.lab import start_lab

    return start_lab("harness", clean=False).fresh_topic(name, 1)


def test_crash_on_send_dies_once_the_nth_record_is_on_the_brokers(cluster, tmp_path):
    topic = fresh_topic("harness-send")
    done = run(tmp_path, "--crash-on-send", "3", "writer.py", topic, script=PRODUCER)
    assert done.returncode == -9, done.stderr
    assert read(topic, "read_uncommitted") == ["0-0", "0-1", "0-2"]  # delivered, in the open transaction
    assert read(topic, "read_committed") == []


def test_crash_after_commit_dies_once_the_nth_transaction_is_committed(cluster, tmp_path):
    topic = fresh_topic("harness-commit")
    done = run(tmp_path, "--crash-after-commit", "1", "writer.py", topic, script=PRODUCER)
    assert done.returncode == -9, done.stderr
    assert "done" not in done.stdout
    assert read(topic, "read_committed") == [f"0-{i}" for i in range(5)]


def test_crash_after_commit_counts_only_transactions_that_sent_a_record(cluster, tmp_path):
    # an empty transaction (a batch without alerts) would hide a job that repeats a batch
    topic = fresh_topic("harness-commit-empty")
    done = run(tmp_path, "--crash-after-commit", "1", "writer.py", topic, "0", "0", "3", "5", script=PRODUCER)
    assert done.returncode == -9, done.stderr
    assert read(topic, "read_committed") == [f"2-{i}" for i in range(3)]


COMMITTER = textwrap.dedent("""
    import sys
    from kafka import KafkaConsumer
    from cluster import connection
    topic, group = sys.argv[1], sys.argv[2]
    consumer = KafkaConsumer(topic, **connection(), group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=6000)
    for record in consumer:                     # one record, one write, one commit
        with open("written.txt", "a") as f:
            f.write(record.value.decode() + "\\n")
        consumer.commit_async() if sys.argv[3:] == ["async"] else consumer.commit()
        if record.offset == 4:
            break
    consumer.close()
    print("done")
""")


def committed(group: str, topic: str) -> int | None:
    from kafka import KafkaAdminClient, TopicPartition

    from cluster import connection

    with KafkaAdminClient(**connection()) as admin:
        offsets = admin.list_group_offsets(group).get(group, {})
    found = offsets.get(TopicPartition(topic, 0))
    return found.offset if found else None


@pytest.mark.parametrize("how", ["sync", "async"])
def test_crash_at_an_offset_commit_dies_before_or_after_it_is_stored(cluster, tmp_path, how):
    from kafka import KafkaProducer

    from cluster import connection, group_name

    topic = fresh_topic(f"harness-offsets-{how}")
    with KafkaProducer(**connection()) as producer:
        for i in range(5):
            producer.send(topic, f"r{i}".encode())
    for when, stored in (("before", 1), ("after", 2)):  # the 2nd commit: record r1, offset 2 once stored
        group = group_name(f"harness-{how}-{when}-{time.monotonic_ns()}")
        (tmp_path / "written.txt").unlink(missing_ok=True)
        done = run(tmp_path, f"--crash-{when}-offset-commit", "2", "writer.py", topic, group, how, script=COMMITTER)
        assert done.returncode == -9, done.stderr
        assert (tmp_path / "written.txt").read_text().split() == ["r0", "r1"]  # the write before the commit
        if how == "async" and when == "before":  # the 1st asynchronous commit may still be in flight: lost
            assert committed(group, topic) in (None, stored)
        else:
            assert committed(group, topic) == stored


# A student's script that dies, as a part's check sees it (a self-check, as grade() runs it in the
# kernel): at once, with the exception's last line and the log's name; the blank template's
# NotImplementedError as "not written yet". A kafka-python lab (4) and a quixstreams one (12).
BLANK = '"""The template."""\nimport sys\n\nfrom cluster.lab import start_lab\n\n# YOUR CODE HERE\nraise NotImplementedError()\n'
RAISES_AT_ONCE = 'import sys\n\nprint("starting", sys.argv[1:])\nraise KeyError("origin")\n'


def graded(tmp_path: Path, monkeypatch, label: str, scripts: dict[str, str]) -> tuple[str, float]:
    """grade(label) in a notebook's folder holding these scripts: its message and seconds."""
    from selfcheck.checks import CheckFailed, grade

    for name, text in scripts.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    began = time.monotonic()
    with pytest.raises(CheckFailed) as failed:
        grade(label, {})
    return str(failed.value), time.monotonic() - began


@pytest.mark.parametrize("text", [BLANK, RAISES_AT_ONCE], ids=["blank", "raises-at-once"])
def test_lab4_a_member_that_dies_is_told_at_once(cluster, tmp_path, monkeypatch, text):
    from cluster.lab import start_lab

    start_lab("lab4", clean=False).fresh_topic("departures", 4)
    message, seconds = graded(tmp_path, monkeypatch, "lab4-q2", {"group_member.py": text})
    if text == BLANK:
        assert message.startswith("group_member.py is not written yet: it still raises NotImplementedError"), message
        assert "hint: Replace `raise NotImplementedError()` in the %%writefile group_member.py cell" in message
    else:
        assert "(exit 1): KeyError: 'origin'" in message, message
    assert "before its group test.members-" in message and ".log)" in message, message
    assert "expected:" not in message and "Traceback" not in message, message
    assert seconds < 30, f"{seconds:.0f} s to see a script that died at once"


@pytest.mark.parametrize("text", [BLANK, RAISES_AT_ONCE], ids=["blank", "raises-at-once"])
def test_lab12_an_app_that_dies_is_told_at_once(cluster, tmp_path, monkeypatch, text):
    message, seconds = graded(tmp_path, monkeypatch, "lab12-q1", {"carrier_counts.py": text})
    if text == BLANK:
        assert message.startswith("carrier_counts.py is not written yet: it still raises NotImplementedError"), message
        assert "(run 1: it ended after" in message
    else:
        assert message.startswith("carrier_counts.py (run 1) ended after"), message
        assert "(exit 1): KeyError: 'origin'" in message
    assert "before it wrote to counts-" in message and "its output is in carrier_counts-run 1.log" in message
    assert (tmp_path / "carrier_counts-run 1.log").exists(), "the log a self-check names is beside the notebook"
    assert "expected:" not in message and "Traceback" not in message, message
    assert seconds < 30, f"{seconds:.0f} s to see a script that died at once"
