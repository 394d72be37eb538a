"""The course on Kubernetes (cluster/k8s.py): Strimzi's Kafka and users and Zero to JupyterHub's
values say what the local cluster does: the same broker settings, the same namespace ACLs and
quotas, and the environment the kit reads."""

from __future__ import annotations

import yaml
import pytest

from cluster import accounts, k8s, settings
from cluster.__main__ import main

# Broker settings Strimzi manages itself and refuses in spec.kafka.config (its KafkaClusterSpec,
# release 1.0.1).
STRIMZI_FORBIDDEN = (
    "listeners",
    "advertised.",
    "broker.",
    "listener.",
    "host.name",
    "port",
    "inter.broker.listener.name",
    "sasl.",
    "ssl.",
    "security.",
    "password.",
    "log.dir",
    "authorizer.",
    "super.user",
    "node.id",
    "process.roles",
    "controller.",
    "metadata.log.dir",
)


@pytest.fixture
def written(tmp_path):
    roster = tmp_path / "students.txt"
    roster.write_text("# section A\nalice\nbob   # joined late\n\n")
    assert (
        main(
            [
                "k8s",
                str(tmp_path / "out"),
                "--roster",
                str(roster),
                "--namespace",
                "course-f26",
                "--image",
                "registry.example.edu/kafka-course-jupyter:2026.11",
            ]
        )
        == 0
    )
    return {p.name: list(yaml.safe_load_all(p.read_text())) for p in (tmp_path / "out").iterdir()}


def test_strimzi_runs_the_courses_kafka_with_its_settings(written):
    pool, kafka = written["strimzi-kafka.yaml"]
    assert pool["spec"]["replicas"] == 3 and set(pool["spec"]["roles"]) == {"broker", "controller"}
    spec = kafka["spec"]["kafka"]
    assert spec["version"] == settings.kafka_version()
    assert spec["config"] == settings.TEACHING_DEFAULTS
    assert [k for k in spec["config"] if k.startswith(STRIMZI_FORBIDDEN)] == []
    assert spec["listeners"][0]["authentication"] == {"type": "scram-sha-512"}
    assert spec["authorization"] == {"type": "simple", "superUsers": [k8s.ADMIN]}
    assert kafka["spec"]["entityOperator"]["userOperator"]["watchedNamespace"] == "course-f26"


def test_each_student_gets_the_local_clusters_namespace_rights_and_quotas(written):
    admin, *students = written["kafka-users.yaml"]
    assert admin["metadata"]["name"] == k8s.ADMIN and "authorization" not in admin["spec"]
    assert [u["metadata"]["name"] for u in students] == ["kafka-alice", "kafka-bob"]
    for user, namespace in zip(students, ["alice", "bob"]):
        found = {
            (rule["resource"]["type"], rule["resource"]["name"], rule["resource"]["patternType"], op)
            for rule in user["spec"]["authorization"]["acls"]
            for op in rule["operations"]
        }
        expected = {
            (
                k8s.RESOURCE_TYPES[a.resource_pattern.resource_type.name],
                a.resource_pattern.resource_name,
                "prefix",
                k8s.OPERATIONS[a.operation.name],
            )
            for a in accounts.namespace_acls(user["metadata"]["name"], namespace)
        }
        assert found == expected and len(found) == 14  # 12 on "<ns>.", 2 for Connect's leader
        assert user["spec"]["quotas"] == {
            "producerByteRate": accounts.USER_QUOTAS["producer_byte_rate"],
            "consumerByteRate": accounts.USER_QUOTAS["consumer_byte_rate"],
            "controllerMutationRate": accounts.USER_QUOTAS["controller_mutation_rate"],
        }


def test_a_students_server_logs_in_as_their_kafka_user(written):
    [values] = written["z2jh-values.yaml"]
    env = values["singleuser"]["extraEnv"]
    assert set(env) <= set(settings.ENVIRONMENT), "a variable the kit does not read"
    assert env["KAFKA_BOOTSTRAP_SERVERS"] == "course-kafka-bootstrap.course-f26.svc:9092"
    # KubeSpawner fills {username}; the login and the Secret are the user's KafkaUser
    assert env["KAFKA_USERNAME"] == env["KAFKA_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "kafka-{username}"
    assert env["KAFKA_USERNAME"].replace("{username}", "alice") == written["kafka-users.yaml"][1]["metadata"]["name"]
    assert env["LAB_NAMESPACE"] == "{username}"
    assert values["singleuser"]["image"] == {"name": "registry.example.edu/kafka-course-jupyter", "tag": "2026.11"}


def test_a_roster_name_kubernetes_cannot_take_is_refused(tmp_path):
    roster = tmp_path / "students.txt"
    roster.write_text("alice\nBob.Smith@uni.edu\n")
    with pytest.raises(SystemExit, match="Bob.Smith@uni.edu cannot be Kubernetes names"):
        k8s.read_roster(roster)
