"""One place for the cluster's ports, folders, pins and Kafka settings.

The local cluster (cluster/brokers.py), the connection helper (cluster/clients.py), the
compose file's test (tests/cluster/test_compose.py) and the README all read from here.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"

NODE_IDS = (1, 2, 3)
# Every node is broker and controller (KRaft combined mode). Each listener gets its own
# port block: EXTERNAL is what clients use, INTERNAL carries replication between brokers,
# CONTROLLER carries the KRaft quorum. docker-compose.yml uses the same three names.
LISTENERS = ("EXTERNAL", "INTERNAL", "CONTROLLER")
PORT_BLOCK = 100  # EXTERNAL 9092-9094, INTERNAL 9192-9194, CONTROLLER 9292-9294

DEFAULT_PORT_BASE = 9092
STATE_FILE = "cluster.json"  # in a cluster's folder: its id, Kafka version and port base
# The test suite runs its own cluster on other ports and in another folder, so that a
# student's running lab cluster is never touched by `make test`.
TEST_PORT_BASE = 29092
TEST_WORKER_PORT_STEP = 3  # the tests' second process (pytest-xdist) uses 29095-29097, ...
# Every course port stays below 32768, where Linux picks the ephemeral ports of outgoing
# connections and of Jupyter kernels: a cluster on 39092 could find a kernel sitting there.
THROWAWAY_PORT_BASE = 30092  # the tests' short-lived extra clusters
BENCH_PORT_BASE = 31092  # make bench's own cluster
# Labs 7, 13, 14 and 15's clusters of one's own, to break: one per student kernel or per grading.
# Each has four port blocks (the three listeners, and METRICS: its brokers' Prometheus pages)
# and up to four nodes (the three, and lab 14's added broker, ADDED_BROKER): bases 4 apart
# inside one hundred, so the sixteen ports of each (base+0..3, +100..103, +200..203, +300..303)
# never meet another's: 25 clusters at once on one machine.
OWN_NODES = 4
OWN_PORT_BASES = tuple(range(11000, 11100 - OWN_NODES + 1, OWN_NODES))
# The broker lab 14 adds to a cluster of one's own (process.roles=broker only: the three nodes
# above stay the controllers' quorum); it lives in the cluster's folder as node-4.
ADDED_BROKER = 4
# The port block of each broker's metrics page (the Prometheus JMX exporter's Java agent, on a
# cluster of one's own only: Settings.metrics), after the three listeners' blocks.
METRICS = "METRICS"

# How an own cluster differs from the course's: a killed broker is declared dead after 3 s
# of silence instead of 9 s (heartbeats every 0.5 s instead of 2 s), so a lab's elections
# after a crash take seconds, not tens of seconds. The lesson is the same; the wait is shorter.
FAULT_SETTINGS = (("broker.session.timeout.ms", "3000"), ("broker.heartbeat.interval.ms", "500"))
# A replication throttle, on a cluster that carries megabytes: Kafka holds it as an average over
# eleven one-second windows and lets a follower fetch up to 1 MB a partition at a time, so at a
# laptop's few hundred KB a second a move is a burst of ten seconds' worth, then a pause, then
# another. Two windows and fetches of 64 KB make it the steady pace a throttle is for (lab 14's
# reassignment, and a broker restarted under the grader's throttle catching up over seconds).
OPERATOR_SETTINGS = (("replication.quota.window.num", "2"), ("replica.fetch.max.bytes", "65536"))
# Its JVMs compile with C1 only: they live for a minute, are restarted again and again, and
# carry a few hundred records, so the optimizing compiler (C2) would only cost CPU: a third
# less CPU per start and restart, measured; the course's cluster keeps C2 (lab 8 measures it).
FAULT_JVM_OPTS = ("-XX:TieredStopAtLevel=1",)

# Broker settings chosen for teaching. The compose file sets the same values (checked by
# tests/cluster/test_compose.py), so a lab behaves the same in both modes.
TEACHING_DEFAULTS = {
    # Three copies of everything, and a write needs two of them: one broker may die.
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    # Fewer internal partitions than Kafka's 50: faster start, less memory, same lessons.
    "offsets.topic.num.partitions": "12",
    "transaction.state.log.num.partitions": "12",
    "share.coordinator.state.topic.num.partitions": "3",
    # Students create topics on purpose; a typo must not create a topic silently.
    "auto.create.topics.enable": "false",
    # Check retention every 2 s (Kafka: 5 min), so deletion is visible during a lab (lab 6).
    "log.retention.check.interval.ms": "2000",
    # The log cleaner looks for compactable logs every second when idle (Kafka: 15 s), so a
    # compacted topic is cleaned while the student watches (lab 6).
    "log.cleaner.backoff.ms": "1000",
    # A group starts consuming at once instead of waiting 3 s for more members.
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    # The log cleaner (compaction) allocates its dedupe buffer on the heap, 128 MB by default,
    # and allocates a new one before the old is freed whenever a dynamic setting restarts it:
    # with a 256 MB heap that kills the broker. 16 MB holds ~700,000 keys per pass, far more
    # than a lab's compacted topics, and leaves room for a restart.
    "log.cleaner.dedupe.buffer.size": str(16 * 2**20),
}

# Every listener authenticates and the brokers authorize (see cluster/accounts.py): students
# and grading runs log in with SCRAM on EXTERNAL (and on INTERNAL, which is what containers on
# compose's network reach); the brokers and the course's admin use PLAIN with passwords that
# live only in the brokers' configuration. No ACL means no access.
SECURITY_SETTINGS = {
    "listener.security.protocol.map": ",".join(f"{name}:SASL_PLAINTEXT" for name in LISTENERS),
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "sasl.mechanism.controller.protocol": "PLAIN",
    "listener.name.external.sasl.enabled.mechanisms": "SCRAM-SHA-512",
    "listener.name.internal.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
    "listener.name.external.scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "listener.name.internal.scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:broker;User:admin",
    "allow.everyone.if.no.acl.found": "false",
}


def plain_jaas(broker_password: str, admin_password: str | None = None) -> str:
    """The PLAIN login of a broker listener: the brokers log in as `broker`, and the listener
    accepts `broker` (and `admin`, if given) with these passwords."""
    users = f' user_broker="{broker_password}"'
    if admin_password is not None:
        users += f' user_admin="{admin_password}"'
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="broker" password="{broker_password}"{users};'
    )


def login_properties(broker_password: str, admin_password: str, internal_server: str) -> dict[str, str]:
    """Every broker setting about logins and rights, with the passwords filled in.
    `internal_server` is this node's INTERNAL listener, where its topic policy counts."""
    props = dict(SECURITY_SETTINGS)
    props["listener.name.internal.plain.sasl.jaas.config"] = plain_jaas(broker_password, admin_password)
    props["listener.name.controller.plain.sasl.jaas.config"] = plain_jaas(broker_password)
    props.update(
        {
            "create.topic.policy.class.name": POLICY_CLASS,
            "alter.config.policy.class.name": SETTINGS_POLICY_CLASS,
            "course.partition.budget": str(PARTITION_BUDGET),
            "course.topic.limits": topic_limits_setting(),
            "course.policy.bootstrap.servers": internal_server,
            "course.policy.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="broker" password="{broker_password}";'
            ),
        }
    )
    return props


# Partitions the topics of one namespace ("<namespace>.*") may hold together: a lab needs a
# few dozen; a loop that creates topics stops here instead of exhausting the brokers' memory.
POLICY_CLASS = "course.policy.NamespaceBudgetPolicy"
PARTITION_BUDGET = 100

# What a namespace's topics may set (at creation and on every change: SETTINGS_POLICY_CLASS),
# for the settings whose cost falls on the brokers, whoever's topic it is: (least, most), None
# for no bound, or a tuple of the values allowed. (remote.storage.enable needs no entry: Kafka
# refuses it where tiered storage is off, as here.) The labs need far less than these bounds
# (lab 6 rolls its segments with timestamps an hour apart, not with a small segment.ms).
SETTINGS_POLICY_CLASS = "course.policy.TopicSettingsPolicy"
HOUR_MS = 3_600_000
TOPIC_LIMITS: dict[str, tuple] = {
    # open files: every segment of every replica keeps its .log open (segment.ms=1 rolled a
    # segment per produce and took all three brokers to their open-file limit)
    "segment.ms": (HOUR_MS, None),
    "segment.jitter.ms": (0, HOUR_MS // 2),  # else a segment may roll at any moment of its hour
    "segment.bytes": (2**20, 2**30),
    "segment.index.bytes": (2**20, 10 * 2**20),  # a full index rolls the segment too
    "index.interval.bytes": (1024, 2**20),
    # memory: a batch this large is held whole in a broker's heap, and in every reader's
    "max.message.bytes": (0, 8 * 2**20),
    # disk: a flush (fsync) per message, or whole segments written out in advance
    "flush.messages": (100_000, None),
    "flush.ms": (60_000, None),
    "preallocate": ("false",),
    "file.delete.delay.ms": (0, 60_000),  # deleted segments' files stay open that long
    # the log cleaner (one thread for the whole cluster's compacted topics)
    "min.cleanable.dirty.ratio": (0.01, 1),
    # a compacted topic also rolls its segments every max.compaction.lag.ms
    "max.compaction.lag.ms": (HOUR_MS, None),
    # the broker recompresses at these levels when the topic's codec is not the producer's
    "compression.zstd.level": (None, 9),
    "compression.lz4.level": (None, 9),
    # timestamps: no further into the future than Kafka's default
    "message.timestamp.after.max.ms": (0, HOUR_MS),
}
# Kafka's internal.* topic settings (internal.segment.bytes overrides segment.bytes, unchecked)
# are refused on a namespace's topics altogether (TopicLimits.java).


def topic_limits_setting(limits: dict[str, tuple] = TOPIC_LIMITS) -> str:
    """TOPIC_LIMITS as the brokers' course.topic.limits (cluster/policy/TopicLimits.java)."""

    def bound(x):
        return "" if x is None else repr(x)

    return ";".join(
        f"{name}={'|'.join(rule) if isinstance(rule[0], str) else bound(rule[0]) + '..' + bound(rule[1])}"
        for name, rule in limits.items()
    )


# What one client may ask of a broker's 256 MB heap at once. A topic's max.message.bytes is a
# user's to set (its own topics), so without these a single 100 MB request (Kafka's default
# limit) could take a broker down for everyone. 16 MB is far above any lab's batches.
SAFETY_SETTINGS = {
    "socket.request.max.bytes": str(16 * 2**20),  # larger requests are refused unread
    "queued.max.request.bytes": str(64 * 2**20),  # requests waiting for the I/O threads, together
}

# Small thread pools: three brokers share a student's laptop. Except recovery: its threads live
# only while a broker starts (and stops), and a broker killed under a class's load reopened its
# 5,200 partitions' logs one at a time, 1,833 in 90 s (make bench's load run), while the class
# waited; several at once overlap each log's file waits.
RESOURCE_SETTINGS = {
    "num.network.threads": "2",
    "num.io.threads": "2",
    "num.recovery.threads.per.data.dir": "4",
    # A restarted node loads its latest metadata snapshot, then replays every record written
    # after it. Kafka snapshots every hour (or 20 MB); a class makes and deletes topics all day,
    # so snapshot every 5 minutes and a restart replays at most that much.
    "metadata.log.max.snapshot.interval.ms": "300000",
    "background.threads": "2",
    "log.cleaner.threads": "1",
}

# JVM options for each broker: three of them must fit in about 1.2 GB together.
BROKER_HEAP = "256m"
BROKER_JVM_OPTS = (
    "-XX:+UseSerialGC",
    "-XX:MaxMetaspaceSize=128m",
    "-XX:ReservedCodeCacheSize=48m",
    "-XX:CICompilerCount=2",
    "-Xss512k",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)

# Deadlines (seconds). Generous: they bound a wait, they are not how long a wait takes.
READY_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30
# Open files a broker may hold: (the least it starts with, what it asks for). Each segment of
# each partition replica keeps its file open, and TOPIC_LIMITS keeps a namespace's topics to a
# few segments each: a class at its partition budget stays far below the second number.
BROKER_OPEN_FILES = (8192, 1_048_576)
BROKER_REJOIN_TIMEOUT_S = 90


# Every environment variable the kit reads, with its default (None: unset) and why it exists.
# Code reads them through env() only (tests/cluster/test_settings.py checks), so this table is
# the whole list of what can be configured from outside.
ENVIRONMENT: dict[str, tuple[str | None, str]] = {
    # where the cluster is and who you are on it
    "COURSE_MODE": ("local", "local (JVMs of `python -m cluster`), compose (docker compose) or hosted (a hub)"),
    "KAFKA_BOOTSTRAP_SERVERS": (None, "the brokers, instead of the mode's own (a hub, a grading run)"),
    "LAB_NAMESPACE": (None, "the prefix of one's topics and groups; unset: one's login name"),
    "KAFKA_USERNAME": (None, "one's Kafka login (a hub, a grading run); unset: made on first use locally"),
    "KAFKA_PASSWORD": (None, "its password; also `python -m cluster add-user`'s, when compose sets one"),
    "KAFKA_ADMIN_PASSWORD": (None, "the course admin's password on a cluster that is not this checkout's"),
    "KAFKA_ADMIN_BOOTSTRAP_SERVERS": (None, "where that admin logs in; unset: the mode's brokers"),
    # the local cluster
    "COURSE_CLUSTER_HOME": (str(ROOT / ".cluster"), "the local cluster's folder (data, logs, secrets)"),
    "COURSE_PORT_BASE": (
        str(DEFAULT_PORT_BASE),
        "its first port: one cluster per user on a shared host "
        "(`up` writes it in the cluster's folder; later commands find it there)",
    ),
    "COURSE_BROKER_HEAP": (BROKER_HEAP, "each broker's heap; smaller for a small laptop"),
    "COURSE_OWN_CLUSTER_HOME": (str(ROOT / ".own-cluster"), "lab 7's clusters of one's own, to break"),
    "COURSE_OWN_CLUSTER": (None, "set by the grader: the own cluster a grading's code must use (JSON)"),
    "COURSE_SHARE_MEMBER_CLASSPATH": (
        None,
        "set by the grader: the classpath of cluster.share's Java share consumer, found outside the "
        "sandbox (finding it writes to the jar cache, which a grading's sandbox only reads)",
    ),
    "KAFKA_HOME": (None, "a Kafka installation whose libs/ replace the pinned jars"),
    "JAVA_HOME": (None, "the JDK (17+) to run; unset: `java` on the PATH"),
    "COURSE_JARS_CACHE": (None, "where downloaded jars are kept; unset: $XDG_CACHE_HOME/kafka-course"),
    "COURSE_POSTGRES_BIN": (None, "the folder of PostgreSQL's initdb and postgres (the CDC lab); unset: found"),
    "XDG_CACHE_HOME": (str(Path.home() / ".cache"), "the user's cache folder (freedesktop's convention)"),
    # Spark and grading
    "SPARK_MASTER": ("local[2]", "where Spark jobs run: two local threads, or spark://host:7077"),
    "COURSE_SPARK_UI": (
        "on",
        "Spark's web UI (port 4040 on); the grader sets off: gradings share the machine's "
        "network, and one's code must not reach another's UI",
    ),
    "COURSE_SANDBOX": (
        None,
        "how graded code is jailed: bwrap (namespaces) or user (an unprivileged user of its "
        "own: containers without namespaces, e.g. Gradescope); unset: bwrap, else user as root",
    ),
    "COURSE_GRADING_SECRET": (
        None,
        "the course's secret, from which each lab's seeds come (a lab's Gradescope package holds only its lab's); unset: the file .grading-secret",
    ),
    "COURSE_CGROUP_PARENT": (
        None,
        "cgroup v2: the group (a path under /sys/fs/cgroup, delegated to the grader) to "
        "make each grading's control group in; unset: the grader's own group, if it may write it",
    ),
    # the course's JupyterHub (hub/): read by the hub's own process, as root
    "COURSE_HUB_STUDENTS": (None, "the hub's roster: a file of the students' login names, one per line"),
    "COURSE_HUB_INSTRUCTORS": (None, "the instructors' login names, separated by commas"),
    "COURSE_HUB_ADMIN": (None, "a login that may also manage the hub (JupyterHub's admin page)"),
    "COURSE_MAX_PARTITIONS": (
        "3000",
        "partitions one shared cluster holds with a broker back within about a minute "
        "under a class's load (measured on 2 cores; measure a larger hub machine with "
        "`python -m bench --only load --students N`)",
    ),
    "COURSE_HUB_STATE": (
        "/srv/kafka-course-hub",
        "the hub's folder: the users' environment, their Jupyter "
        "settings per role, the jars; every user reads it, the hub's secrets are in private/",
    ),
    "COURSE_HUB_ENV": (None, "the users' Python environment (the student kit's); unset: env/ in the hub's folder"),
    "COURSE_HUB_COURSE": (str(ROOT), "the instructors' course folder (a checkout with solutions/, private to them)"),
    "COURSE_HUB_EXCHANGE": ("/srv/nbgrader/exchange", "nbgrader's exchange: releases, submissions, feedback"),
    "COURSE_HUB_URL": ("http://:8000", "where the hub listens"),
    "COURSE_HUB_SSL_CERT": (None, "the hub's TLS certificate (users send their passwords), with COURSE_HUB_SSL_KEY"),
    "COURSE_HUB_SSL_KEY": (None, "its private key"),
    "COURSE_HUB_SUBDOMAIN_HOST": (
        None,
        "per-user subdomains, e.g. https://hub.example.edu: each server an origin "
        "of its own, so the formgrader panel may be framed",
    ),
}


def env(name: str) -> str | None:
    """The value of one of ENVIRONMENT's variables (set but empty counts as unset), else its default."""
    default, _ = ENVIRONMENT[name]
    return os.environ.get(name) or default


def env_value(name: str) -> str:
    """env(name) of a variable that has a default, so never None."""
    value = env(name)
    if value is None:
        raise KeyError(f"{name} has no default in cluster/settings.py's ENVIRONMENT; use env({name!r})")
    return value


def env_path(name: str) -> Path:
    """A folder's variable (one with a default) as a Path."""
    return Path(env_value(name))


@cache
def pyproject() -> dict:
    """pyproject.toml, the one place of every pin. The kit runs from its checkout (an editable
    install, as `make` and the images do): the grader reads solutions/ and labs/ beside it too,
    so a wheel of the packages alone could not grade anyway."""
    try:
        with open(PYPROJECT, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{PYPROJECT} is missing: the kit runs from its checkout. Install it with "
            "`pip install -e .` (or `make install`) in the repository, not from a wheel."
        ) from None


def pins() -> dict:
    """The [tool.course] table of pyproject.toml: Maven coordinates and image tags."""
    return pyproject()["tool"]["course"]


def python_pins() -> dict[str, str]:
    """Python package -> pinned version, from [project.dependencies] and its optional groups."""
    project = pyproject()["project"]
    extras = [d for group in project.get("optional-dependencies", {}).values() for d in group]
    return dict(d.split("==", 1) for d in [*project["dependencies"], *extras])


def kafka_version() -> str:
    """The Kafka release the cluster runs (the version of the kafka_2.13 artifact)."""
    for coord in pins()["maven"]["kafka"]:
        group, artifact, version = coord.rstrip("!").split(":")
        if artifact.startswith("kafka_"):
            return version
    raise LookupError("pyproject.toml [tool.course.maven] kafka has no kafka_2.13 entry")


def jars_cache() -> Path:
    """Where jars are cached: shared by every checkout of the kit on this machine."""
    return Path(env("COURSE_JARS_CACHE") or env_path("XDG_CACHE_HOME") / "kafka-course")


def recorded_port_base(home: Path) -> int | None:
    """The port base written in <home>/cluster.json when the cluster there last started; None
    for a folder without one (a cluster that never started, or one made before it was kept)."""
    try:
        with open(home / STATE_FILE) as f:
            value = json.load(f).get("port_base")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Settings:
    """Where one local cluster lives and which ports it uses."""

    home: Path
    port_base: int = DEFAULT_PORT_BASE
    host: str = "127.0.0.1"
    heap: str = BROKER_HEAP
    # Broker settings that differ from the course's for this cluster (lab 7's own clusters)
    overrides: tuple[tuple[str, str], ...] = ()
    jvm_opts: tuple[str, ...] = ()  # JVM options added to BROKER_JVM_OPTS for this cluster
    # Each broker serves its metrics in Prometheus' format on its METRICS port (lab 14's own
    # clusters; cluster/jmx-exporter.yaml says which)
    metrics: bool = False

    @classmethod
    def from_env(cls) -> "Settings":
        """COURSE_CLUSTER_HOME and COURSE_PORT_BASE override the defaults (one cluster per
        user on a shared host: give each user their own port base). Without COURSE_PORT_BASE,
        the port base the cluster in that folder was started with (a new shell, a notebook's
        kernel and `make status` find a cluster that `COURSE_PORT_BASE=27092 make up` started)."""
        home = env_path("COURSE_CLUSTER_HOME").resolve()
        chosen = os.environ.get("COURSE_PORT_BASE") or recorded_port_base(home) or DEFAULT_PORT_BASE
        return cls(home=home, port_base=int(chosen), heap=env_value("COURSE_BROKER_HEAP"))

    def port(self, node: int, listener: str = "EXTERNAL") -> int:
        """A node's port of a listener (or of METRICS, the block after the listeners')."""
        block = len(LISTENERS) if listener == METRICS else LISTENERS.index(listener)
        return self.port_base + PORT_BLOCK * block + (node - 1)

    def listeners(self, node: int) -> tuple[str, ...]:
        """The listeners a node has: an added broker (not one of NODE_IDS) has no CONTROLLER."""
        return LISTENERS if node in NODE_IDS else tuple(n for n in LISTENERS if n != "CONTROLLER")

    def ports(self, node: int) -> dict[str, int]:
        """Every port a node listens on: its listeners', and its metrics page's (self.metrics)."""
        names = self.listeners(node) + ((METRICS,) if self.metrics else ())
        return {name: self.port(node, name) for name in names}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{self.port(n)}" for n in NODE_IDS)

    def node_dir(self, node: int) -> Path:
        return self.home / f"node-{node}"

    @property
    def internal_bootstrap_servers(self) -> str:
        """The INTERNAL listeners: where the course's admin tools log in."""
        return ",".join(f"{self.host}:{self.port(n, 'INTERNAL')}" for n in NODE_IDS)

    def broker_properties(self, node: int, broker_password: str, admin_password: str) -> dict[str, str]:
        """The server.properties of one node (passwords from cluster/accounts.py's Secrets)."""
        h = self.host
        voters = ",".join(f"{n}@{h}:{self.port(n, 'CONTROLLER')}" for n in NODE_IDS)
        props = {
            # NODE_IDS are brokers and the controllers' quorum; an added node (lab 14) is a broker
            # only, which finds the quorum by the same voters and registers with it
            "process.roles": "broker,controller" if node in NODE_IDS else "broker",
            "node.id": str(node),
            "controller.quorum.voters": voters,
            "listeners": ",".join(f"{name}://{h}:{self.port(node, name)}" for name in self.listeners(node)),
            "advertised.listeners": ",".join(
                f"{name}://{h}:{self.port(node, name)}" for name in ("EXTERNAL", "INTERNAL")
            ),
            "inter.broker.listener.name": "INTERNAL",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(self.node_dir(node) / "data"),
        }
        props.update(login_properties(broker_password, admin_password, f"{h}:{self.port(node, 'INTERNAL')}"))
        props.update(TEACHING_DEFAULTS)
        props.update(SAFETY_SETTINGS)
        props.update(RESOURCE_SETTINGS)
        props.update(self.overrides)
        return props
