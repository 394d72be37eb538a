"""Run a student's script, and crash it on purpose in the middle of a write.

    python -m selfcheck.harness [--crash-on-write NAME:N] [--crash-on-send N] [--crash-before-send N]
                                 [--crash-after-commit N] [--crash-before-offset-commit N]
                                 [--crash-after-offset-commit N] [--crash-after SECONDS] [--stop-spark]
                                 script.py ARGS...

--crash-on-write NAME:N SIGKILL the script in the middle of the N-th write to a file whose name
                        starts with NAME: half the data is on disk, then it dies, as in a power
                        cut while writing a checkpoint (a file written in place is left corrupt).
--crash-on-send N       SIGKILL right after the N-th KafkaProducer.send(), once the producer has
                        delivered what it holds: the records are on the brokers (inside the
                        open transaction, if there is one), nothing after them has happened.
--crash-before-send N   SIGKILL when KafkaProducer.send() is called for the N-th time, before
                        that record reaches the producer: a worker dies with the work on the
                        record in hand half-done (its result never written).
--crash-after-commit N  SIGKILL right after the N-th KafkaProducer.commit_transaction() of a
                        transaction that sent a record returned: whatever the script does after a
                        transaction (its own offset commit, a file it writes) never happens.
                        Transactions that sent nothing are not counted: a batch without output
                        would hide a mistake that repeats a batch.
--crash-before-offset-commit N
                        SIGKILL when KafkaConsumer.commit() (or commit_async()) is called for
                        the N-th time, before the offsets reach the brokers: whatever the script
                        wrote before it is kept, and the records are read again on restart (an
                        earlier commit_async() still in flight is lost with the process).
--crash-after-offset-commit N
                        SIGKILL right after the N-th KafkaConsumer.commit() (or commit_async())
                        has stored its offsets: whatever the script meant to do after it (the
                        write of a batch it committed first) never happens.
--crash-after SECONDS   SIGKILL the script after SECONDS, wherever it is (by hand; when grading,
                        the grader kills the script's sandbox from outside instead).
--stop-spark            when the script ends, stop the Spark session it left running, as its
                        driver's JVM does by itself when Python exits outside a sandbox: the
                        driver finishes writing its event log (lab 9 reads it) before the
                        sandbox ends and kills what is left in it.

The grader runs this inside the script's sandbox. The exit status tells what happened: -9
(137 from a sandbox) for a planned crash. A script can SIGKILL itself too, so a grader believes
the status only beside what it sees itself (lab 13: the group's committed offset on the brokers).
"""

from __future__ import annotations

import argparse
import builtins
import io
import os
import runpy
import signal
import sys
import threading


def crash() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _HalfWriter:
    """A file that writes half of the first data it is given, flushes it, and dies."""

    def __init__(self, f):
        self._f = f

    def write(self, data):
        self._f.write(data[: max(1, len(data) // 2)])
        self._f.flush()
        crash()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._f, name)


def crash_on_write(name: str, nth: int) -> None:
    """SIGKILL at the nth opening for writing of a file whose name starts with `name`.

    Through open() (the usual way), the file is opened and half of the first data written to
    it reaches the disk before the crash. Any other way of opening it (os.open, a saved
    reference to the original open) is seen by an audit hook, which code cannot remove: there
    the crash comes right after the file was opened (and, for mode "w", emptied), before
    anything is written. A save through a temporary file of another name (tempfile.mkstemp,
    NamedTemporaryFile) counts when it is renamed onto the checkpoint, and dies just before
    the rename. A script that dodges all of these never crashes, and the grader fails a run
    that was meant to crash but did not."""
    real_open = io.open
    seen = {"count": 0}
    ours = threading.local()

    def matches(file) -> bool:
        return isinstance(file, (str, bytes, os.PathLike)) and os.path.basename(os.fsdecode(file)).startswith(name)

    def open_(file, mode="r", *args, **kwargs):
        writing = any(c in mode for c in "wax+") and matches(file)
        ours.opening = writing
        try:
            f = real_open(file, mode, *args, **kwargs)
        finally:
            ours.opening = False
        if writing:
            seen["count"] += 1
            if seen["count"] == nth:
                return _HalfWriter(f)
        return f

    def hook(event, args):
        if event == "os.rename":  # os.rename and os.replace: a temporary file renamed onto the checkpoint
            src, dst = args[0], args[1]
            if matches(dst) and not matches(src):  # (a "checkpoint*" temporary file was counted when opened)
                seen["count"] += 1
                if seen["count"] == nth:
                    crash()  # before the rename: the old checkpoint stays
            return
        if event != "open" or getattr(ours, "opening", False):
            return
        file, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        )
        if writing and matches(file):
            seen["count"] += 1
            if seen["count"] == nth:
                truncating = (isinstance(mode, str) and "w" in mode) or (isinstance(flags, int) and flags & os.O_TRUNC)
                if truncating and os.path.exists(file):
                    os.truncate(file, 0)  # opened for writing, nothing written yet: then the power cut
                crash()

    builtins.open = io.open = open_
    sys.addaudithook(hook)


def crash_in_producer(method: str, nth: int, counts=lambda producer: True, before: bool = False) -> None:
    """SIGKILL after the nth call of KafkaProducer.<method> that counts(producer) accepts (see the
    module's help); before=True: at the nth call, before it runs. A script that reaches the producer another way (a saved reference, another
    client library) never crashes, and the grader fails a run that was meant to crash but did not."""
    from kafka import KafkaProducer

    real = getattr(KafkaProducer, method)
    seen = {"count": 0}

    def patched(self, *args, **kwargs):
        if before:
            seen["count"] += 1
            if seen["count"] == nth:
                crash()
            return real(self, *args, **kwargs)
        result = real(self, *args, **kwargs)
        if not counts(self):
            return result
        seen["count"] += 1
        if seen["count"] == nth:
            if method == "send":
                self.flush(timeout=30)
            crash()
        return result

    setattr(KafkaProducer, method, patched)


def crash_after_commit(nth: int) -> None:
    """SIGKILL after the nth commit_transaction() of a transaction that sent a record (see
    --crash-after-commit): a batch without output would hide a job that repeats a batch."""
    from kafka import KafkaProducer

    real_send, real_abort = KafkaProducer.send, KafkaProducer.abort_transaction
    sent = set()  # ids of producers whose open transaction sent a record

    def send(self, *args, **kwargs):
        sent.add(id(self))
        return real_send(self, *args, **kwargs)

    def abort_transaction(self, *args, **kwargs):
        sent.discard(id(self))
        return real_abort(self, *args, **kwargs)

    def sent_something(producer) -> bool:
        if id(producer) not in sent:
            return False
        sent.discard(id(producer))  # the next transaction starts empty
        return True

    KafkaProducer.send, KafkaProducer.abort_transaction = send, abort_transaction
    crash_in_producer("commit_transaction", nth, counts=sent_something)


def crash_at_offset_commit(nth: int, before: bool) -> None:
    """SIGKILL at the nth KafkaConsumer.commit() or commit_async(): before it stores the offsets,
    or (before=False) once it has. A script that commits another way (auto-commit, a saved
    reference) never crashes, and the grader fails a run that was meant to crash but did not."""
    from kafka import KafkaConsumer

    seen = {"count": 0}
    real_commit = KafkaConsumer.commit

    def patch(method: str) -> None:
        real = getattr(KafkaConsumer, method)

        def patched(self, *args, **kwargs):
            seen["count"] += 1
            if seen["count"] != nth:
                return real(self, *args, **kwargs)
            if not before:  # stored for sure (an asynchronous commit too) before the crash
                real_commit(self, *args[:1], **{k: v for k, v in kwargs.items() if k == "offsets"})
            crash()

        setattr(KafkaConsumer, method, patched)

    patch("commit")
    patch("commit_async")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m selfcheck.harness", description=__doc__.splitlines()[0])
    p.add_argument("--crash-on-write", metavar="NAME:N")
    p.add_argument("--crash-on-send", type=int, metavar="N")
    p.add_argument("--crash-before-send", type=int, metavar="N")
    p.add_argument("--crash-after-commit", type=int, metavar="N")
    p.add_argument("--crash-before-offset-commit", type=int, metavar="N")
    p.add_argument("--crash-after-offset-commit", type=int, metavar="N")
    p.add_argument("--crash-after", type=float, metavar="SECONDS")
    p.add_argument("--stop-spark", action="store_true")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.crash_on_write:
        name, nth = a.crash_on_write.rsplit(":", 1)
        crash_on_write(name, int(nth))
    if a.crash_on_send:
        crash_in_producer("send", a.crash_on_send)
    if a.crash_before_send:
        crash_in_producer("send", a.crash_before_send, before=True)
    if a.crash_after_commit:
        crash_after_commit(a.crash_after_commit)
    if a.crash_before_offset_commit:
        crash_at_offset_commit(a.crash_before_offset_commit, before=True)
    if a.crash_after_offset_commit:
        crash_at_offset_commit(a.crash_after_offset_commit, before=False)
    if a.crash_after is not None:
        timer = threading.Timer(a.crash_after, crash)
        timer.daemon = True
        timer.start()
    sys.argv = [a.script, *a.args]
    # As `python script.py` would: the script's folder first, for the modules beside it. Only now,
    # with the harness loaded: the grader starts it with -P, so nothing in the working folder can
    # stand in for the harness or what it patches.
    sys.path.insert(0, os.path.dirname(os.path.abspath(a.script)))
    try:
        runpy.run_path(a.script, run_name="__main__")
    finally:
        if a.stop_spark:
            stop_spark()


def stop_spark() -> None:
    """Stop the SparkContext the script left running, if any (its driver closes its event log)."""
    context = getattr(sys.modules.get("pyspark"), "SparkContext", None)
    active = getattr(context, "_active_spark_context", None)
    if active is not None:
        try:
            active.stop()
        except Exception:  # the script's error, if any, is what its run reports
            pass


if __name__ == "__main__":
    main()
