"""Where Kafka is, who you are on it, and which topic and group names are yours.

    from cluster import connection
    producer = KafkaProducer(**connection(), acks="all")   # servers, and your login

The same notebook runs in three modes, told apart by the environment:
- local   (default) the three JVMs of `python -m cluster up` on this machine;
- compose the containers of docker-compose.yml (its JupyterLab sets COURSE_MODE=compose);
- hosted  a cluster a JupyterHub admin runs (KAFKA_BOOTSTRAP_SERVERS, KAFKA_USERNAME and
          KAFKA_PASSWORD set for each user by the hub).
KAFKA_BOOTSTRAP_SERVERS, KAFKA_USERNAME and KAFKA_PASSWORD, when set, always win (a grading
run sets them for the student's code).

Several students, or several grading runs, share one cluster: each works in a namespace, a
prefix on its topic and group names (LAB_NAMESPACE, else the user's name), and logs in as a
user that the brokers allow that namespace and nothing else (cluster/accounts.py). On a
laptop the same holds: your user is made the first time you connect, and its password is
kept with the cluster (in .cluster/secrets.json), so code that works on your laptop works
when it is graded and on a hosted hub.
"""

from __future__ import annotations

import getpass
import re

from .accounts import PLAIN, Account, Secrets
from . import accounts, settings
from .settings import Settings

MODES = ("local", "compose", "hosted")
COMPOSE_BOOTSTRAP = "kafka-1:19092,kafka-2:19092,kafka-3:19092"


def mode() -> str:
    m = settings.env("COURSE_MODE")
    if m not in MODES:
        raise ValueError(f"COURSE_MODE={m!r}; it must be one of {', '.join(MODES)}")
    return m


def bootstrap_servers() -> str:
    """The bootstrap servers for this mode, as "host:port,host:port,..."."""
    explicit = settings.env("KAFKA_BOOTSTRAP_SERVERS")
    if explicit:
        return explicit
    m = mode()
    if m == "compose":
        return COMPOSE_BOOTSTRAP
    if m == "hosted":
        raise ValueError("COURSE_MODE=hosted needs KAFKA_BOOTSTRAP_SERVERS; ask your course admin.")
    return Settings.from_env().bootstrap_servers


def anything_listens(servers: str, timeout_s: float = 2.0) -> bool:
    """Does any of "host:port,host:port" accept a TCP connection? (Kafka's own client would
    retry for half a minute before it says that nobody answers.)"""
    import socket

    for server in servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return True
        except (OSError, ValueError):
            continue
    return False


def namespace() -> str:
    """The prefix of your topic and group names: LAB_NAMESPACE, else your user name, made
    safe for Kafka names (letters, digits, '-')."""
    raw = settings.env("LAB_NAMESPACE") or getpass.getuser()
    ns = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    if not ns:
        raise ValueError(f"namespace {raw!r} has no usable characters; set LAB_NAMESPACE")
    if ns.startswith("connect-cluster-"):  # Connect's names for every namespace's workers (accounts.py)
        raise ValueError(f"namespace {ns!r} begins as Kafka Connect's own names do; set LAB_NAMESPACE to another")
    return ns[:100]


def qualify(ns: str, name: str) -> str:
    """`name` inside namespace `ns`: "<ns>.<name>" (a topic, a group, a transactional id). The
    brokers' ACLs give each user the names with its namespace's prefix, qualify(ns, "")."""
    return f"{ns}.{name}"


def in_namespace(ns: str, name: str) -> bool:
    return name.startswith(qualify(ns, ""))


def topic_name(name: str) -> str:
    """Your topic called `name`: "<namespace>.<name>"."""
    return qualify(namespace(), name)


def group_name(name: str) -> str:
    """Your consumer group called `name`: "<namespace>.<name>"."""
    return qualify(namespace(), name)


def transactional_id(name: str) -> str:
    """Your transactional producer called `name`: "<namespace>.<name>"."""
    return qualify(namespace(), name)


def account() -> Account:
    """Your login: KAFKA_USERNAME/KAFKA_PASSWORD if set (a hub, a grading run), else, on a
    local cluster, your namespace's user, made on first use."""
    user, password = settings.env("KAFKA_USERNAME"), settings.env("KAFKA_PASSWORD")
    if user and password:
        return Account(user, password)
    if mode() != "local":
        raise ValueError(
            f"COURSE_MODE={mode()} needs KAFKA_USERNAME and KAFKA_PASSWORD (your login to "
            "the course's Kafka cluster); ask your course admin."
        )
    return local_student(namespace())


def local_student(ns: str) -> Account:
    """The user of namespace `ns` on the local cluster: its password from the cluster's
    secrets file, and the user made on the brokers the first time."""
    from .brokers import Cluster

    cluster = Cluster()
    found = cluster.secrets.student(ns)
    if found is not None:
        return found
    if not cluster.secrets.exists():
        raise ValueError(
            f"No local cluster has been set up in {cluster.cfg.home}. Start it with "
            "`make up` (or `python -m cluster up`), then run this again."
        )
    return cluster.add_student(ns)


def connection() -> dict:
    """Everything a kafka-python client needs to reach the cluster as you:
    KafkaProducer(**connection(), acks="all")."""
    return {"bootstrap_servers": bootstrap_servers(), **account().kafka_python()}


def librdkafka_connection() -> dict:
    """The same for confluent-kafka (librdkafka): Producer(librdkafka_connection())."""
    return {"bootstrap.servers": bootstrap_servers(), **account().librdkafka()}


def admin_connection() -> dict:
    """The course's own login (a super user), for the cluster's tools and the grader's checks.
    KAFKA_ADMIN_BOOTSTRAP_SERVERS and KAFKA_ADMIN_PASSWORD name another cluster's; otherwise the
    local cluster's INTERNAL listeners and its secrets file."""
    password = settings.env("KAFKA_ADMIN_PASSWORD")
    if password:
        servers = settings.env("KAFKA_ADMIN_BOOTSTRAP_SERVERS") or (
            COMPOSE_BOOTSTRAP if mode() == "compose" else bootstrap_servers()
        )
        return {"bootstrap_servers": servers, **Account("admin", password, PLAIN).kafka_python()}
    cfg = Settings.from_env()
    secrets = Secrets(cfg.home)
    if not secrets.exists():
        raise ValueError(
            f"No local cluster has been set up in {cfg.home} (its secrets file is missing) and "
            "KAFKA_ADMIN_PASSWORD is not set. Start the cluster with `python -m cluster up`."
        )
    return {"bootstrap_servers": cfg.internal_bootstrap_servers, **secrets.admin().kafka_python()}


def group_ids(admin) -> list[str]:
    """The ids of the consumer groups `admin` may see (kafka-python 3 lists each as a dict)."""
    return sorted(
        str(g["group_id"] if isinstance(g, dict) else g[0] if isinstance(g, tuple) else g.group_id)
        for g in admin.list_groups()
    )


def admin_client(client_id: str, connection: dict | None = None, **overrides):
    """A KafkaAdminClient logged in with `connection` (default: the course's admin, see
    admin_connection()); `overrides` are kafka-python's settings (e.g. request_timeout_ms)."""
    return accounts.admin_client_for(client_id, admin_connection() if connection is None else connection, **overrides)
