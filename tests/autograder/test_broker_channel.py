"""Lab 14's broker control channel (cluster/broker_control.py, selfcheck/checks/broker_control.py):
a script the grader runs, sandboxed, asks on an inherited pipe for brokers to be stopped, killed
and started; the grader does it on a grading's own cluster (real brokers, started here as the
pipeline starts one) and records each request with the cluster's state just before. What a script
sends is bounded; the record is judged. The judge's own tests need no cluster."""

from __future__ import annotations

import json
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from autograder.sandbox import Limits, Sandbox, available
from cluster import own
from selfcheck.checks import Context, run_cleanups
from selfcheck.checks.broker_control import (
    MAX_LINE_BYTES,
    MAX_REQUESTS,
    MAX_TOTAL_BYTES,
    READ_BYTES,
    Channel,
    Request,
    rolling_restart_fault,
)
from selfcheck.checks.own_cluster import all_up
from selfcheck.checks.scripts import wait

MODES = ["self-check", pytest.param("sandbox", marks=pytest.mark.skipif(available() is not None, reason="no sandbox"))]
BROKERS = (1, 2, 3)

# A correct rolling restart: each broker stopped, started, then every partition it can see in
# sync again (with its own admin client, the grading's login) before the next.
RESTART = """
import sys, time
from cluster.broker_control import brokers
from cluster.own import own_cluster

def lagging():
    admin = own_cluster().admin(request_timeout_ms=5000)  # a new one each time: its brokers restart
    try:
        return [p for t in admin.describe_topics() for p in t["partitions"] if set(p["replica_nodes"]) != set(p["isr_nodes"])]
    finally:
        admin.close()

for b in brokers.ids():
    brokers.stop(b)
    brokers.start(b)
    deadline = time.monotonic() + 120
    while True:
        try:
            if not lagging():
                break
        except Exception:
            pass
        if time.monotonic() > deadline:
            sys.exit(f"broker {b}: still under-replicated after 120 s")
        time.sleep(0.5)
    print("restarted", b)
"""

KILLS = """
from cluster.broker_control import brokers
brokers.kill(2)
brokers.start(2)
print("killed and started 2")
"""

# Junk, one request at a time, then 500 requests in one write, then the module's own call.
FLOOD = """
import os
from cluster.broker_control import BrokerControlError, brokers
request, answer = (int(fd) for fd in os.environ["COURSE_BROKER_CONTROL"].split(","))

def answered():
    line = b""
    while not line.endswith(b"\\n"):
        byte = os.read(answer, 1)
        if not byte:
            return None
        line += byte
    return line.decode().strip()

for junk in (b"\\xff\\xfe stop 1\\n", b"stop\\x001\\n", b"reboot 1\\n", b"x" * 10_000 + b"\\n", b"stop 1 2\\n"):
    os.write(request, junk)
    print("junk:", answered())
os.write(request, b"ids\\n")
print("ids:", answered())
os.write(request, b"nonsense\\n" * 500)
answers = []
while (line := answered()) is not None:
    answers.append(line)
print("answers to the 500:", len(answers))
print("last:", answers[-1])
try:
    brokers.stop(1)
except BrokerControlError as e:
    print("then:", e)
"""

# No newline ever: a megabyte in one line.
ENDLESS = """
import os
request = int(os.environ["COURSE_BROKER_CONTROL"].split(",")[0])
sent = 0
try:
    while sent < 2**20:
        sent += os.write(request, b"x" * 4096)
    print("all sent")
except BrokenPipeError:
    print("closed after", sent)
"""

NO_BROKER_9 = """
import os
from cluster.broker_control import BrokerControlError, brokers
print("fds:", sorted(int(fd) for fd in os.listdir("/proc/self/fd")))
try:
    brokers.stop(9)
except BrokerControlError as e:
    print("refused:", type(e).__name__, e)
print("ids:", brokers.ids())
"""


@pytest.fixture(scope="module")
def grading(tmp_path_factory):
    """A grading's own cluster, started as autograder.pipeline starts one, with a topic of the
    grading's namespace (three replicas, a few records) whose replicas a restart takes apart."""
    from kafka import KafkaProducer
    from kafka.admin import NewTopic

    ns = f"bc-{uuid.uuid4().hex[:6]}"
    started = own.start(tmp_path_factory.mktemp("own") / "own", ns, echo=lambda _: None)
    started.throwaway = True
    try:
        topic = f"{ns}.restart"
        with started._broken_by_us().admin() as admin:
            admin.create_topics([NewTopic(topic, 3, 3)])
        producer = KafkaProducer(**started.connection, acks="all")
        for i in range(30):
            producer.send(topic, str(i).encode())
        producer.flush(30)
        producer.close()
        yield started
    finally:
        started.down()


def context(tmp_path: Path, mode: str, grading) -> Context:
    work, logs, private = tmp_path / "work", tmp_path / "logs", tmp_path / "private"
    for folder in (work, logs, private):
        folder.mkdir()
    private.chmod(0o711)
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"} if mode == "sandbox" else None
    return Context(
        "lab14",
        "lab14-q3",
        None,  # type: ignore[arg-type]
        grading.account.username,
        {},
        workdir=work,
        sandbox=Sandbox(work) if mode == "sandbox" else None,
        env=env,
        logdir=logs,
        private_dir=private,
        staff=[],
        own=grading,
    )


def graded(tmp_path: Path, mode: str, grading, script: str, timeout: float = 60):
    """Run `script` as the grader runs rolling_restart.py, over a channel; (channel, output, exit
    status, seconds). Every broker is running again afterwards."""
    ctx = context(tmp_path, mode, grading)
    (ctx.workdir / "rolling_restart.py").write_text(textwrap.dedent(script))
    where = json.dumps(
        {
            "bootstrap_servers": grading.bootstrap_servers,
            "username": grading.account.username,
            "password": grading.account.password,
        }
    )
    began = time.monotonic()
    try:
        with Channel(ctx) as channel:
            run = channel.start(ctx, "rolling_restart.py", env={own.ENV: where})
            code = wait(run, timeout)
        return channel, run.output(), code, time.monotonic() - began
    finally:
        all_up(ctx)
        run_cleanups(ctx.cleanup)


@pytest.mark.cluster
@pytest.mark.parametrize("mode", MODES)
def test_a_correct_rolling_restart_is_judged_clean(tmp_path, grading, mode):
    channel, out, code, took = graded(tmp_path, mode, grading, RESTART, timeout=400)
    assert code == 0, out
    print(f"{mode}: the rolling restart took {took:.1f} s")
    steps = [(r.verb, r.broker) for r in channel.records]
    assert steps == [("ids", None), *((v, b) for b in BROKERS for v in ("stop", "start"))], channel.records
    stops = [r for r in channel.records if r.verb == "stop"]
    assert [r.under_replicated for r in stops] == [0, 0, 0], "the script waited: nothing under-replicated"
    assert [r.down for r in stops] == [frozenset()] * 3
    starts = [r for r in channel.records if r.verb == "start"]
    assert [r.down for r in starts] == [frozenset({b}) for b in BROKERS], "the grader saw each one down"
    assert all(r.under_replicated for r in starts), "a stopped broker's replicas are out of sync"
    assert channel.down_at_end == frozenset()
    assert rolling_restart_fault(channel.records, BROKERS, channel.down_at_end) is None


@pytest.mark.cluster
def test_a_kill_is_judged(tmp_path, grading):
    channel, out, code, _ = graded(tmp_path, "self-check", grading, KILLS)
    assert code == 0 and "killed and started 2" in out, out
    assert [(r.verb, r.broker, r.answer) for r in channel.records] == [("kill", 2, "ok"), ("start", 2, "ok")]
    assert channel.records[1].down == {2}, "the grader saw broker 2 dead before starting it"
    fault = rolling_restart_fault(channel.records, BROKERS, channel.down_at_end)
    assert fault is not None and fault.startswith("broker 2 was killed (SIGKILL)"), fault


@pytest.mark.cluster
@pytest.mark.parametrize("mode", MODES)
def test_junk_and_floods_are_bounded_recorded_and_answered(tmp_path, grading, mode):
    channel, out, code, took = graded(tmp_path, mode, grading, FLOOD)
    assert code == 0, out
    junk = out.split("junk: ")[1:]
    assert len(junk) == 5 and all(line.startswith("error: ") for line in junk), out
    assert "ids: ok 1 2 3" in out
    # 6 answered one at a time, then 500 in one write: answers up to MAX_REQUESTS, then one refusal
    assert f"answers to the 500: {MAX_REQUESTS + 1 - 6}" in out, out
    assert f"last: error: more than {MAX_REQUESTS} requests" in out
    assert "then: brokers.stop: the grader closed the control channel" in out
    assert len(channel.records) == MAX_REQUESTS + 1 and channel.stopped_listening
    texts = [r.text for r in channel.records[:5]]
    assert texts[0] == "\\xff\\xfe stop 1" and texts[1] == "stop\\x001" and texts[3] == "x" * MAX_LINE_BYTES, texts
    assert all(r.verb is None for r in channel.records if r.text != "ids"), "nothing junk was done"
    assert channel.down_at_end == frozenset(), "the cluster was not touched"
    fault = rolling_restart_fault(channel.records, BROKERS)
    assert fault is not None and fault.startswith("request `\\xff\\xfe stop 1`"), fault
    print(f"{mode}: the flood took {took:.1f} s")


@pytest.mark.cluster
@pytest.mark.parametrize("mode", MODES)
def test_a_line_without_end_is_cut_off(tmp_path, grading, mode):
    channel, out, code, _ = graded(tmp_path, mode, grading, ENDLESS)
    assert code == 0 and "closed after" in out, out
    sent = int(out.split("closed after ")[1].split()[0])
    # the grader read at most its bound and one read more; the pipe's buffer (64 KiB) took the rest
    assert sent <= MAX_TOTAL_BYTES + READ_BYTES + 2**16, "the grader stopped reading at its bound"
    assert channel.stopped_listening.startswith(f"the script sent more than {MAX_TOTAL_BYTES} bytes")
    assert len(channel.records) == 2 and channel.records[0].text == "x" * MAX_LINE_BYTES


@pytest.mark.cluster
@pytest.mark.parametrize("mode", MODES)
def test_broker_9_is_an_error_and_only_the_channel_is_inherited(tmp_path, grading, mode):
    channel, out, code, _ = graded(tmp_path, mode, grading, NO_BROKER_9)
    assert code == 0, out
    assert "refused: BrokerControlError `stop 9` failed: there is no broker 9; the brokers are [1, 2, 3]" in out, out
    assert "ids: [1, 2, 3]" in out
    assert [r.answer for r in channel.records] == [
        "error: there is no broker 9; the brokers are [1, 2, 3]",
        "ok 1 2 3",
    ]
    fds = json.loads(out.split("fds: ")[1].splitlines()[0])
    # stdin, stdout, stderr, the two ends of the channel, the listing's own: nothing else of the grader's
    assert len(fds) == 6 and fds[:3] == [0, 1, 2], fds


@pytest.mark.cluster
def test_on_ones_own_machine_the_same_calls_act_on_ones_own_cluster(tmp_path, grading):
    """Without the grader's channel, brokers.* act on the cluster running in COURSE_OWN_CLUSTER_HOME,
    with the grader's refusal (two down)."""
    import subprocess

    script = textwrap.dedent("""
        from cluster.broker_control import BrokerControlError, BrokerRefused, brokers
        print("ids:", brokers.ids())
        for call in (lambda: brokers.stop(9), lambda: brokers.stop("2")):
            try:
                call()
            except BrokerControlError as e:
                print("error:", e)
        brokers.stop(3)
        try:
            brokers.kill(2)
        except BrokerRefused as e:
            print("refused:", e)
        brokers.start(3)
        print("done")
    """)
    home = grading._broken_by_us().cfg.home
    env = {k: v for k, v in __import__("os").environ.items() if k != own.ENV}
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            env={**env, "COURSE_OWN_CLUSTER_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=200,
        )
    finally:
        for b in BROKERS:
            grading.start_broker(b)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "done" in out, out
    assert "ids: [1, 2, 3]" in out
    assert "error: `stop 9` failed: there is no broker 9" in out
    assert "error: brokers.stop('2'): a broker is named by its id" in out
    assert "refused: `kill 2` refused: broker 3 is down" in out


# --- the pipes through every wrapping of a sandbox (no cluster) -----------------------------------

# Writes a line on the request end, reads one on the answer end, and lists what it holds.
ECHO = (
    "import os, sys; r, a = map(int, sys.argv[1:]); os.write(r, b'stop 1\\n'); "
    "print(os.read(a, 10).decode().strip(), sorted(int(f) for f in os.listdir('/proc/self/fd')))"
)


@pytest.mark.skipif(available() is not None, reason="no sandbox")
@pytest.mark.parametrize("how", ["bwrap", "bwrap in cgroups", "user"])
def test_the_pipes_reach_the_program_through_each_wrapping_and_nothing_else_does(tmp_path, how):
    """Sandbox.popen(pass_fds=...): through bwrap, the limits wrapper, the cgroups' joiner (or
    systemd's scope) and the user method's root supervisor with setpriv, the two descriptors reach
    the program at their numbers; a descriptor of the grader's that was not passed does not."""
    import os
    import shutil
    import subprocess
    import tempfile

    from autograder.sandbox import Cgroups, give, new_uid, runs_as_another_user, sweep

    if how == "user" and (os.geteuid() != 0 or not shutil.which("setpriv")):
        pytest.skip("the user method needs root and setpriv")
    request_r, request_w = os.pipe()
    answer_r, answer_w = os.pipe()
    secret = os.open(__file__, os.O_RDONLY)
    os.set_inheritable(secret, True)  # inheritable, and still not passed: close_fds must keep it out
    folder, cgroups, uid = tmp_path, None, None
    python = sys.executable
    if how == "user":
        folder, uid = Path(tempfile.mkdtemp(prefix="channel-test-")), new_uid()
        give(folder, uid)
        python = sys.executable if runs_as_another_user(sys.executable) else "/usr/bin/python3"
    if how == "bwrap in cgroups":
        cgroups = Cgroups(f"test-{os.getpid()}-{time.monotonic_ns()}", Limits())
    try:
        os.write(answer_w, b"ok\n")
        proc = Sandbox(folder, cgroups=cgroups, uid=uid, python=python).popen(
            [python, "-c", ECHO, str(request_w), str(answer_r)],
            {"PATH": "/usr/bin:/bin"},
            pass_fds=(request_w, answer_r),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        out = proc.communicate(timeout=60)[0]
        assert proc.returncode == 0, out
        assert os.read(request_r, 100) == b"stop 1\n"
        answer, fds = out.split(" ", 1)
        assert answer == "ok", out
        # stdin, stdout, stderr, the two passed, the listing's own: not the grader's `secret`
        held = json.loads(fds)
        assert len(held) == 6 and {0, 1, 2, request_w, answer_r} <= set(held) and secret not in held, out
    finally:
        for fd in (request_r, request_w, answer_r, answer_w, secret):
            os.close(fd)
        if cgroups is not None:
            cgroups.remove()
        if uid is not None:
            sweep(uid)
            shutil.rmtree(folder, ignore_errors=True)


# --- the judge, on records made by hand (no cluster) ---------------------------------------------


def clean() -> list[Request]:
    records, t = [], 0.0
    for b in BROKERS:
        records.append(Request(t, f"stop {b}", "ok", "stop", b, frozenset(), 0))
        records.append(Request(t + 5, f"start {b}", "ok", "start", b, frozenset({b}), 4))
        t += 20
    return records


def test_the_judge_passes_a_clean_record():
    assert rolling_restart_fault(clean(), BROKERS, frozenset()) is None


def test_the_judge_names_each_fault_with_expected_and_found():
    from dataclasses import replace

    base = clean()
    cases = {
        "a kill": (
            [replace(base[0], verb="kill", text="kill 1"), *base[1:]],
            "broker 1 was killed (SIGKILL) at 0.0 s: expected a clean stop",
        ),
        "two down": (
            [base[0], replace(base[2], at_s=3, down=frozenset({1}), answer="refused: ..."), *base[1:2], *base[3:]],
            "broker 2 was to be stopped at 3.0 s while broker 1 was down: expected one broker down at a time",
        ),
        "not in sync": (
            [*base[:2], replace(base[2], under_replicated=3, lagging=("t-0", "t-1", "t-2")), *base[3:]],
            "broker 2 was stopped at 20.0 s while 3 partition(s) were under-replicated (e.g. t-0, t-1, t-2): "
            "expected 0, every in-sync replica set whole again since broker 1 started at 5.0 s",
        ),
        "one never restarted": (base[:4], "broker 3 was stopped 0 time(s) and started 0 time(s): expected each"),
        "twice": (base + base[4:], "broker 3 was stopped 2 time(s) and started 2 time(s)"),
        "left down": (base[:5], "broker 3 was stopped 1 time(s) and started 0 time(s)"),
        "junk": ([Request(1, "reboot", "error: a request is ..."), *base], "request `reboot` at 1.0 s was answered"),
    }
    for name, (records, expected) in cases.items():
        fault = rolling_restart_fault(records, BROKERS, frozenset())
        assert fault is not None and fault.startswith(expected), f"{name}: {fault}"
    assert rolling_restart_fault(base, BROKERS, frozenset({2})) == (
        "broker 2 was down when the script ended: expected every broker running again"
    )
