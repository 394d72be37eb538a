"""A three-broker cluster of your own, to break (labs 7, 13, 14 and 15).

Lab 7 kills leaders, stops followers and takes the controllers' quorum away; lab 14 runs it as
an operator does (metrics, a broker more, partitions moved). That cannot happen on the course's
cluster, which others use (and your other labs' data lives on), so these labs start a second,
throwaway cluster: three more brokers on free ports, in a folder of their own, with your
namespace's login on it.

    from cluster.own import own_cluster
    own = own_cluster()             # started (about 15 s) or found running; gone with the kernel
    KafkaProducer(**own.connection)
    own.kill_broker(2)              # SIGKILL: a crash
    own.stop_broker(3)              # a clean shutdown: leaderships handed over first
    own.start_broker(2)             # back with its data, once the cluster lists it again
    own.show()                      # who is up, who is the active controller, who leads what

Each broker serves its metrics in Prometheus' text format (the JMX exporter's Java agent, the
rules of cluster/jmx-exporter.yaml); metrics() reads every running broker's page:

    m = own.metrics()                                   # a stopped broker is simply absent
    m.by_broker("kafka_broker_bytes_in_total")          # {1: 5120.0, 2: 0.0, 3: 88.0}
    m.value("kafka_under_replicated_partitions")        # summed over the brokers: 0.0 when healthy

The names (each broker's own view; counters end in _total, per second is the difference of two
scrapes over the seconds between them):
    kafka_broker_bytes_in_total, kafka_broker_bytes_out_total, kafka_broker_messages_in_total
        what clients wrote to and read from the broker, all topics (replication not counted);
        kafka_broker_bytes_in_per_second, kafka_broker_bytes_out_per_second: Kafka's one-minute rates
    kafka_topic_bytes_in_total, kafka_topic_bytes_out_total, kafka_topic_messages_in_total {topic}
    kafka_broker_replication_bytes_in_total   what it copied as a follower (a throttle limits it)
    kafka_request_total_time_ms {request: Produce|FetchConsumer|FetchFollower, quantile: 0.5|0.99}
    kafka_under_replicated_partitions, kafka_under_min_isr_partitions   of the partitions it leads
    kafka_partitions, kafka_leaders            replicas on it, and the partitions it leads
    kafka_isr_shrinks_total, kafka_isr_expands_total
    kafka_active_controller (1 on the active one), kafka_offline_partitions   nodes 1-3 only
    and the JVM's own (jvm_*, process_*).

Scaling out (lab 14): add_broker() starts broker 4, a broker only (nodes 1-3 stay the controllers'
quorum); it holds nothing until partitions are moved to it (kafka_cli("reassign-partitions", ...,
connection=own.connection)); remove_broker(4) takes it out again once they are moved off.

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
    """An own cluster: faster failure detection (FAULT_SETTINGS), throttles held over seconds
    (OPERATOR_SETTINGS), lighter JVMs (FAULT_JVM_OPTS),
    each broker's metrics page (Settings.metrics)."""
    return S.Settings(
        home=home,
        port_base=port_base,
        overrides=S.FAULT_SETTINGS + S.OPERATOR_SETTINGS,
        jvm_opts=S.FAULT_JVM_OPTS,
        metrics=True,
    )


def metrics_urls(cfg: S.Settings) -> dict[int, str]:
    """Each node's metrics page (the added broker's too, which answers once it runs)."""
    return {n: f"http://{cfg.host}:{cfg.port(n, S.METRICS)}/metrics" for n in range(1, S.OWN_NODES + 1)}


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
        cfg = own_settings(Path("/nonexistent"), base)
        nodes = range(1, S.OWN_NODES + 1)  # the added broker's too: it may come later
        if all(port_holder(cfg.host, port) is None for n in nodes for port in cfg.ports(n).values()):
            return base, fd
        os.close(fd)
    raise ClusterError(
        f"No free ports for a cluster of your own: all {len(S.OWN_PORT_BASES)} port blocks from "
        f"{S.OWN_PORT_BASES[0]} on are taken.",
        hint="Stop clusters you no longer need (an old kernel's: restart it), then try again; "
        "`ss -ltnp` shows which programs hold those ports.",
    )


SCRAPE_TIMEOUT_S = 2.0  # a broker that does not answer its metrics page within this is left out
# The names cluster/jmx-exporter.yaml makes (the module's docstring says what each is)
METRIC_NAMES = (
    "kafka_broker_bytes_in_total",
    "kafka_broker_bytes_in_per_second",
    "kafka_broker_bytes_out_total",
    "kafka_broker_bytes_out_per_second",
    "kafka_broker_messages_in_total",
    "kafka_broker_replication_bytes_in_total",
    "kafka_topic_bytes_in_total",
    "kafka_topic_bytes_out_total",
    "kafka_topic_messages_in_total",
    "kafka_request_total_time_ms",
    "kafka_under_replicated_partitions",
    "kafka_under_min_isr_partitions",
    "kafka_partitions",
    "kafka_leaders",
    "kafka_isr_shrinks_total",
    "kafka_isr_expands_total",
    "kafka_active_controller",
    "kafka_offline_partitions",
)


@dataclass(frozen=True)
class Sample:
    """One number of one broker's metrics page."""

    broker: int
    name: str  # as on the page: kafka_broker_bytes_in_total
    labels: dict[str, str]
    value: float


@dataclass
class Metrics:
    """What every running broker's metrics page said at one moment (own.metrics())."""

    samples: list[Sample]
    brokers: list[int]  # the brokers that answered (a stopped one is absent)
    at: float  # time.time() of the scrape: rates are differences over the seconds between two

    def _matching(self, name: str, broker: int | None, labels: dict[str, str]) -> list[Sample]:
        return [
            s
            for s in self.samples
            if s.name == name
            and (broker is None or s.broker == broker)
            and all(s.labels.get(k) == str(v) for k, v in labels.items())
        ]

    def value(self, name: str, broker: int | None = None, **labels) -> float:
        """The sum of the samples of this name (of one broker; with these labels): 0.0 if none."""
        return sum(s.value for s in self._matching(name, broker, labels))

    def by_broker(self, name: str, **labels) -> dict[int, float]:
        """{broker: its sum of this name (with these labels)}, for the brokers that report it."""
        out: dict[int, float] = {}
        for s in self._matching(name, None, labels):
            out[s.broker] = out.get(s.broker, 0.0) + s.value
        return dict(sorted(out.items()))

    def names(self) -> list[str]:
        return sorted({s.name for s in self.samples})

    def __repr__(self) -> str:
        return f"Metrics(brokers={self.brokers}, {len(self.samples)} samples, {len(self.names())} names)"


def parse_metrics(broker: int, text: str) -> list[Sample]:
    """A metrics page as samples (prometheus_client's parser of the text format)."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        Sample(broker, s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


@dataclass
class OwnCluster:
    """Your own cluster: how clients reach it and, where you run it, the verbs that break it."""

    bootstrap_servers: str
    account: accounts.Account
    cluster: Cluster | None = None  # the running cluster; None when the grader runs it
    throwaway: bool = False  # a grading's: deleted when the grading ends
    metrics_urls: dict[int, str] = field(default_factory=dict)  # each broker's metrics page
    _lock_fd: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.cluster is not None and not self.metrics_urls:
            self.metrics_urls = metrics_urls(self.cluster.cfg)

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

    # --- what it says about itself ----------------------------------------------------------
    def metrics_text(self, broker: int) -> str:
        """One broker's metrics page as it is (Prometheus' text format)."""
        import urllib.error
        import urllib.request

        url = self.metrics_urls.get(broker)
        if url is None:
            raise ClusterError(f"There is no broker {broker}; the brokers are {sorted(self.metrics_urls)}.")
        try:
            with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as page:
                return page.read().decode()
        except (urllib.error.URLError, OSError) as e:
            raise ClusterError(
                f"Broker {broker}'s metrics page ({url}) did not answer ({getattr(e, 'reason', e)}): is it running?",
                hint="own.show() says which brokers run; start_broker(n) starts one again.",
            ) from None

    def metrics(self) -> Metrics:
        """Every running broker's metrics, read at once (a stopped or frozen broker is absent):
        see the module's docstring for the names."""
        import concurrent.futures as cf
        import time

        def scrape(broker: int) -> list[Sample] | None:
            try:
                return parse_metrics(broker, self.metrics_text(broker))
            except ClusterError:
                return None

        at = time.time()
        with cf.ThreadPoolExecutor(len(self.metrics_urls) or 1) as pool:
            pages = dict(zip(self.metrics_urls, pool.map(scrape, self.metrics_urls)))
        answered = [b for b, page in pages.items() if page is not None]
        return Metrics([s for b in answered for s in pages[b] or []], answered, at)

    # --- an operator's rights and verbs (lab 14) ---------------------------------------------
    def allow_operations(self) -> None:
        """Let this login run the cluster as an operator: change brokers' settings (a replication
        throttle), move partitions, elect leaders, see the cluster, its settings and log dirs
        (accounts.allow_operations). On this throwaway cluster only; while a notebook is graded the
        grader has decided already, and this does nothing."""
        if self.cluster is None:
            return
        with self.cluster.admin() as admin:
            accounts.allow_operations(admin, self.account.username)

    def add_broker(self) -> int:
        """Start broker 4, a broker only (nodes 1-3 stay the controllers' quorum); returns its id
        once the cluster lists it. It leads and holds nothing until partitions move to it."""
        return self._broken_by_us().add_broker()

    def remove_broker(self, broker: int, force: bool = False) -> None:
        """Take an added broker out: refused while it holds replicas (move them off first), else
        stopped cleanly, unregistered, its folder deleted."""
        self._broken_by_us().remove_broker(broker, force=force)

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


def start(home: Path, namespace: str, echo=print, view: bool = False, operator: bool = False) -> OwnCluster:
    """Start a fresh own cluster in `home` (its old content is deleted) with a user for
    `namespace`; the caller owns it and calls down(). view: the user may also see the cluster
    as a whole (see _with_user); a grading's cluster is started without. operator: the user may
    also run it as an operator (OwnCluster.allow_operations: lab 14's gradings)."""
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
            if operator:
                own.allow_operations()
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
    pages = {int(b): url for b, url in where.get("metrics", {}).items()}
    account = accounts.Account(where["username"], where["password"])
    return OwnCluster(where["bootstrap_servers"], account, metrics_urls=pages)


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


def existing() -> OwnCluster:
    """The own cluster that runs already, to read: its connection, admin() and metrics(), for a
    script the notebook starts (lab 14's rolling restart). Nothing here starts or stops it; its
    brokers are stopped and started through cluster.broker_control."""
    found = attached()
    if found:
        return found
    servers, account = servers_and_account()
    cluster = running()
    assert cluster is not None  # servers_and_account found it
    return OwnCluster(servers, account, metrics_urls=metrics_urls(cluster.cfg))


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
