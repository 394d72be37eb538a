"""The grader's end of lab 14's broker control channel (cluster/broker_control.py is the script's).

A rolling-restart script runs in the sandbox; the grading's brokers are the grader's processes,
outside it. So the script asks, on a pipe it inherits, one line a request (`stop 2`, `kill 2`,
`start 2`, `ids`), and a thread of the grader's serves them one at a time: it reads the cluster's
state first (the brokers down, the under-replicated partitions, with its own admin client), then
does it with its own cluster's verbs, answers `ok`, `refused: ...` or `error: ...`, and records
it. The record is what the check believes, never what the script printed.

    with Channel(ctx) as channel:
        run = channel.start(ctx, "rolling_restart.py")     # scripts.start, with the pipes
        wait(run, 300)
    fault = rolling_restart_fault(channel.records, channel.brokers, channel.down_at_end)

What the script sends is read bounded, before anything is decoded: at most MAX_LINE_BYTES a line,
MAX_REQUESTS requests, MAX_TOTAL_BYTES in all. A longer line, bytes that are not printable
ASCII, an unknown verb or broker: answered `error: ...` and recorded; past the bounds the grader
answers once more and stops listening (the script's next call then raises)."""

from __future__ import annotations

import errno
import os
import re
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cluster.broker_control import ENV, MAX_LINE_BYTES, refusal

from . import Context
from .own_cluster import cluster_of, retried

MAX_REQUESTS = 100  # a rolling restart of three brokers needs six, and a few ids
MAX_TOTAL_BYTES = 64 * 2**10  # everything the script may send, junk included
READ_BYTES = 4096
POLL_S = 0.2  # how often the serving thread looks whether it should stop
# A script that waited until nothing was under-replicated may have read that from another broker
# than the grader's next read asks, or from the brokers' metrics, a moment ahead of the metadata
# (milliseconds): the grader reads again for up to this long before it records a stop as made
# while partitions were under-replicated. A script that does not wait at all meets a broker still
# out of sync for seconds (lab 14 writes a megabyte while each broker is down and holds its
# catching up until 3 s after its start: lab14.CatchUp), far longer than this.
UNDER_REPLICATED_GRACE_S = 1.0
SHOWN_PARTITIONS = 5  # under-replicated partitions named in a record (the count is whole)
REQUEST = re.compile(r"(stop|kill|start) ([0-9]{1,6})|ids")
PRINTABLE = re.compile(rb"[\x20-\x7e]*")


@dataclass(frozen=True)
class Request:
    """One request, as the grader saw and did it."""

    at_s: float  # since the channel opened
    text: str  # the line received, escaped and cut to MAX_LINE_BYTES (for messages)
    answer: str  # what the script was told: "ok", "refused: ...", "error: ..."
    verb: str | None = None  # stop, kill, start, ids; None when the line was not understood
    broker: int | None = None
    down: frozenset[int] = frozenset()  # brokers whose process was not running, just before
    under_replicated: int | None = None  # partitions whose ISR is not all their replicas, just before
    lagging: tuple[str, ...] = ()  # a few of them, "topic-partition"
    took_s: float = 0.0
    note: str = ""  # what else the grader saw (a stop that had to kill, a state it could not read)

    @property
    def done(self) -> bool:
        return self.answer.startswith("ok")


def under_replicated(admin) -> list[str]:
    """Every partition of every topic (internal ones too) whose in-sync replicas are not all
    its replicas, as "topic-partition"."""
    found = []
    for topic in admin.describe_topics():
        for p in topic["partitions"]:
            if set(p["replica_nodes"]) != set(p["isr_nodes"]):
                found.append(f"{topic['name']}-{p['partition_index']}")
    return sorted(found)


@dataclass
class Channel:
    """Two pipes to a script, and the thread that serves its requests on the grading's cluster."""

    ctx: Context
    records: list[Request] = field(default_factory=list)
    down_at_end: frozenset[int] | None = None  # measured when the channel closes
    stopped_listening: str = ""  # why the grader stopped before the script closed its end
    # What the grader does around the script's requests, given the broker (lab 14: makes a
    # restarted broker's catching up take seconds): just before a stop or kill, once it is down
    # (before answering), once a broker it started is back (before answering).
    before_stop: Callable[[int], None] | None = None
    while_down: Callable[[int], None] | None = None
    when_back: Callable[[int], None] | None = None

    def __post_init__(self) -> None:
        self.brokers = tuple(sorted(cluster_of(self.ctx).nodes))
        self._started = time.monotonic()
        self._quit = threading.Event()
        self._thread: threading.Thread | None = None
        self._closing = threading.Lock()
        self._ours_open = True
        # os.pipe's descriptors are not inheritable: only the two handed over by pass_fds reach the script
        self._request_r, self._request_w = os.pipe()
        self._answer_r, self._answer_w = os.pipe()
        os.set_blocking(self._answer_w, False)  # a script that never reads cannot block the grader

    @property
    def fds(self) -> tuple[int, int]:
        """The script's ends: it writes requests on the first, reads answers on the second."""
        return self._request_w, self._answer_r

    @property
    def env(self) -> dict[str, str]:
        return {ENV: f"{self._request_w},{self._answer_r}"}

    def start(self, ctx: Context, name: str, *args: str, **kw):
        """scripts.start(ctx, name, *args, **kw) with the channel handed over, then served."""
        from .scripts import start

        run = start(ctx, name, *args, env={**(kw.pop("env", None) or {}), **self.env}, pass_fds=self.fds, **kw)
        self.serve()
        return run

    def serve(self) -> None:
        """Close the grader's copies of the script's ends (the script's exit is then an end of
        file here) and serve on a thread."""
        for fd in self.fds:
            os.close(fd)
        self._thread = threading.Thread(target=self._serve, name="broker-control", daemon=True)
        self._thread.start()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self, timeout_s: float = 250) -> None:  # a request being done: a start's waits
        """Stop serving (after the request being done, if any), close the pipes, note who is down."""
        if self.down_at_end is not None:  # closed already: its descriptors' numbers may be another file's now
            return
        self._quit.set()
        if self._thread is None:  # never handed over: the script's ends are still ours to close
            for fd in self.fds:
                os.close(fd)
            self._close_ours()
        else:
            self._thread.join(timeout_s)
            if not self._thread.is_alive():  # else the thread closes them when its verb returns
                self._close_ours()
        self.down_at_end = frozenset(self._down())

    def _close_ours(self) -> None:
        """Close the grader's ends once (a descriptor closed twice may by then be another file's)."""
        with self._closing:
            if self._ours_open:
                self._ours_open = False
                os.close(self._request_r)
                os.close(self._answer_w)

    # --- the serving thread ---------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            self._read_lines()
        except Exception as e:  # the grader's own fault: recorded, never raised into the check's thread
            self._stop_listening(f"the grader's channel failed ({type(e).__name__}: {e})")
        finally:  # the script's next request or read then fails at once, not at its deadline
            self._close_ours()

    def _read_lines(self) -> None:
        buffer, skipping, total = bytearray(), False, 0
        readable = select.poll()  # not select.select: a grader's descriptors may be numbered past 1024
        readable.register(self._request_r, select.POLLIN)
        while not self._quit.is_set():
            if not readable.poll(POLL_S * 1000):
                continue
            chunk = os.read(self._request_r, READ_BYTES)
            if not chunk:  # the script (and every copy of its end) is gone
                if buffer and not skipping:
                    self._answer(buffer, "error: a request without a newline at the end")
                return
            total += len(chunk)
            if total > MAX_TOTAL_BYTES:
                self._answer(buffer[:MAX_LINE_BYTES], f"error: more than {MAX_TOTAL_BYTES} bytes sent")
                return self._stop_listening(f"the script sent more than {MAX_TOTAL_BYTES} bytes")
            buffer += chunk
            while True:
                end = buffer.find(b"\n")
                if end < 0:
                    if len(buffer) > MAX_LINE_BYTES:  # too long already: answered now, the rest skipped
                        if not skipping and not self._request(bytes(buffer[:MAX_LINE_BYTES]), too_long=True):
                            return
                        skipping = True
                        buffer.clear()
                    break
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                if skipping:  # the end of a line already answered as too long
                    skipping = False
                    continue
                if not self._request(line[: MAX_LINE_BYTES + 1], too_long=len(line) > MAX_LINE_BYTES):
                    return

    def _request(self, line: bytes, too_long: bool) -> bool:
        """Answer one line; False once the grader stops listening."""
        if len(self.records) >= MAX_REQUESTS:
            self._answer(line, f"error: more than {MAX_REQUESTS} requests; the grader answers no more")
            self._stop_listening(f"the script sent more than {MAX_REQUESTS} requests")
            return False
        if too_long:
            self._answer(line, f"error: a request is one line of at most {MAX_LINE_BYTES} characters")
        elif not PRINTABLE.fullmatch(line):
            self._answer(line, "error: a request is printable ASCII, e.g. `stop 2`")
        elif not (match := REQUEST.fullmatch(line.decode("ascii").strip())):
            self._answer(line, "error: a request is `stop N`, `kill N`, `start N` or `ids`")
        elif match[0] == "ids":
            self._answer(line, "ok " + " ".join(map(str, self.brokers)), verb="ids", down=frozenset(self._down()))
        elif int(match[2]) not in self.brokers:
            self._answer(line, f"error: there is no broker {int(match[2])}; the brokers are {list(self.brokers)}")
        else:
            self._do(line, match[1], int(match[2]))
        return not self._quit.is_set()

    def _do(self, line: bytes, verb: str, broker: int) -> None:
        """The cluster's state just before, then the verb itself (the grader's), then the answer."""
        down = frozenset(self._down())
        note = ""
        try:
            read = lambda: retried(
                self.ctx, under_replicated, "reading the partitions' in-sync replicas", client="-channel"
            )
            lagging = read()
            settle = time.monotonic() + UNDER_REPLICATED_GRACE_S
            while lagging and verb in ("stop", "kill") and time.monotonic() < settle:
                time.sleep(0.25)
                lagging = read()
        except Exception as e:  # noted; the request is still done (the state is the grader's problem)
            lagging, note = None, f"the state before could not be read ({e})"
        why = refusal(verb, broker, set(down))
        begun = time.monotonic()
        if why:
            answer = f"refused: {why}"
        else:
            try:
                cluster = cluster_of(self.ctx)
                if verb in ("stop", "kill") and self.before_stop is not None:
                    self.before_stop(broker)
                if verb == "stop" and not cluster.stop_broker(broker):
                    note = f"broker {broker} did not stop within its timeout: the grader killed it"
                elif verb == "kill":
                    cluster.kill_broker(broker)
                elif verb == "start":
                    cluster.start_broker(broker)
                if verb in ("stop", "kill") and self.while_down is not None:
                    self.while_down(broker)
                if verb == "start" and self.when_back is not None:
                    self.when_back(broker)
                answer = "ok"
            except Exception as e:
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                answer, note = f"error: the grader could not {verb} broker {broker} ({first[:200]})", str(e)[:2000]
        self._answer(
            line,
            answer,
            verb=verb,
            broker=broker,
            down=down,
            under_replicated=None if lagging is None else len(lagging),
            lagging=tuple((lagging or [])[:SHOWN_PARTITIONS]),
            took_s=time.monotonic() - begun,
            note=note,
        )

    def _answer(self, line: bytes | bytearray, answer: str, **fields) -> None:
        at = time.monotonic() - self._started
        text = ascii(bytes(line[:MAX_LINE_BYTES]).decode("latin-1"))[1:-1]
        self.records.append(Request(round(at, 2), text, answer, **fields))
        try:
            os.write(self._answer_w, answer.encode("ascii", errors="replace")[:400] + b"\n")
        except BlockingIOError:  # a script that writes and never reads: the pipe's 64 kB are full
            self._stop_listening("the script did not read the grader's answers")
        except OSError as e:
            if e.errno != errno.EPIPE:
                raise
            # the script closed its end: the next read says so (an end of file)

    def _stop_listening(self, why: str) -> None:
        self.stopped_listening = self.stopped_listening or why
        self._quit.set()

    def _down(self) -> set[int]:
        cluster = cluster_of(self.ctx)
        return {b for b in self.brokers if cluster.nodes[b].process() is None}


def rolling_restart_fault(records: list[Request], brokers: tuple[int, ...], down_at_end=None) -> str | None:
    """The first thing in a record that a rolling restart must not do, as a sentence with what
    was expected and what was found; None for a clean one: each broker stopped (never killed) and
    started once, never while another is down or a partition is under-replicated, none down at the end."""
    stops: dict[int, list[float]] = {b: [] for b in brokers}
    starts: dict[int, list[float]] = {b: [] for b in brokers}
    last_start: Request | None = None
    for r in records:
        if r.verb is None:
            return (
                f"request `{r.text}` at {r.at_s:.1f} s was answered `{r.answer}`: expected only "
                f"brokers.stop(n) and brokers.start(n) (and brokers.ids()) for brokers {list(brokers)}"
            )
        if r.answer.startswith("error") and r.verb in ("stop", "start"):  # the grader's failure, said as such
            return f"the grader could not do `{r.text}` at {r.at_s:.1f} s (`{r.answer}`)"
        if r.verb == "kill":
            return (
                f"broker {r.broker} was killed (SIGKILL) at {r.at_s:.1f} s: expected a clean stop "
                f"(brokers.stop), which hands its leaderships over first; found brokers.kill"
            )
        if r.verb == "stop":
            others = sorted(r.down - {r.broker})
            if others:
                return (
                    f"broker {r.broker} was to be stopped at {r.at_s:.1f} s while broker {others[0]} was down: "
                    f"expected one broker down at a time (start it, wait until nothing is under-replicated, then the next)"
                )
            if r.under_replicated:
                since = f" since broker {last_start.broker} started at {last_start.at_s:.1f} s" if last_start else ""
                return (
                    f"broker {r.broker} was stopped at {r.at_s:.1f} s while {r.under_replicated} partition(s) were "
                    f"under-replicated (e.g. {', '.join(r.lagging)}): expected 0, every in-sync replica set whole "
                    f"again{since} before the next stop"
                )
            stops[r.broker].append(r.at_s)  # type: ignore[index]
        if r.verb == "start" and r.broker is not None:
            starts[r.broker].append(r.at_s)
            last_start = r
    for b in brokers:
        if (len(stops[b]), len(starts[b])) != (1, 1):
            return (
                f"broker {b} was stopped {len(stops[b])} time(s) and started {len(starts[b])} time(s): "
                f"expected each of brokers {list(brokers)} stopped once, then started once"
            )
        if starts[b][0] < stops[b][0]:
            return f"broker {b} was started at {starts[b][0]:.1f} s before it was stopped at {stops[b][0]:.1f} s: expected stop, then start"
    if down_at_end:
        return f"broker {min(down_at_end)} was down when the script ended: expected every broker running again"
    return None
