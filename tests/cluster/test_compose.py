"""docker-compose.yml is valid and agrees with the local cluster (there is no Docker engine
here, so it is checked statically: `docker-compose config`, then its resolved content)."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess

import pytest
import yaml

from cluster import clients, settings

COMPOSE = settings.ROOT / "docker-compose.yml"
DOCKERFILE = settings.ROOT / "cluster" / "Dockerfile"
KAFKA_DOCKERFILE = settings.ROOT / "cluster" / "kafka.Dockerfile"


def kafka_env_name(key: str) -> str:
    """The apache/kafka image's naming: KAFKA_ + key with '_'->'__', '-'->'___', '.'->'_'."""
    return "KAFKA_" + key.replace("_", "__").replace("-", "___").replace(".", "_").upper()


@pytest.fixture(scope="module")
def compose() -> dict:
    exe = shutil.which("docker-compose")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose is missing; .ci/run installs Debian's docker-compose package")
        pytest.skip("docker-compose not installed (apt install docker-compose)")
    out = subprocess.run([exe, "-f", str(COMPOSE), "config"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"docker-compose config rejected the file:\n{out.stderr}"
    return yaml.safe_load(out.stdout)


@pytest.fixture(scope="module")
def brokers(compose) -> dict[int, dict]:
    found = {}
    for svc in compose["services"].values():
        if "KAFKA_NODE_ID" in svc.get("environment", {}):
            found[int(svc["environment"]["KAFKA_NODE_ID"])] = svc
    return found


def published_port(spec) -> int:
    """The host port of a compose port entry, long form or short ("127.0.0.1:9092:9092/tcp")."""
    if isinstance(spec, dict):
        return int(spec["published"])
    return int(str(spec).split("/")[0].split(":")[-2])


def listener_names(value: str) -> list[str]:
    return [entry.split("://")[0] for entry in value.split(",")]


def test_three_combined_kraft_nodes(brokers):
    assert sorted(brokers) == list(settings.NODE_IDS)
    for svc in brokers.values():
        env = svc["environment"]
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert len(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == len(settings.NODE_IDS)


def test_same_listener_names_as_the_local_cluster(brokers):
    local = settings.Settings(home=settings.ROOT).broker_properties(1, "b", "a")
    for svc in brokers.values():
        env = svc["environment"]
        assert sorted(listener_names(env["KAFKA_LISTENERS"])) == sorted(settings.LISTENERS)
        assert env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"] == local["listener.security.protocol.map"]
        assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == local["inter.broker.listener.name"]
        assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] == local["controller.listener.names"]
        assert sorted(listener_names(env["KAFKA_ADVERTISED_LISTENERS"])) == ["EXTERNAL", "INTERNAL"]


def test_same_teaching_settings_as_the_local_cluster(brokers):
    for node, svc in brokers.items():
        env = svc["environment"]
        for key, value in {**settings.TEACHING_DEFAULTS, **settings.SAFETY_SETTINGS}.items():
            assert env.get(kafka_env_name(key)) == value, f"kafka-{node}: {key} should be {value}"


def test_same_logins_and_rights_as_the_local_cluster(brokers):
    """Every login and authorization setting, passwords aside, is the local cluster's; the
    passwords are the same in every place that names them."""
    for node, svc in brokers.items():
        env = svc["environment"]
        jaas = env[kafka_env_name("listener.name.internal.plain.sasl.jaas.config")]
        broker_pw = re.search(r'user_broker="([^"]+)"', jaas).group(1)
        admin_pw = re.search(r'user_admin="([^"]+)"', jaas).group(1)
        want = settings.login_properties(broker_pw, admin_pw, "localhost:19092")
        for key, value in want.items():
            assert env.get(kafka_env_name(key)) == value, f"kafka-{node}: {key}"


def test_notebooks_log_in_as_the_student_the_setup_makes(compose, brokers):
    setup, jupyter = compose["services"]["kafka-setup"], compose["services"]["jupyter"]
    assert setup["command"][-2:] == ["add-user", "student"]
    assert jupyter["environment"]["KAFKA_USERNAME"] == jupyter["environment"]["LAB_NAMESPACE"] == "student"
    assert setup["environment"]["KAFKA_PASSWORD"] == jupyter["environment"]["KAFKA_PASSWORD"]
    jaas = brokers[1]["environment"][kafka_env_name("listener.name.internal.plain.sasl.jaas.config")]
    for svc in (setup, jupyter):
        assert f'user_admin="{svc["environment"]["KAFKA_ADMIN_PASSWORD"]}"' in jaas
    assert jupyter["depends_on"]["kafka-setup"]["condition"] == "service_completed_successfully"


def test_host_ports_are_the_local_clusters_client_ports(brokers):
    local = settings.Settings(home=settings.ROOT)
    for node, svc in brokers.items():
        published = [published_port(p) for p in svc["ports"]]
        assert published == [local.port(node)]
        advertised = dict(e.split("://") for e in svc["environment"]["KAFKA_ADVERTISED_LISTENERS"].split(","))
        assert advertised["EXTERNAL"] == f"localhost:{local.port(node)}"


def test_notebooks_in_compose_reach_the_internal_listener(brokers):
    internal = sorted(
        dict(e.split("://") for e in svc["environment"]["KAFKA_ADVERTISED_LISTENERS"].split(","))["INTERNAL"]
        for svc in brokers.values()
    )
    assert sorted(clients.COMPOSE_BOOTSTRAP.split(",")) == internal


def test_cluster_id_is_a_kafka_uuid(brokers):
    ids = {svc["environment"]["CLUSTER_ID"] for svc in brokers.values()}
    assert len(ids) == 1
    assert len(base64.urlsafe_b64decode(ids.pop() + "==")) == 16


def test_every_service_is_bounded_and_brokers_have_healthchecks(compose, brokers):
    heaps = []
    for svc in brokers.values():
        check = " ".join(svc["healthcheck"]["test"])
        assert "kafka-broker-api-versions" in check and "--command-config" in check
        heaps.append(int(re.search(r"-Xmx(\d+)m", svc["environment"]["KAFKA_HEAP_OPTS"]).group(1)))
    assert sum(heaps) <= 1024, "three broker heaps must fit an 8 GB laptop with Spark and JupyterLab"
    assert all("mem_limit" in svc for svc in compose["services"].values())
    for svc in brokers.values():  # the open files the local cluster asks for, too
        assert svc["ulimits"]["nofile"]["soft"] >= settings.BROKER_OPEN_FILES[1]


def test_images_are_the_pinned_ones(compose):
    images = settings.pins()["images"]
    pulled = {svc["image"] for svc in compose["services"].values() if "build" not in svc}
    assert pulled == {images["spark"]}
    base = re.search(r"ARG BASE_IMAGE=(\S+)", DOCKERFILE.read_text()).group(1)
    assert base == images["jupyter"]
    kafka_args = dict(re.findall(r"ARG (\w+)=(\S+)", KAFKA_DOCKERFILE.read_text()))
    assert (kafka_args["KAFKA_IMAGE"], kafka_args["JDK_IMAGE"]) == (images["kafka"], images["jdk"])
    for svc in compose["services"].values():
        if "KAFKA_NODE_ID" in svc.get("environment", {}):
            assert svc["build"]["dockerfile"] == "cluster/kafka.Dockerfile"
            assert svc["image"].endswith(":" + images["kafka"].split(":")[1])


def volume_pairs(svc: dict) -> set[tuple[str, str]]:
    """(source, target) of a service's volumes, long form or short ("src:target:rw")."""
    return {
        (v["source"], v["target"]) if isinstance(v, dict) else tuple(v.split(":")[:2]) for v in svc.get("volumes", [])
    }


def test_jupyter_service_mounts_labs_and_runs_in_compose_mode(compose):
    svc = compose["services"]["jupyter"]
    assert svc["build"]["dockerfile"] == "cluster/Dockerfile"
    assert svc["environment"]["COURSE_MODE"] == "compose"
    assert "/home/jovyan/course/labs" in {target for _, target in volume_pairs(svc)}


def test_spark_workers_executors_write_where_the_notebook_reads(compose):
    """With SPARK_MASTER=spark://spark-master:7077, executors in spark-worker write a query's
    files (Parquet parts, state) at the paths the notebook's driver gives them: the worker must
    see the notebooks' folder at the same path, as the notebook's user (jovyan of the jupyter
    image, 1000:100), with a work folder that user can write."""
    jupyter, worker = compose["services"]["jupyter"], compose["services"]["spark-worker"]
    root = re.search(r"--ServerApp.root_dir=(\S+?)\"", DOCKERFILE.read_text()).group(1)
    labs = {pair for pair in volume_pairs(jupyter) if pair[1] == root}
    assert labs and labs <= volume_pairs(worker), "spark-worker must mount the notebooks' folder as jupyter does"
    assert str(worker["user"]) == "1000:100"
    assert worker["environment"]["SPARK_WORKER_DIR"].startswith("/tmp/")
