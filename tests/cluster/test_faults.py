"""Broker failures, and the clear messages bad input gets."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from cluster import Cluster, ClusterError, connection, settings
from cluster.brokers import live_brokers

DEADLINE_S = 60  # bound on every wait below


def wait_for(predicate, what: str, timeout: float = DEADLINE_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def read_all(topic: str, partitions: int) -> list[bytes]:
    consumer = KafkaConsumer(**connection(), enable_auto_commit=False, consumer_timeout_ms=5000)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    end = consumer.end_offsets(tps)
    values = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while any(consumer.position(tp) < end[tp] for tp in tps):
            if time.monotonic() > deadline:
                left = {tp.partition: end[tp] - consumer.position(tp) for tp in tps}
                raise AssertionError(
                    f"read {len(values)} records of {topic} in {DEADLINE_S} s; records left per partition: {left}"
                )
            for records in consumer.poll(timeout_ms=1000).values():
                values.extend(r.value for r in records)
    finally:
        consumer.close()
    return values


def test_acks_all_loses_nothing_when_a_broker_is_killed_mid_stream(healthy, admin, topic):
    admin.create_topics([NewTopic(topic, 3, 3)])
    admin.wait_for_topics([topic])
    producer = KafkaProducer(
        **connection(),
        acks="all",
        retries=10**6,
        enable_idempotence=True,
        linger_ms=5,
        request_timeout_ms=10_000,
        delivery_timeout_ms=120_000,
    )
    acked: list[bytes] = []
    lock = threading.Lock()

    def on_ack(value):
        return lambda _meta: (lock.acquire(), acked.append(value), lock.release())

    killed = threading.Event()
    total = 3000
    for i in range(total):
        value = f"{i:06d}".encode()
        producer.send(topic, value=value).add_callback(on_ack(value))
        if i == total // 3:
            healthy.kill_broker(2)  # mid-stream, no clean shutdown
            killed.set()
        if i % 100 == 0:
            time.sleep(0.01)  # spread the stream over the failure
    producer.flush(timeout=120)
    producer.close()
    assert killed.is_set()
    assert len(acked) == total, f"expected all {total} sends acknowledged, found {len(acked)}"

    # status shows the dead broker, the cluster drops it from the live set
    assert [r.state for r in healthy.status()][1] == "dead"
    wait_for(lambda: live_brokers(admin) == {1, 3}, "broker 2 to leave the live set")

    got = read_all(topic, 3)
    missing = set(acked) - set(got)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"

    # start-broker brings it back with its data: it rejoins every ISR
    healthy.start_broker(2)
    assert healthy.status()[1].state == "alive"

    def isr_full():
        parts = admin.describe_topics([topic])[0]["partitions"]
        return all(sorted(p["isr_nodes"]) == [1, 2, 3] for p in parts)

    wait_for(isr_full, "broker 2 back in every ISR")


def test_stop_broker_is_clean_and_the_data_stays(healthy, admin, topic):
    admin.create_topics([NewTopic(topic, 1, 3)])
    admin.wait_for_topics([topic])
    producer = KafkaProducer(**connection(), acks="all")
    for i in range(20):
        producer.send(topic, value=b"%d" % i)
    producer.flush()
    with healthy.stopped(broker=1):
        assert healthy.status()[0].state == "stopped"
        wait_for(lambda: live_brokers(admin) == {2, 3}, "broker 1 to leave")
        producer.send(topic, value=b"while-down").get(timeout=30)  # two in-sync replicas remain
    producer.close()
    assert healthy.status()[0].state == "alive"
    assert len(read_all(topic, 1)) == 21
    seg = next((healthy.nodes[1].data_dir / f"{topic}-0").glob("*.log"))
    assert seg.stat().st_size > 0  # broker 1 kept its copy on disk


def test_kill_and_start_through_the_cli(healthy):
    run = lambda *a: subprocess.run([sys.executable, "-m", "cluster", *a], capture_output=True, text=True, timeout=180)
    assert run("kill-broker", "3").returncode == 0
    status = run("status")
    assert status.stdout.splitlines()[3].split()[1] == "dead"
    assert "start-broker" in status.stdout  # tells what to do
    started = run("start-broker", "3")
    assert started.returncode == 0, started.stderr
    assert run("status").stdout.splitlines()[3].split()[1] == "alive"


def test_a_login_refused_for_its_password_is_told_from_a_broker_still_starting(cluster):
    # A restarting broker's wait writes the users' passwords again only when the broker answers
    # and refuses the password itself (AUTH_REFUSALS); this is what that looks like.
    from cluster.accounts import Account
    from cluster.brokers import AUTH_REFUSALS, PROBE_USER

    node = cluster.nodes[1]
    probe = cluster.secrets.student(PROBE_USER)
    assert cluster._login_refused(node, probe) is None
    # as after Jupyter's logging setup in the same process (a dictConfig disables every logger it
    # does not name, kafka-python's included; CI failed this test so): the cause must still be read
    family = [
        lg
        for name, lg in logging.root.manager.loggerDict.items()
        if name.split(".")[0] == "kafka" and isinstance(lg, logging.Logger)
    ]
    was = [lg.disabled for lg in family]
    for lg in family:
        lg.disabled = True
    answers = []
    try:
        # three tries of 10 s: on a loaded machine the wait's 3 s bootstrap can run out before the
        # broker's answer (CI, twice: three plain timeouts of 3 s in a row while the corpus was
        # graded beside it), which is the "still starting" case; the refusal must be read
        # whenever the broker's answer came
        for _ in range(3):
            wrong = Account(PROBE_USER, probe.password + "x")
            answers.append(cluster._login_refused(node, wrong, timeout_ms=10_000))
            if answers[-1] is not None and answers[-1].startswith(AUTH_REFUSALS):
                break
    finally:
        for lg, before in zip(family, was):
            lg.disabled = before
    assert answers[-1] is not None and answers[-1].startswith(AUTH_REFUSALS), answers


def test_a_refused_login_is_read_without_the_log(cluster):
    # The second way a refusal is told: librdkafka's error callback (kafka-python's refusal reaches
    # the wait only through a log record, which CI lost twice in a full run). Fails without it:
    # the wrong password's result would be None, like the right one's.
    from cluster.accounts import Account
    from cluster.brokers import PROBE_USER

    node = cluster.nodes[1]
    probe = cluster.secrets.student(PROBE_USER)
    refusal = cluster._refusal_seen(node, Account(PROBE_USER, probe.password + "x"), timeout_ms=10_000)
    assert refusal is not None and "Authentication failed" in refusal, refusal
    assert cluster._refusal_seen(node, probe, timeout_ms=2_000) is None


def test_port_in_use_is_named_and_nothing_changes(cluster, tmp_path):
    # Another cluster folder, but the running cluster's ports.
    other = Cluster(settings.Settings(home=tmp_path / "other", port_base=cluster.cfg.port_base))
    with pytest.raises(ClusterError) as err:
        other.up()
    msg = str(err.value)
    assert f"Port {cluster.cfg.port_base}" in msg and "in use by pid" in msg and "COURSE_PORT_BASE" in msg
    assert not (tmp_path / "other").exists()  # nothing was written
    assert cluster.is_running()


def test_stale_data_folder_suggests_wipe(tmp_path):
    cfg = settings.Settings(home=tmp_path / "c", port_base=settings.THROWAWAY_PORT_BASE)
    data = cfg.node_dir(1) / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").write_text("cluster.id=someone-else\nnode.id=1\nversion=1\n")
    with pytest.raises(ClusterError) as err:
        Cluster(cfg).up()
    assert "stale" in str(err.value) and "down --wipe" in str(err.value)

    cfg.home.joinpath("cluster.json").write_text(json.dumps({"cluster_id": "abc"}))
    with pytest.raises(ClusterError) as err:
        Cluster(cfg).up()
    assert "belongs to another cluster" in str(err.value) and "down --wipe" in str(err.value)


def cli(tmp_path, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    """`python -m cluster ARGS` for a throwaway cluster (its own folder and unused ports)."""
    full = dict(
        os.environ, COURSE_CLUSTER_HOME=str(tmp_path / "c"), COURSE_PORT_BASE=str(settings.THROWAWAY_PORT_BASE), **env
    )
    return subprocess.run(
        [sys.executable, "-m", "cluster", *args], env=full, capture_output=True, text=True, timeout=timeout
    )


def test_no_java_says_what_to_install(tmp_path):
    out = cli(tmp_path, "up", JAVA_HOME=str(tmp_path / "nojava"))
    assert out.returncode == 1
    assert "Java was not found" in out.stderr and "JDK 17" in out.stderr


def test_old_java_is_refused(tmp_path):
    # A stand-in for a Java 11 install: only its version banner matters to the check.
    fake = tmp_path / "jdk11" / "bin" / "java"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.22\" 2024-01-16' >&2\n")
    fake.chmod(0o755)
    out = cli(tmp_path, "up", JAVA_HOME=str(tmp_path / "jdk11"))
    assert out.returncode == 1
    assert "Java 11" in out.stderr and "17 or newer" in out.stderr


def test_no_network_on_first_run_names_what_could_not_be_fetched(tmp_path, monkeypatch):
    monkeypatch.delenv("KAFKA_HOME", raising=False)
    out = cli(
        tmp_path,
        "jars",
        timeout=300,
        COURSE_JARS_CACHE=str(tmp_path / "empty-cache"),
        HTTPS_PROXY="http://127.0.0.1:9",
        HTTP_PROXY="http://127.0.0.1:9",
    )
    assert out.returncode == 1
    assert "Could not fetch the kafka jars" in out.stderr and "org.apache.kafka:kafka_2.13" in out.stderr
    assert "Maven Central" in out.stderr


def test_cached_jars_need_no_network(tmp_path):
    out = cli(
        tmp_path, "jars", "--check", timeout=300, HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9"
    )
    assert out.returncode == 0, out.stderr
    assert "All jars match" in out.stdout


def test_kafka_home_is_used_instead_of_the_bundle(tmp_path, monkeypatch):
    from cluster import jars

    libs = tmp_path / "kafka" / "libs"
    libs.mkdir(parents=True)
    for jar in jars.jars("kafka")[:3]:
        shutil.copy(jar, libs)
    monkeypatch.setenv("KAFKA_HOME", str(tmp_path / "kafka"))
    assert sorted(p.name for p in jars.kafka_classpath()) == sorted(p.name for p in libs.iterdir())
    monkeypatch.setenv("KAFKA_HOME", str(tmp_path / "nothing"))
    with pytest.raises(ClusterError, match="no libs"):
        jars.kafka_classpath()
