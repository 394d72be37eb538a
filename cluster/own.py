"""A three-broker cluster of your own, to break (lab 7).

Lab 7 kills leaders, stops followers and takes the controllers' quorum away. That cannot
happen on the course's cluster, which others use (and your other labs' data lives on), so
lab 7 starts a second, throwaway cluster: three more brokers on free ports, in a folder of
their own, with your namespace's login on it.

    from cluster.own import own_cluster
    own = own_cluster()             # started (about 15 s) or found running; gone with the kernel
    KafkaProducer(**own.connection)
    own.kill_broker(2)              # SIGKILL: a crash
    own.stop_broker(3)              # a clean shutdown: leaderships handed over first
    own.start_broker(2)             # back with its data, once the cluster lists it again
    own.show()                      # who is up, who is the active controller, who leads what

When a notebook is graded, the grader starts the cluster (outside the grading sandbox) and
tells the kernel where it is (COURSE_OWN_CLUSTER): the notebook's clients then connect to it,
and the verbs that break brokers are the grader's alone (the cells that use them are demos,
not run when grading).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import accounts
from . import settings as S
from .errors import ClusterError

if TYPE_CHECKING:
    from .brokers import Cluster

ENV = "COURSE_OWN_CLUSTER"  # set by the grader: {"bootstrap_servers", "username", "password"}
# One folder per user: on a shared machine (a hub) a folder made by one user would lock the
# others out. Two users racing for the same block still meet the port check below.
LOCKS = Path(tempfile.gettempdir()) / f"kafka-course-own-ports-{os.getuid()}"


def own_settings(home: Path, port_base: int) -> S.Settings:
    """An own cluster: faster failure detection (FAULT_SETTINGS), lighter JVMs (FAULT_JVM_OPTS)."""
    return S.Settings(home=home, port_base=port_base, overrides=S.FAULT_SETTINGS, jvm_opts=S.FAULT_JVM_OPTS)


def own_home() -> Path:
    """Where a student's own cluster lives (COURSE_OWN_CLUSTER_HOME overrides)."""
    return S.env_path("COURSE_OWN_CLUSTER_HOME").resolve()


def _lock_free_port_base() -> tuple[int, int]:
    """A port base of S.OWN_PORT_BASES whose ports are free, locked (an open file descriptor
    with an flock) so that two gradings starting at once never take the same one."""
    from .brokers import port_holder

    LOCKS.mkdir(mode=0o700, exist_ok=True)
    if LOCKS.lstat().st_uid != os.getuid() or not LOCKS.is_dir():
        raise ClusterError(
            f"{LOCKS} is not a folder of yours: another user made it.", hint=f"Ask your course admin to remove {LOCKS}."
        )
    for base in random.sample(S.OWN_PORT_BASES, len(S.OWN_PORT_BASES)):
        fd = os.open(LOCKS / f"{base}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        cfg = S.Settings(home=Path("/nonexistent"), port_base=base)
        if all(port_holder(cfg.host, port) is None for n in S.NODE_IDS for port in cfg.ports(n).values()):
            return base, fd
        os.close(fd)
    raise ClusterError(
        f"No free ports for a cluster of your own: all {len(S.OWN_PORT_BASES)} port blocks from "
        f"{S.OWN_PORT_BASES[0]} on are taken.",
        hint="Stop clusters you no longer need (an old kernel's: restart it), then try again.",
    )


@dataclass
class OwnCluster:
    """Your own cluster: how clients reach it and, where you run it, the verbs that break it."""

    bootstrap_servers: str
    account: accounts.Account
    cluster: Cluster | None = None  # the running cluster; None when the grader runs it
    throwaway: bool = False  # a grading's: deleted when the grading ends
    _lock_fd: int | None = field(default=None, repr=False)

    @property
    def connection(self) -> dict:
        """What every client needs: KafkaProducer(**own.connection)."""
        return {"bootstrap_servers": self.bootstrap_servers, **self.account.kafka_python()}

    def admin(self, **overrides):
        """An admin client with your login (your topics, the brokers; on a cluster you run, the
        controllers' quorum too)."""
        from .clients import admin_client

        return admin_client("own-cluster", self.connection, **{"request_timeout_ms": 10_000, **overrides})

    def address(self, broker: int) -> str:
        """host:port of one broker (a client that must talk to that one only)."""
        return f"{self._broken_by_us().cfg.host}:{self._broken_by_us().cfg.port(broker)}"

    # --- the verbs that break it --------------------------------------------------------------
    def _broken_by_us(self):
        if self.cluster is None:
            raise ClusterError(
                "This cluster is the grader's: while a notebook is graded, only the grader stops or kills its brokers.",
                hint="Cells that break brokers are demos; they run on your own machine, not during grading.",
            )
        return self.cluster

    def kill_broker(self, broker: int) -> None:
        """SIGKILL one broker: no clean shutdown, as in a crash or a power cut."""
        self._broken_by_us().kill_broker(broker)

    def stop_broker(self, broker: int) -> None:
        """Stop one broker cleanly: it hands its leaderships over before it goes."""
        self._broken_by_us().stop_broker(broker)

    def start_broker(self, broker: int) -> None:
        """Start one broker with its data; returns when the cluster lists it again."""
        self._broken_by_us().start_broker(broker)

    def pause_broker(self, broker: int) -> None:
        """Freeze one broker (SIGSTOP): alive to the others but answering nobody, as a broker in a
        long garbage-collection pause. Its followers fetch nothing meanwhile."""
        process = self._broken_by_us().nodes[broker].process()
        if process is not None:
            process.suspend()

    def resume_broker(self, broker: int) -> None:
        """Let a paused broker go on (SIGCONT)."""
        process = self._broken_by_us().nodes[broker].process()
        if process is not None:
            process.resume()

    def start_brokers(self, *brokers: int) -> None:
        """Start several at once (two of three brokers down: neither comes back alone, as the
        controllers' quorum needs two voters)."""
        from . import java, jars

        cluster = self._broken_by_us()
        for b in brokers:
            node = cluster.nodes[b]
            if node.process() is None:
                node.start(java.java_executable(), jars.broker_classpath())
        for b in brokers:
            cluster.start_broker(b)

    def status(self) -> list:
        return self._broken_by_us().status()

    def show(self) -> None:
        """A table of the nodes: state, the controllers' quorum, partition leaders."""
        from .brokers import STATUS_HEADER

        rows = [STATUS_HEADER] + [r.row() for r in self.status()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(STATUS_HEADER))]
        for r in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)))

    def down(self) -> None:
        """Stop the brokers and delete the cluster's folder (it was throwaway)."""
        if self.cluster is not None:
            self.cluster.down(wipe=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def start(home: Path, namespace: str, echo=print, view: bool = False) -> OwnCluster:
    """Start a fresh own cluster in `home` (its old content is deleted) with a user for
    `namespace`; the caller owns it and calls down(). view: the user may also see the cluster
    as a whole (see _with_user); a grading's cluster is started without."""
    from .brokers import Cluster

    base, fd = _lock_free_port_base()
    try:
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        (home / "own.json").write_text(json.dumps({"port_base": base}))
        cluster = Cluster(own_settings(home, base))
        try:
            cluster.up(echo=echo)
            own = _with_user(cluster, namespace, view=view)
        except BaseException:  # no broker outlives a start that failed half-way
            cluster.down(wipe=True)
            raise
    except BaseException:
        os.close(fd)
        raise
    own._lock_fd = fd
    return own


def _with_user(cluster, namespace: str, view: bool) -> OwnCluster:
    """The namespace's login on the cluster: its namespace's topics, groups and transactional ids
    (accounts.grant), as on the course's cluster. Nothing cluster-wide on a grading's cluster:
    its graded cells and the student's scripts the checks run need none (the checks ask as its admin),
    and Kafka's one cluster-level DESCRIBE would also list every user and every ACL. view=True on
    a cluster the student runs: lab 7's demonstrations read the controllers' quorum with the
    student's login (DescribeQuorum needs that DESCRIBE), and there the student holds the
    cluster's admin password anyway (secrets.json in its folder), so it hides nothing."""
    account = cluster.add_student(namespace)
    if view:
        with cluster.admin() as admin:
            accounts.allow_cluster_view(admin, account.username)
    return OwnCluster(cluster.cfg.bootstrap_servers, account, cluster)


def running(home: Path | None = None):
    """The cluster.brokers.Cluster of a student's own cluster that runs in `home` (some of its
    brokers may be stopped: that is what the lab does to it), else None."""
    from .brokers import Cluster

    home = home or own_home()
    try:
        base = json.loads((home / "own.json").read_text())["port_base"]
    except (OSError, ValueError, KeyError):
        return None
    cluster = Cluster(own_settings(home, base))
    return cluster if any(node.process() for node in cluster.nodes.values()) else None


def attached() -> OwnCluster | None:
    """The grader's cluster, when the grader said where it is (COURSE_OWN_CLUSTER)."""
    raw = S.env(ENV)
    if not raw:
        return None
    where = json.loads(raw)
    return OwnCluster(where["bootstrap_servers"], accounts.Account(where["username"], where["password"]))


def own_cluster(namespace: str | None = None) -> OwnCluster:
    """Your own cluster: the grader's while grading; else the one running in own_home(), or a
    new one (about 15 s), stopped and deleted when this Python process ends."""
    from .clients import namespace as default_namespace

    found = attached()
    if found:
        return found
    ns = namespace or default_namespace()
    if ns in _mine:  # this kernel's, again (a self-check, a cell run twice)
        return _mine[ns]
    cluster = running()
    if cluster is not None and cluster.is_running():  # an earlier kernel's, whole: kept
        own = _with_user(cluster, ns, view=True)
    else:  # none, or one left half-broken by an interrupted demo: its data was throwaway
        if cluster is not None:
            cluster.down(wipe=True)
        own = start(own_home(), ns, view=True)
    atexit.register(own.down)
    _mine[ns] = own
    return own


_mine: dict[str, OwnCluster] = {}


def servers_and_account() -> tuple[str, accounts.Account]:
    """Where the own cluster that runs already is, and your login on it."""
    found = attached()
    if found:
        return found.bootstrap_servers, found.account
    cluster = running()
    if cluster is None:
        raise ClusterError(
            f"No cluster of your own runs in {own_home()}.",
            hint="Run the notebook's first cell (it starts the cluster), then this again.",
        )
    from .clients import namespace

    account = cluster.secrets.student(namespace())
    if account is None:
        raise ClusterError(
            "Your own cluster has no login for this namespace yet.", hint="Run the notebook's first cell again."
        )
    return cluster.cfg.bootstrap_servers, account


def connection() -> dict:
    """The client settings of the own cluster that runs already (for scripts a notebook starts:
    they use it, they never start or stop it)."""
    servers, account = servers_and_account()
    return {"bootstrap_servers": servers, **account.kafka_python()}


def librdkafka_connection() -> dict:
    """The same for confluent-kafka (librdkafka) and quixstreams:
    streams_app("board", connection=librdkafka_connection())."""
    servers, account = servers_and_account()
    return {"bootstrap.servers": servers, **account.librdkafka()}
