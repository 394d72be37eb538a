"""How a notebook finds Kafka and its own names, in each mode."""

import pytest

from cluster import clients


def test_local_mode_uses_the_configured_ports(monkeypatch):
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("COURSE_PORT_BASE", "19092")
    assert clients.bootstrap_servers() == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"


def test_compose_mode_uses_the_container_listener(monkeypatch):
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("COURSE_MODE", "compose")
    assert clients.bootstrap_servers() == clients.COMPOSE_BOOTSTRAP


def test_explicit_servers_win_and_hosted_mode_needs_them(monkeypatch):
    monkeypatch.setenv("COURSE_MODE", "hosted")
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(ValueError, match="KAFKA_BOOTSTRAP_SERVERS"):
        clients.bootstrap_servers()
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "kafka.example:9092")
    assert clients.bootstrap_servers() == "kafka.example:9092"


def test_unknown_mode_is_rejected_by_name(monkeypatch):
    monkeypatch.setenv("COURSE_MODE", "cloud")
    with pytest.raises(ValueError, match="'cloud'.*local, compose, hosted"):
        clients.mode()


@pytest.mark.parametrize(
    "raw,expected",
    [("Ada Lovelace", "ada-lovelace"), ("grade_42", "grade-42"), ("jupyter-ada@uni.edu", "jupyter-ada-uni-edu")],
)
def test_namespace_is_safe_for_kafka_names(monkeypatch, raw, expected):
    monkeypatch.setenv("LAB_NAMESPACE", raw)
    assert clients.namespace() == expected
    assert clients.topic_name("flights") == f"{expected}.flights"
    assert clients.group_name("stats") == f"{expected}.stats"


def test_namespace_defaults_to_the_user_name(monkeypatch):
    monkeypatch.delenv("LAB_NAMESPACE", raising=False)
    monkeypatch.setattr(clients.getpass, "getuser", lambda: "Grace")
    assert clients.namespace() == "grace"


def test_admin_client_settings_given_win_over_the_connection(monkeypatch):
    """own.admin(bootstrap_servers=one broker) (lab 7) must reach that broker only."""
    import kafka

    from cluster.clients import admin_client

    seen = {}
    monkeypatch.setattr(kafka, "KafkaAdminClient", lambda **kw: seen.update(kw))
    admin_client("x", {"bootstrap_servers": "a:1,b:2", "sasl_plain_username": "u"}, bootstrap_servers="b:2")
    assert seen == {"bootstrap_servers": "b:2", "sasl_plain_username": "u", "client_id": "x"}
