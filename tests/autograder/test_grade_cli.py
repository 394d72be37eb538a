"""`python -m autograder grade`: always a results.json; non-zero only when it could not grade;
a submission never harms the machine, the cluster or other gradings."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from kafka import KafkaProducer
from kafka.admin import NewTopic

from staff.corpus import Edit, Scenario, scenarios
from autograder.pipeline import SOLUTIONS


def grade(lab: str, notebook: Path, out: Path, env: dict | None = None, *extra: str):
    cmd = [
        sys.executable,
        "-m",
        "autograder",
        "grade",
        lab,
        str(notebook),
        "--json",
        str(out),
        "--cell-timeout",
        "20",
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    data = json.loads(out.read_text()) if out.exists() else None
    return proc, data


def scenario_notebook(name: str, tmp_path: Path) -> tuple[str, Path]:
    s = next(s for s in scenarios() if s.name == name)
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(s.notebook(), path)
    return s.lab, path


def scores(data: dict) -> dict[str, float]:
    return {t["name"]: t["score"] for t in data["tests"] if t["visibility"] == "visible"}


def test_results_json_is_gradescope_shaped(cluster, tmp_path):
    lab, nb = scenario_notebook("counter-overwrites", tmp_path)
    proc, data = grade(lab, nb, tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    visible = [t for t in data["tests"] if t["visibility"] == "visible"]
    assert [t["name"] for t in visible] == ["lab1-q1", "lab1-q2", "lab1-q3", "lab1-q4", "lab1-q5", "lab1-q6"]
    assert data["max_score"] == sum(t["max_score"] for t in visible)
    assert data["score"] == data["max_score"] - visible[0]["max_score"]  # all but lab1-q1
    q1 = visible[0]
    assert q1["score"] == 0 and "expected" in q1["output"] and "found" in q1["output"] and "hint" in q1["output"]
    # the printed table: one line per check
    assert any(line.split()[:2] == ["lab1-q1", "FAIL"] for line in proc.stdout.splitlines())


@pytest.mark.parametrize("state", ["never set up", "stopped"])
def test_cluster_down_is_an_infrastructure_error_not_a_zero(tmp_path, state):
    from cluster.accounts import Secrets

    home = tmp_path / "cluster"
    if state == "stopped":  # its passwords exist, nothing listens on its ports
        Secrets(home).ensure()
    env = dict(os.environ, COURSE_CLUSTER_HOME=str(home), COURSE_PORT_BASE="41", KAFKA_BOOTSTRAP_SERVERS="")
    proc, data = grade("lab1", SOLUTIONS / "lab1" / "lab1.ipynb", tmp_path / "r.json", env)
    assert proc.returncode == 2
    said = {"never set up": "No local cluster has been set up", "stopped": "does not answer"}[state]
    assert "infrastructure error" in proc.stderr and said in proc.stderr, proc.stderr
    assert (
        data is not None
        and "Infrastructure error" in data["output"]
        and "not a problem with your work" in data["output"]
    )


def test_missing_notebook_and_unknown_lab_cannot_be_graded(cluster, tmp_path):
    proc, data = grade("lab1", tmp_path / "nothing.ipynb", tmp_path / "a.json")
    assert proc.returncode == 2 and "does not exist" in proc.stderr and data is not None
    proc, _ = grade("lab99", SOLUTIONS / "lab1" / "lab1.ipynb", tmp_path / "b.json")
    assert proc.returncode == 2 and "unknown lab 'lab99'" in proc.stderr


def test_the_staff_selftest_names_an_unknown_lab_and_the_course_labs():
    proc = subprocess.run(
        [sys.executable, "-m", "staff", "selftest", "lab1", "nolab"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "no lab nolab; the course's labs are lab1 lab2" in proc.stderr, proc.stderr


def test_a_corrupt_notebook_is_graded_zero_with_the_reason(cluster, tmp_path):
    bad = tmp_path / "lab1.ipynb"
    bad.write_text('{"cells": [ this is not json')
    proc, data = grade("lab1", bad, tmp_path / "r.json")
    assert proc.returncode == 0
    assert data["score"] == 0 and "not a readable Jupyter notebook" in data["output"]


def test_edited_test_cells_are_restored(cluster, tmp_path):
    """A student who replaces a test cell with `pass` gains nothing: the course's cell is put back."""
    nb = nbformat.read(SOLUTIONS / "lab1" / "lab1.ipynb", as_version=4)
    nb = Scenario(
        "x", "lab1", "", (Edit("lab1-increase", "sub", "counts[key] = amt", "counts[key] = counts.get(key, 0) + amt"),)
    ).build(nb)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "lab1-q1":
            cell.source = "pass"
    path = tmp_path / "lab1.ipynb"
    nbformat.write(nb, path)
    _, data = grade("lab1", path, tmp_path / "r.json")
    q1 = next(t for t in data["tests"] if t["name"] == "lab1-q1")
    assert q1["score"] == 0 and data["score"] == data["max_score"] - q1["max_score"]


def test_deleting_every_topic_spares_other_users(cluster, admin, tmp_path):
    bystander = f"someone-else.{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(bystander, 1, 3)])
    admin.wait_for_topics([bystander])
    producer = KafkaProducer(**cluster.admin_connection())
    producer.send(bystander, b"precious").get(timeout=30)
    producer.close()
    lab, nb = scenario_notebook("deletes-every-topic", tmp_path)
    _, data = grade(lab, nb, tmp_path / "r.json")
    assert data["score"] == data["max_score"]
    assert "TopicAuthorizationFailed" in data["output"]  # the brokers refused, not a hook in the kernel
    assert bystander in admin.list_topics()
    admin.delete_topics([bystander])


def test_the_attacks_are_real_without_the_sandbox(cluster, tmp_path):
    """The corpus's attacks are not straw men: without the sandbox, the blank release that runs
    the instructor's solutions gets full marks; with it, nothing."""
    lab, nb = scenario_notebook("runs-instructor-solutions", tmp_path)
    _, open_door = grade(lab, nb, tmp_path / "a.json", None, "--no-sandbox")
    assert open_door["score"] == open_door["max_score"] and "WITHOUT a sandbox" in open_door["output"]
    _, sandboxed = grade(lab, nb, tmp_path / "b.json")
    assert sandboxed["score"] == 0


def test_the_seed_is_secret_and_replays_a_grading(cluster, tmp_path):
    """lag() precomputed from the seed in the course's code: right with that seed (so the
    replay attack works), wrong with the course's secret seed. --seed replays a grading."""
    lab, nb = scenario_notebook("replays-known-seed", tmp_path)
    _, replayed = grade(lab, nb, tmp_path / "a.json", None, "--seed", "6544")
    assert scores(replayed)["lab4-q4"] == 1.5
    _, secret = grade(lab, nb, tmp_path / "b.json")
    assert scores(secret)["lab4-q4"] == 0
    staff = [t["output"] for t in secret["tests"] if t["visibility"] == "hidden"]
    assert any("seed" in o for o in staff) and "seed" not in secret["output"]


def staff_details(data: dict) -> str:
    return next(t["output"] for t in data["tests"] if t["name"] == "grading (staff details)")


def seed_of(data: dict) -> int:
    found = re.search(r"seed (\d+);", staff_details(data))
    assert found, staff_details(data)
    return int(found.group(1))


def output_of(data: dict, label: str) -> str:
    return next(t["output"] for t in data["tests"] if t["name"] == label)


def test_each_grading_has_a_seed_of_its_own_and_seed_replays_one(cluster, tmp_path):
    """The same notebook of the same student, graded twice: two seeds (each in the staff details,
    with its nonce), two sets of the grader's inputs (lab1-q1's message names its seeded key);
    `--seed` replays the first exactly."""
    lab, nb = scenario_notebook("counter-overwrites", tmp_path)
    _, first = grade(lab, nb, tmp_path / "a.json", None, "--student", "ada")
    _, second = grade(lab, nb, tmp_path / "b.json", None, "--student", "ada")
    assert seed_of(first) != seed_of(second), (staff_details(first), staff_details(second))
    assert re.search(r"nonce \w+;", staff_details(first)) and re.search(r"nonce \w+;", staff_details(second))
    assert scores(first) == scores(second)  # other data, the same mistake found
    assert output_of(first, "lab1-q1") != output_of(second, "lab1-q1")
    _, replayed = grade(lab, nb, tmp_path / "c.json", None, "--student", "ada", "--seed", str(seed_of(first)))
    assert seed_of(replayed) == seed_of(first) and "a replay" in staff_details(replayed)
    assert scores(replayed) == scores(first)
    assert output_of(replayed, "lab1-q1") == output_of(first, "lab1-q1")


# What a student types in after reading a failed result: average_delay_by_origin reads and commits
# as asked (lab2-q4 checks the group's offsets), and returns, on the grader's topic, the values typed.
TYPED_IN = """
_computed = average_delay_by_origin
TYPED = {typed!r}   # copied from the last result


def average_delay_by_origin(topic, group):
    means = _computed(topic, group)
    return TYPED if group.startswith("delays-check") else means
"""


def typed_in(values: dict, tmp_path: Path) -> Path:
    nb = Scenario("types-in-a-result", "lab2", "", (Edit("lab2-consume", "after", TYPED_IN.format(typed=values)),))
    path = tmp_path / f"lab2-{uuid.uuid4().hex[:6]}.ipynb"
    nbformat.write(nb.build(nbformat.read(SOLUTIONS / "lab2" / "lab2.ipynb", as_version=4)), path)
    return path


def graders_means(seed: int) -> dict[str, float]:
    """The means of lab2-q4's own flights in the grading with this seed, worked out as the check
    does (its topic's name first, then its flights)."""
    from selfcheck.checks import lab2

    rng = random.Random(f"{seed}:lab2-q4")
    rng.randrange(10**6)  # graders_topic's name
    return lab2.shown(lab2.mean_delays(lab2.graders_flights(SimpleNamespace(rng=rng), 150)))


def test_a_failed_result_gives_the_next_submission_nothing_to_type_in(cluster, tmp_path):
    """Issue 41: lab2-q4's message showed the means of the grader's own flights, and the next
    submission typed them in for full marks. Now the message shows none of them, and even the
    right values of one grading (worked out from its seed) fail the next: each grading has its own
    data. Replayed with the first grading's seed, the same values pass: they were its answer."""
    wrong = {"EWR": -999.0, "JFK": -999.0, "LGA": -999.0}
    _, first = grade("lab2", typed_in(wrong, tmp_path), tmp_path / "a.json", None, "--student", "mallory")
    assert scores(first)["lab2-q4"] == 0, output_of(first, "lab2-q4")
    truth = graders_means(seed_of(first))
    shown = {float(x) for x in re.findall(r"-?\d+\.\d+", first["output"] + output_of(first, "lab2-q4"))}
    assert not shown & set(truth.values()), (truth, output_of(first, "lab2-q4"))
    resubmitted = typed_in(truth, tmp_path)
    _, second = grade("lab2", resubmitted, tmp_path / "b.json", None, "--student", "mallory")
    assert seed_of(second) != seed_of(first)
    assert scores(second)["lab2-q4"] == 0, output_of(second, "lab2-q4")
    _, replayed = grade("lab2", resubmitted, tmp_path / "c.json", None, "--seed", str(seed_of(first)))
    assert scores(replayed)["lab2-q4"] > 0, output_of(replayed, "lab2-q4")


def test_no_sandbox_is_refused_where_bubblewrap_is_missing(cluster, tmp_path):
    env = dict(os.environ, PATH="/nonexistent")  # bwrap cannot be found
    env["PATH"] = str(Path(sys.executable).parent)
    proc, data = grade("lab1", SOLUTIONS / "lab1" / "lab1.ipynb", tmp_path / "r.json", env)
    assert proc.returncode == 2 and "bubblewrap" in proc.stderr and "--no-sandbox" in proc.stderr
    assert data is not None and "not a problem with your work" in data["output"]


def test_a_grading_stopped_with_sigterm_leaves_nothing_running(cluster, tmp_path):
    """A grading killed politely (a cancelled CI job, a deadline) still cleans up: lab 7's own
    three brokers, its sandboxed kernel and its Kafka user do not outlive it."""
    import signal
    import time

    import psutil

    from staff.selftest import kafka_access_left

    out, mark = tmp_path / "r.json", uuid.uuid4().hex
    # Other gradings may run beside this one (the self-test): this one's brokers inherit the
    # grader's environment, marked; its kernel is a descendant of the grader.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autograder",
            "grade",
            "lab7",
            str(SOLUTIONS / "lab7" / "lab7.ipynb"),
            "--json",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, COURSE_TEST_MARK=mark),
    )

    def own_brokers():
        found = []
        for p in psutil.process_iter(["name", "environ"]):
            if p.info["name"] == "java" and (p.info.get("environ") or {}).get("COURSE_TEST_MARK") == mark:
                found.append(p)
        return found

    def kernels():  # the sandboxed kernel and what it started, by the grading's namespace
        try:
            below = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [p for p in below if _environ(p).get("LAB_NAMESPACE", "").startswith("grade-lab7-")]

    deadline = time.monotonic() + 120
    while not kernels() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)  # into the notebook
    brokers, running = own_brokers(), kernels()
    assert len(brokers) == 3 and running, f"the grading did not get as far as its notebook: {proc.poll()}"
    namespace = _environ(running[0])["LAB_NAMESPACE"]
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    gone, alive = psutil.wait_procs(brokers + running, timeout=10)
    assert alive == [], f"still running after the grading ended: {alive}\n{output[-2000:]}"
    assert kafka_access_left(namespace) == []
    # and a result that says so, scoring nothing (exit 2: grade it again)
    assert proc.returncode == 2, output[-2000:]
    assert "interrupted" in json.loads(out.read_text())["output"]


def _environ(p) -> dict:
    import psutil

    try:
        return p.environ()
    except psutil.Error:
        return {}


# Gradings share the machine's network: a port number alone proves nothing. A notebook that
# names as its server_port a correct Counter server it did not start (another grading's, or one
# outside the sandbox) gets no points for it: lab 1's checks call only a port that a process of
# the grading's own kernel listens on.
def honest_server():
    """A correct Counter service in this (the test's) process, outside any sandbox."""
    from concurrent import futures

    import grpc

    from selfcheck.checks.lab1 import messages

    M, counts, calls = messages(), {}, []

    def increase(request, context):
        calls.append("Increase")
        counts[request.key] = counts.get(request.key, 0) + request.amount
        return M["IncreaseReply"](total=counts[request.key])

    def get(request, context):
        calls.append("Get")
        return M["GetReply"](total=counts.get(request.key, 0))

    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=M[req].FromString, response_serializer=lambda m: m.SerializeToString()
        )
        for name, fn, req in (("Increase", increase, "IncreaseRequest"), ("Get", get, "GetRequest"))
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("counter.Counter", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port, calls


def test_a_server_the_notebook_did_not_start_earns_nothing(cluster, tmp_path):
    server, port, calls = honest_server()
    try:
        nb = nbformat.read(SOLUTIONS / "lab1" / "lab1.ipynb", as_version=4)
        nb = Scenario(
            "borrows-a-server",
            "lab1",
            "",
            (Edit("server_port = server.add_insecure_port", "after", f"server_port = {port}   # not ours"),),
        ).build(nb)
        path = tmp_path / "lab1.ipynb"
        nbformat.write(nb, path)
        _, data = grade("lab1", path, tmp_path / "r.json")
    finally:
        server.stop(0)
    q3 = next(t for t in data["tests"] if t["name"] == "lab1-q3")
    assert q3["score"] == 0 and f"nothing your notebook started listens on port {port}" in q3["output"], q3
    # The notebook's own cells did use that server (its client cells call server_port), so
    # without the ownership check the grader's calls would have been answered correctly.
    assert calls, "the notebook never called the borrowed server: the test proves nothing"
