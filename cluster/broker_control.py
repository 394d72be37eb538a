"""Stop, kill and start the brokers of your own cluster from a script (lab 14's rolling restart).

    from cluster.broker_control import brokers
    for b in brokers.ids():             # [1, 2, 3]
        brokers.stop(b)                 # clean shutdown; returns once the process has exited
        brokers.start(b)                # returns once the cluster lists the broker again
        ...                             # then wait: no partition under-replicated (your code)

On your machine these act on your own cluster (cluster/own.py). When the notebook is graded, the
brokers are the grader's, outside the sandbox your script runs in, so the script cannot signal
them: each call is then a request on a pipe the grader gave it (COURSE_BROKER_CONTROL="<request
fd>,<answer fd>"), one line such as `stop 2`, and the grader does it, records it with the
cluster's state at that moment, and answers `ok`, `refused: <why>` or `error: <why>`.
brokers.kill(b) (SIGKILL, a crash) exists so that a restart that crashes brokers can be seen as one.

Both ways refuse to stop or kill a broker while another is down: nodes 1-3 are also the three
KRaft controllers, and two of them down leave the cluster without a majority.
"""

from __future__ import annotations

import os
import select
import threading
import time

from .errors import ClusterError

ENV = "COURSE_BROKER_CONTROL"  # "<request fd>,<answer fd>", set by the grader
VERBS = ("stop", "kill", "start", "ids")
MAX_LINE_BYTES = 64  # of a request, newline excluded: the grader reads no more
MAX_ANSWER_BYTES = 512  # of an answer, read by the script
# A start waits up to 90 s for the broker to be listed and as long for logins to work on it
# (settings.BROKER_REJOIN_TIMEOUT_S each), after the grader has read the cluster's state (up to 30 s).
ANSWER_DEADLINE_S = 240


class BrokerControlError(ClusterError):
    """A request that failed: the grader (or your cluster) could not do it, or the channel broke."""


class BrokerRefused(BrokerControlError):
    """A request the grader (or this module, on your machine) would not do: a second broker down."""


def refusal(verb: str, broker: int, down: set[int]) -> str | None:
    """Why a request must not be done (None: it may), given the brokers down now. The grader's
    rule and your machine's are this one function."""
    others = sorted(down - {broker})
    if verb in ("stop", "kill") and others:
        names = ", ".join(map(str, others))
        return (
            f"broker {names} is down: a rolling restart takes one broker down at a time (two of the three "
            f"controllers down leave the cluster without a majority); start broker {names} and wait until "
            "no partition is under-replicated first"
        )
    return None


class Brokers:
    """The brokers of your own cluster: stop, kill, start, ids. Safe to share between threads
    (one request at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def stop(self, broker: int) -> None:
        """Clean shutdown (SIGTERM: the broker hands its leaderships over first); returns when
        its process has exited."""
        self._ask("stop", broker)

    def kill(self, broker: int) -> None:
        """SIGKILL: the broker dies at once, as in a crash (not what a rolling restart does)."""
        self._ask("kill", broker)

    def start(self, broker: int) -> None:
        """Start the broker with its data; returns when the cluster lists it again (its replicas
        may still be catching up: that wait is yours)."""
        self._ask("start", broker)

    def ids(self) -> list[int]:
        """The brokers' ids, e.g. [1, 2, 3]."""
        return [int(b) for b in self._ask("ids", None).split()]

    def _ask(self, verb: str, broker: int | None) -> str:
        if broker is not None and (isinstance(broker, bool) or not isinstance(broker, int)):
            raise BrokerControlError(
                f"brokers.{verb}({broker!r}): a broker is named by its id, an int",
                hint="Use one of brokers.ids(), e.g. brokers.stop(2).",
            )
        with self._lock:
            channel = os.environ.get(ENV)
            if channel:
                return _over_pipe(channel, verb, broker)
            return _on_own_cluster(verb, broker)


brokers = Brokers()


def _fds(channel: str) -> tuple[int, int]:
    try:
        request, answer = (int(part) for part in channel.split(","))
        return request, answer
    except ValueError:
        raise BrokerControlError(
            f"{ENV}={channel[:40]!r} is not two file descriptors",
            hint=f"{ENV} is set by the grader; on your own machine leave it unset.",
        ) from None


def _over_pipe(channel: str, verb: str, broker: int | None) -> str:
    """One request on the grader's pipe, one answer back (within ANSWER_DEADLINE_S)."""
    request_fd, answer_fd = _fds(channel)
    line = f"{verb}\n" if broker is None else f"{verb} {broker}\n"
    closed = BrokerControlError(
        f"brokers.{verb}: the grader closed the control channel",
        hint="It answers at most 100 requests of one line each; a rolling restart of three brokers needs six.",
    )
    try:
        os.write(request_fd, line.encode()[: MAX_LINE_BYTES + 1])  # well under PIPE_BUF: one write, whole
    except BrokenPipeError:
        raise closed from None
    except OSError as e:
        raise BrokerControlError(f"brokers.{verb}: the control channel cannot be written ({e.strerror})") from None
    answer = bytearray()
    deadline = time.monotonic() + ANSWER_DEADLINE_S
    readable = select.poll()  # the grader's descriptor numbers may be past select()'s 1024
    readable.register(answer_fd, select.POLLIN)
    while not answer.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not readable.poll(left * 1000):
            raise BrokerControlError(f"brokers.{verb}: no answer from the grader within {ANSWER_DEADLINE_S} s")
        chunk = os.read(answer_fd, 1)  # one byte at a time: nothing past this answer's line is taken
        if not chunk:
            raise closed
        answer += chunk
        if len(answer) > MAX_ANSWER_BYTES:
            raise BrokerControlError(f"brokers.{verb}: the grader's answer was too long")
    text = answer.decode("ascii", errors="replace").strip()
    what = line.strip()
    if text == "ok" or text.startswith("ok "):
        return text[3:]
    if text.startswith("refused: "):
        raise BrokerRefused(f"the grader refused `{what}`: {text[9:]}")
    if text.startswith("error: "):
        raise BrokerControlError(f"`{what}` failed: {text[7:]}")
    raise BrokerControlError(f"`{what}`: the grader answered {text[:80]!r}")


def _on_own_cluster(verb: str, broker: int | None) -> str:
    """The same on the cluster of your own that runs on this machine."""
    from . import own

    if own.attached() is not None:
        raise BrokerControlError(
            "This cluster is the grader's, and the grader gave this script no control channel.",
            hint="Brokers are stopped and started only by a script the grader runs (lab 14's rolling_restart.py).",
        )
    cluster = own.running()
    if cluster is None:
        raise BrokerControlError(
            f"No cluster of your own runs in {own.own_home()}.",
            hint="Run the notebook's first cell (it starts your own cluster), then the script again.",
        )
    if verb == "ids":
        return " ".join(map(str, sorted(cluster.nodes)))
    assert broker is not None  # _ask passes one with every verb but ids
    if broker not in cluster.nodes:
        raise BrokerControlError(
            f"`{verb} {broker}` failed: there is no broker {broker}; the brokers are {sorted(cluster.nodes)}"
        )
    down = {b for b, node in cluster.nodes.items() if node.process() is None}
    why = refusal(verb, broker, down)
    if why:
        raise BrokerRefused(f"`{verb} {broker}` refused: {why}")
    {"stop": cluster.stop_broker, "kill": cluster.kill_broker, "start": cluster.start_broker}[verb](broker)
    return ""
