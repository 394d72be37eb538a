"""The running cluster: ready means working, status tells the truth, settings took effect."""

from __future__ import annotations

import os
import subprocess
import sys

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from cluster import Cluster, bootstrap_servers, connection, settings
from cluster.brokers import live_brokers


def test_three_brokers_one_active_controller(cluster, admin):
    assert live_brokers(admin) == {1, 2, 3}
    rows = cluster.status()
    assert [r.state for r in rows] == ["alive"] * 3
    assert sum(r.active_controller for r in rows) == 1, [r.row() for r in rows]
    assert all(r.pid and r.rss_mb > 0 for r in rows)


def test_up_on_a_running_cluster_changes_nothing(cluster):
    pids = [n.pid for n in cluster.nodes.values()]
    assert cluster.up() == cluster.bootstrap_servers
    assert [n.pid for n in cluster.nodes.values()] == pids


def test_connection_helper_points_at_this_cluster(cluster):
    assert bootstrap_servers() == cluster.bootstrap_servers
    # the test process's own ports (TEST_PORT_BASE, or the next block for xdist's second process)
    assert bootstrap_servers().split(",")[0].endswith(f":{settings.Settings.from_env().port_base}")
    assert settings.Settings.from_env().port_base in (
        settings.TEST_PORT_BASE,
        settings.TEST_PORT_BASE + settings.TEST_WORKER_PORT_STEP,
    )


def test_teaching_defaults_are_in_force(cluster, admin):
    res = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")
    entries = {name: e["value"] for name, e in res["broker"]["1"].items()}
    for key in (
        "default.replication.factor",
        "min.insync.replicas",
        "log.retention.check.interval.ms",
        "auto.create.topics.enable",
        "offsets.topic.replication.factor",
    ):
        assert entries[key] == settings.TEACHING_DEFAULTS[key], key


def test_topic_gets_three_replicas_by_default(admin, topic):
    admin.create_topics([NewTopic(topic, 3)])  # no replication factor: the broker default
    admin.wait_for_topics([topic])
    parts = admin.describe_topics([topic])[0]["partitions"]
    assert len(parts) == 3
    assert all(sorted(p["replica_nodes"]) == [1, 2, 3] for p in parts)


def test_produce_and_consume_round_trip(admin, topic):
    admin.create_topics([NewTopic(topic, 2, 3)])
    admin.wait_for_topics([topic])
    producer = KafkaProducer(**connection(), acks="all")
    sent = [f"msg-{i}".encode() for i in range(50)]
    for value in sent:
        producer.send(topic, key=value[-1:], value=value)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(topic, **connection(), auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    got = []
    for record in consumer:
        got.append(record.value)
        if len(got) == len(sent):
            break
    consumer.close()
    assert sorted(got) == sorted(sent)


def test_status_cli_lists_every_node(cluster):
    out = subprocess.run([sys.executable, "-m", "cluster", "status"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:3] == ["node", "state", "pid"]
    for node in settings.NODE_IDS:
        row = lines[node].split()
        assert row[0] == str(node) and row[1] == "alive"
        assert row[3] == str(cluster.cfg.port(node))
    assert sum(line.split()[6] == "active" for line in lines[1:4]) == 1


def test_status_of_a_stopped_cluster_is_an_answer_for_make_and_exit_3_for_scripts(tmp_path):
    """No cluster in the folder: `python -m cluster status` says how to start it and exits 3 (as
    `systemctl status` does); `make status` prints the same and succeeds (no make "Error 3")."""
    env = {
        **os.environ,
        "COURSE_CLUSTER_HOME": str(tmp_path / "none"),
        "COURSE_PORT_BASE": str(settings.THROWAWAY_PORT_BASE),
    }
    cli = subprocess.run(
        [sys.executable, "-m", "cluster", "status"], capture_output=True, text=True, env=env, timeout=120
    )
    assert cli.returncode == 3 and "The cluster is not running: `make up`" in cli.stdout, cli.stdout + cli.stderr
    stamp = tmp_path / "installed"  # the Makefile installs first: this checkout has it installed
    stamp.touch()
    made = subprocess.run(
        ["make", "-s", "-C", str(settings.ROOT), "status", f"PY={sys.executable}", f"STAMP={stamp}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert made.returncode == 0 and "Error" not in made.stderr, made.stdout + made.stderr
    assert "stopped" in made.stdout and "The cluster is not running" in made.stdout, made.stdout


def test_each_node_has_its_own_folder_log_and_ports(cluster):
    ports = set()
    for node in cluster.nodes.values():
        assert node.config_file.exists() and (node.data_dir / "meta.properties").exists()
        assert "Kafka Server started" in node.log_file.read_text()
        ports |= set(cluster.cfg.ports(node.id).values())
    assert len(ports) == 9


def test_a_second_cluster_object_sees_the_same_nodes(cluster):
    other = Cluster(cluster.cfg)
    assert [n.pid for n in other.nodes.values()] == [n.pid for n in cluster.nodes.values()]
