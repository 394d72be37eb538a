"""A class that outgrows one machine: the course on Kubernetes, written from the kit's own settings.

    python -m cluster k8s OUT --roster students.txt [--namespace jhub] [--image REGISTRY/kafka-course-jupyter:TAG]

writes three files into OUT, for engines the kit does not run itself:

- strimzi-kafka.yaml: a Kafka cluster from the Strimzi operator (API kafka.strimzi.io/v1, the
  kit's Kafka version in spec.kafka.version: docs/scaling.md says which Strimzi runs it): one node
  pool of three
  KRaft nodes (broker and controller, as the local cluster), the course's teaching defaults
  (TEACHING_DEFAULTS, the same as the local cluster and compose), SCRAM logins on an internal
  listener, the brokers' simple authorizer, and the course admin as super user;
- kafka-users.yaml: one KafkaUser per student of the roster, with the ACLs of their
  namespace (the local cluster's namespace_acls, as Strimzi rules) and the course's quotas;
  Strimzi keeps each password in a Secret of the user's name;
- z2jh-values.yaml: values for the Zero to JupyterHub chart: the course image, the resources
  a student's server needs, and each server's Kafka login (read from that Secret by KubeSpawner).

Everything course-specific comes from cluster/settings.py and cluster/accounts.py, and
tests/cluster/test_k8s.py checks the files agree with them. What is not here: the
partition budget (the brokers' topic policy, a plugin jar: it needs a Kafka image of the
course's own; docs/scaling.md says how), and Spark (local in each student's server).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from . import accounts, settings

CLUSTER_NAME = "course"
NODE_POOL = "nodes"
ADMIN = "course-admin"  # the grader's and the instructor's login, a super user
LISTENER_PORT = 9092
USER_PREFIX = "kafka-"  # KafkaUser (and its Secret) of student alice: kafka-alice
# A student's Jupyter server: lab 9 is the largest, a Spark driver in the kernel and one for the
# job script: 1.4 GB more than lab 1 at the peak (the grader's measurement: 2.25 GB with the
# cluster against lab 1's 0.88 GB).
STUDENT_MEMORY = {"guarantee": "1G", "limit": "3G"}
STUDENT_CPU = {"guarantee": 0.25, "limit": 2}
# Kubernetes object names (and so Strimzi's user names): DNS-1123 labels.
NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,50}[a-z0-9])?$")

# kafka-python's ACL names -> Strimzi's AclRule names
RESOURCE_TYPES = {"TOPIC": "topic", "GROUP": "group", "TRANSACTIONAL_ID": "transactionalId"}
OPERATIONS = {
    "CREATE": "Create",
    "DELETE": "Delete",
    "READ": "Read",
    "WRITE": "Write",
    "DESCRIBE": "Describe",
    "DESCRIBE_CONFIGS": "DescribeConfigs",
    "ALTER_CONFIGS": "AlterConfigs",
    "ALTER": "Alter",
}
QUOTAS = {
    "producer_byte_rate": "producerByteRate",
    "consumer_byte_rate": "consumerByteRate",
    "controller_mutation_rate": "controllerMutationRate",
}


def bootstrap(namespace: str) -> str:
    """Where students' servers and the grader reach the brokers (Strimzi's bootstrap service)."""
    return f"{CLUSTER_NAME}-kafka-bootstrap.{namespace}.svc:{LISTENER_PORT}"


def kafka(namespace: str) -> list[dict]:
    """The node pool and the Kafka cluster."""
    pool = {
        "apiVersion": "kafka.strimzi.io/v1",
        "kind": "KafkaNodePool",
        "metadata": {"name": NODE_POOL, "namespace": namespace, "labels": {"strimzi.io/cluster": CLUSTER_NAME}},
        "spec": {
            "replicas": 3,
            "roles": ["controller", "broker"],
            "storage": {
                "type": "jbod",
                "volumes": [
                    {
                        "id": 0,
                        "type": "persistent-claim",
                        "size": "20Gi",
                        "deleteClaim": False,
                        "kraftMetadata": "shared",
                    }
                ],
            },
            # the local cluster's heap per broker is 256 MB; a shared cluster carries a class
            "jvmOptions": {"-Xms": "1g", "-Xmx": "1g"},
            "resources": {"requests": {"memory": "2Gi", "cpu": "500m"}, "limits": {"memory": "2Gi"}},
        },
    }
    cluster = {
        "apiVersion": "kafka.strimzi.io/v1",
        "kind": "Kafka",
        "metadata": {"name": CLUSTER_NAME, "namespace": namespace},
        "spec": {
            "kafka": {
                "version": settings.kafka_version(),
                "listeners": [
                    {
                        "name": "plain",
                        "port": LISTENER_PORT,
                        "type": "internal",
                        "tls": False,
                        "authentication": {"type": "scram-sha-512"},
                    }
                ],
                "authorization": {"type": "simple", "superUsers": [ADMIN]},
                "config": dict(settings.TEACHING_DEFAULTS),
            },
            # the user operator makes each KafkaUser's login, ACLs, quotas and Secret; it watches
            # the hub's namespace, where the students' servers can read their Secrets
            "entityOperator": {"userOperator": {"watchedNamespace": namespace}, "topicOperator": {}},
        },
    }
    return [pool, cluster]


def acl_rules(namespace: str) -> list[dict]:
    """The local cluster's ACLs of a namespace, as Strimzi's AclRules (one per resource type)."""
    rules: dict[tuple[str, str], list[str]] = {}
    for acl in accounts.namespace_acls("x", namespace):
        pattern = acl.resource_pattern
        kind = RESOURCE_TYPES[pattern.resource_type.name]
        rules.setdefault((kind, pattern.resource_name), []).append(OPERATIONS[acl.operation.name])
    return [
        {"resource": {"type": kind, "name": name, "patternType": "prefix"}, "operations": ops, "host": "*"}
        for (kind, name), ops in rules.items()
    ]


def user(name: str, namespace: str, acls: bool = True) -> dict:
    spec: dict = {"authentication": {"type": "scram-sha-512"}}
    if acls:
        spec["authorization"] = {"type": "simple", "acls": acl_rules(name)}
        spec["quotas"] = {
            QUOTAS[k]: v if k == "controller_mutation_rate" else int(v) for k, v in accounts.USER_QUOTAS.items()
        }
    return {
        "apiVersion": "kafka.strimzi.io/v1",
        "kind": "KafkaUser",
        "metadata": {
            "name": (USER_PREFIX + name) if acls else name,
            "namespace": namespace,
            "labels": {"strimzi.io/cluster": CLUSTER_NAME},
        },
        "spec": spec,
    }


def users(roster: list[str], namespace: str) -> list[dict]:
    return [user(ADMIN, namespace, acls=False)] + [user(name, namespace) for name in roster]


def hub_values(namespace: str, image: str) -> dict:
    """Zero to JupyterHub values: KubeSpawner expands {username} in the environment, and takes a
    dict value as a Kubernetes EnvVar (here: the password from the user's Secret)."""
    name, _, tag = image.rpartition(":")
    return {
        "singleuser": {
            "image": {"name": name or image, "tag": tag if name else "latest"},
            "memory": STUDENT_MEMORY,
            "cpu": STUDENT_CPU,
            "extraEnv": {
                "COURSE_MODE": "hosted",
                "KAFKA_BOOTSTRAP_SERVERS": bootstrap(namespace),
                "LAB_NAMESPACE": "{username}",
                "KAFKA_USERNAME": USER_PREFIX + "{username}",
                "KAFKA_PASSWORD": {
                    "valueFrom": {"secretKeyRef": {"name": USER_PREFIX + "{username}", "key": "password"}}
                },
            },
        },
    }


def read_roster(path: Path) -> list[str]:
    """One login name per line (# comments and blank lines skipped); each must be a DNS-1123 label."""
    names = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    names = [n for n in names if n]
    bad = [n for n in names if not NAME.match(n) or n == ADMIN]
    if bad:
        raise SystemExit(
            f"{path}: {', '.join(bad[:5])} cannot be Kubernetes names (lowercase letters, digits and "
            "'-', at most 52 characters); use the hub's login names in that form"
        )
    if len(set(names)) != len(names):
        raise SystemExit(f"{path}: a name appears twice")
    return names


def write(out: Path, roster: list[str], namespace: str, image: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "strimzi-kafka.yaml": kafka(namespace),
        "kafka-users.yaml": users(roster, namespace),
        "z2jh-values.yaml": [hub_values(namespace, image)],
    }
    written = []
    for name, docs in files.items():
        (out / name).write_text(yaml.safe_dump_all(docs, sort_keys=False))
        written.append(out / name)
    return written
