"""The local three-node Kafka cluster as one object with a few verbs.

from cluster import Cluster
c = Cluster()
c.up()                      # returns when the cluster works: 3 brokers, an RF-3 topic made
c.status()                  # one NodeStatus per node
c.kill_broker(2)            # SIGKILL, as in a power cut
c.start_broker(2)           # back with its data; returns when it is in the metadata again
with c.stopped(broker=3):   # a broker down for the length of a block
    ...
c.down(wipe=False)
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import shutil
import socket
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import psutil

from . import accounts, class_sharing, java, jars
from . import settings as S
from .accounts import Account, Secrets
from .errors import ClusterError
from .kafka_python_fix import ask
from .process import Node
from .waiting import wait_for

logger = logging.getLogger(__name__)
READY_TOPIC = "course-ready-check"
PROBE_USER = "course-probe"  # a SCRAM user of the course's own: can students log in?
POLL_S = 0.25  # how often a bounded wait looks again
# kafka-python's names for a login the broker answered and refused (not a timeout or an
# unknown broker: a broker still starting, which writing the passwords again cannot help)
AUTH_REFUSALS = ("SaslAuthenticationFailedError", "IllegalSaslStateError", "UnsupportedSaslMechanismError")
REWRITE_AFTER_S = 10  # refused for the password this long: write the users again

WIPE_HINT = (
    "If you do not need the data, start afresh with `python -m cluster down --wipe` "
    "(or `make down` then delete {home}), then `python -m cluster up`."
)
# Words in a broker's log that mean its data folder, not its configuration, is the problem.
DATA_PROBLEMS = (
    "meta.properties",
    "Invalid cluster.id",
    "CorruptRecordException",
    "InconsistentClusterIdException",
    "has not been formatted",
    "directory.id",
)


@dataclass
class Rejoin:
    """Where a broker's start went (seconds from the start): listed by the cluster, then students'
    logins working on it; the login refusals seen meanwhile, by kind; whether the users' passwords
    had to be written again."""

    listed_s: float = 0.0
    logins_s: float = 0.0
    refused: Counter[str] = field(default_factory=Counter)
    users_rewritten: bool = False


@dataclass
class NodeStatus:
    id: int
    state: str  # "alive", "stopped" or "dead" (killed or crashed)
    pid: int | None
    ports: dict[str, int]
    active_controller: bool | None = None
    leaders: int | None = None  # partition leaders this broker holds
    rss_mb: float = 0.0

    def row(self) -> list[str]:
        role = {True: "active", False: "follower", None: "-"}[self.active_controller]
        return [
            str(self.id),
            self.state,
            str(self.pid or "-"),
            str(self.ports["EXTERNAL"]),
            str(self.ports["INTERNAL"]),
            str(self.ports.get("CONTROLLER", "-")),  # an added broker (lab 14) is no controller
            role if self.state == "alive" else "-",
            "-" if self.leaders is None else str(self.leaders),
            f"{self.rss_mb:.0f}" if self.rss_mb else "-",
        ]


STATUS_HEADER = ["node", "state", "pid", "client", "internal", "controller", "quorum", "leaders", "rss MB"]


class _Kept(logging.Handler):
    """The errors kafka-python logged (and did not raise: its bootstrap retries a refused login
    until its timeout, then raises KafkaTimeoutError with no word of why)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.errors: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.errors.extend(a for a in (record.args or ()) if isinstance(a, BaseException))


@contextlib.contextmanager
def _quiet_kafka_logs():
    """kafka-python logs every refused connection; while we wait for brokers, that is noise.
    Yields the errors it logged meanwhile (_Kept)."""
    kafka_logger = logging.getLogger("kafka")
    old, propagate, kept = kafka_logger.level, kafka_logger.propagate, _Kept()
    # a logging.config.dictConfig elsewhere in the process (Jupyter's, JupyterHub's) disables
    # every logger it does not name, kafka-python's included: their records would never come
    family = [
        logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict)
        if name == "kafka" or name.startswith("kafka.")
    ]
    disabled = [lg.disabled for lg in family]
    for lg in family:
        lg.disabled = False
    kafka_logger.setLevel(logging.WARNING)
    kafka_logger.propagate = False
    kafka_logger.addHandler(kept)
    try:
        yield kept
    finally:
        kafka_logger.removeHandler(kept)
        kafka_logger.setLevel(old)
        kafka_logger.propagate = propagate
        for lg, was in zip(family, disabled):
            lg.disabled = was


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64 (as `kafka-storage random-uuid`)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def port_holder(host: str, port: int) -> str | None:
    """None if we can listen on host:port; otherwise who holds it, as well as we can tell."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM does
        try:
            s.bind((host, port))
            return None
        except OSError:
            pass
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                proc = psutil.Process(conn.pid)
                return f"pid {conn.pid} ({' '.join(proc.cmdline()[:3])[:80]})"
    except (psutil.Error, PermissionError):
        pass
    return f"another process (run `lsof -i :{port}` or `ss -ltnp` to see which)"


def live_brokers(admin) -> set[int]:
    """Ids of the brokers the cluster lists as alive (registered and not fenced)."""
    return {b["broker_id"] for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")}


class Cluster:
    def __init__(self, cfg: S.Settings | None = None):
        self.cfg = cfg or S.Settings.from_env()
        self.nodes = {n: Node(self.cfg, n) for n in S.NODE_IDS}
        added = Node(self.cfg, S.ADDED_BROKER)
        if added.config_file.exists():  # a broker added to the three (lab 14's add_broker), until removed
            self.nodes[added.id] = added
        self.state_file = self.cfg.home / S.STATE_FILE
        self.secrets = Secrets(self.cfg.home)

    @property
    def bootstrap_servers(self) -> str:
        return self.cfg.bootstrap_servers

    # --- up --------------------------------------------------------------------------------
    def up(self, timeout: float = S.READY_TIMEOUT_S, echo=print) -> str:
        """Start whatever nodes are not running and return the bootstrap servers once the
        cluster works. On a running cluster it only checks that it works."""
        to_start = [n for n in self.nodes.values() if n.process() is None]
        self._check_port_base(running=len(to_start) < len(self.nodes))
        if not to_start:
            self.wait_ready(timeout, started=[])
            self.set_up_access()
            return self.bootstrap_servers
        java_bin = java.java_executable()
        self._check_ports(to_start)
        cluster_id = self._check_data()
        self._record_port_base()
        self.secrets.ensure()  # new passwords for a cluster that has none (made before logins existed)
        classpath = jars.broker_classpath()
        for node in self.nodes.values():
            node.write_config(self.secrets)
        unformatted = [n for n in to_start if n.meta_properties() is None]
        self._format(unformatted, java_bin, classpath, cluster_id)
        echo(
            f"Starting node{'s' if len(to_start) > 1 else ''} "
            f"{', '.join(str(n.id) for n in to_start)} (Kafka {S.kafka_version()}) in {self.cfg.home}"
        )
        began = time.monotonic()
        for node in to_start:
            node.start(java_bin, classpath)
            logger.info("node %d started (pid %s), ports %s", node.id, node.pid, self.cfg.ports(node.id))
        self.wait_ready(timeout, started=to_start)
        logger.info("cluster in %s ready (it works) after %.1f s", self.cfg.home, time.monotonic() - began)
        self.set_up_access()
        return self.bootstrap_servers

    # --- who may do what ---------------------------------------------------------------------
    def set_up_access(self) -> None:
        """Default quotas, and the users of the namespaces this cluster has seen (idempotent:
        a cluster whose data was kept has them already)."""
        self.secrets.student(PROBE_USER, create=True)  # the user readiness checks log in as
        with self.admin() as admin:
            accounts.setup_cluster(admin)
            for ns, password in self.secrets.ensure().get("students", {}).items():
                accounts.grant(admin, Account(ns, password), ns)

    def add_student(self, namespace: str) -> Account:
        """A user for a namespace on this cluster (the laptop's default student, a test), its
        password kept in the secrets file."""
        account = self.secrets.student(namespace, create=True)
        assert account is not None  # create=True: made if missing
        with self.admin() as admin:
            accounts.grant(admin, account, namespace)
        return account

    def _check_ports(self, nodes: list[Node]) -> None:
        for node in nodes:
            for name, port in self.cfg.ports(node.id).items():
                holder = port_holder(self.cfg.host, port)
                if holder:
                    raise ClusterError(
                        f"Port {port} ({name} listener of node {node.id}) is already in use by {holder}. "
                        "Nothing was started.",
                        hint="Stop that program, or run this cluster on other ports: "
                        f"COURSE_PORT_BASE=19092 python -m cluster up (ports {S.PORT_BLOCK} apart "
                        "from the base are used for each listener).",
                    )

    def _check_port_base(self, running: bool) -> None:
        """A cluster with nodes running stays on its ports: an `up` that names others is refused
        (it would wait for brokers that are not there, or start a second set on the same data)."""
        recorded = S.recorded_port_base(self.cfg.home)
        if running and recorded is not None and recorded != self.cfg.port_base:
            raise ClusterError(
                f"The cluster in {self.cfg.home} is running on ports from {recorded}, not {self.cfg.port_base}. "
                "Nothing was started.",
                hint=f"Leave COURSE_PORT_BASE unset (every command finds the cluster's ports in its folder), or "
                f"set it to {recorded}; to move the cluster to other ports, stop it first (make down / "
                "python -m cluster down), then start it with the new COURSE_PORT_BASE.",
            )

    def _record_port_base(self) -> None:
        """Write the ports this start uses into cluster.json, where Settings.from_env finds them."""
        state = json.loads(self.state_file.read_text())
        if state.get("port_base") != self.cfg.port_base:
            state["port_base"] = self.cfg.port_base
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(state, indent=2))
            tmp.replace(self.state_file)

    def _check_data(self) -> str:
        """The cluster id to use; a ClusterError if the data folder is stale or corrupt."""
        home = self.cfg.home
        hint = WIPE_HINT.format(home=home)
        if self.state_file.exists():
            try:
                cluster_id = json.loads(self.state_file.read_text())["cluster_id"]
            except (ValueError, KeyError) as e:
                raise ClusterError(f"{self.state_file} is unreadable ({e}).", hint=hint) from e
        else:
            leftovers = [n for n in self.nodes.values() if n.data_dir.exists() and any(n.data_dir.iterdir())]
            if leftovers:
                raise ClusterError(
                    f"{leftovers[0].data_dir} holds data, but {self.state_file} that names its cluster "
                    "is missing: a stale or half-deleted cluster folder.",
                    hint=hint,
                )
            cluster_id = new_cluster_id()
            home.mkdir(parents=True, exist_ok=True)
            home.chmod(0o700)  # brokers' data and the course's passwords: nobody else's to read
            self.state_file.write_text(
                json.dumps({"cluster_id": cluster_id, "kafka_version": S.kafka_version()}, indent=2)
            )
        for node in self.nodes.values():
            meta = node.meta_properties()
            if meta is None:
                if node.data_dir.exists() and any(p.name != "bootstrap.checkpoint" for p in node.data_dir.iterdir()):
                    raise ClusterError(
                        f"{node.data_dir} holds data but no meta.properties: the folder is corrupt.", hint=hint
                    )
                continue
            if meta.get("cluster.id") != cluster_id or meta.get("node.id") != str(node.id):
                raise ClusterError(
                    f"{node.data_dir} belongs to another cluster (cluster.id={meta.get('cluster.id')}, "
                    f"node.id={meta.get('node.id')}; expected {cluster_id}, node {node.id}).",
                    hint=hint,
                )
        return cluster_id

    def _format(self, nodes: list[Node], java_bin: str, classpath, cluster_id: str) -> None:
        """Format new data folders with Kafka's storage tool, in parallel (one JVM each)."""
        import concurrent.futures as cf

        if not nodes:
            return
        with cf.ThreadPoolExecutor(len(nodes)) as pool:
            results = list(pool.map(lambda n: n.format_storage(java_bin, classpath, cluster_id), nodes))
        for node, res in zip(nodes, results):
            if res.returncode != 0:
                raise ClusterError(
                    f"Formatting the data folder of node {node.id} failed (exit {res.returncode}).",
                    log_tail=(res.stdout + res.stderr).strip()[-3000:],
                    hint=WIPE_HINT.format(home=self.cfg.home),
                )

    # --- readiness ---------------------------------------------------------------------------
    def admin_connection(self) -> dict:
        """kafka-python settings of the course's admin (a super user) on the INTERNAL listeners."""
        return {"bootstrap_servers": self.cfg.internal_bootstrap_servers, **self.secrets.admin().kafka_python()}

    def admin(self, **overrides):
        """A kafka-python admin client for this cluster, logged in as the course's admin."""
        return accounts.admin_client_for(
            "course-cluster", self.admin_connection(), **{"request_timeout_ms": 10_000, **overrides}
        )

    def _poll(self, probe, watch: list[Node], timeout: float) -> tuple[bool, object]:
        """Call probe(admin) -> (done, what) until done or the deadline; fail fast if a node in
        `watch` exits. Returns (done, the last thing seen) for the caller's message."""
        client: list = []  # the admin client of the tries so far, if it still works

        def ask() -> tuple[bool, object]:
            self._fail_if_exited(watch)
            try:
                if not client:
                    client.append(self.admin())
                return probe(client[0])
            except Exception as e:  # not up yet: connection refused, timeouts, ...
                # A fresh client next time: kafka-python's admin keeps sending to the
                # controller it first heard of (UnknownBrokerIdError while that one starts).
                while client:
                    client.pop().close()
                return False, e

        with _quiet_kafka_logs():
            try:
                waited = wait_for(ask, timeout_s=timeout, until=lambda answer: answer[0], every_s=POLL_S)
            finally:
                while client:
                    client.pop().close()
        return waited.done, waited.last[1]

    def wait_ready(
        self, timeout: float = S.READY_TIMEOUT_S, started: list[Node] | None = None, fail_fast: bool = True
    ) -> None:
        """Return when the cluster works: all three brokers are in the metadata and a topic
        with replication factor 3 can be created with all replicas in sync, and each node in
        `started` (default: all) takes students' logins. Fails fast, with the log's tail, if a
        node in `started` exits; with fail_fast=False a node that is down is waited for (someone
        else starts it again) until the deadline."""
        started = list(self.nodes.values()) if started is None else started
        ok, last_error = self._poll(self._works, started if fail_fast else [], timeout)
        if ok:
            for node in started:
                self._wait_logins(node, timeout)
            return
        dead = [n for n in self.nodes.values() if n.process() is None]
        down = (
            f"Node{'s' if len(dead) > 1 else ''} {', '.join(str(n.id) for n in dead)} "
            f"not running: `python -m cluster up` starts {'them' if len(dead) > 1 else 'it'} again. "
            if dead
            else ""
        )
        raise ClusterError(
            f"The cluster did not become ready within {timeout:.0f} s (last: {last_error}).",
            log_tail="\n".join(f"--- node {n.id} ---\n{n.log_tail(10)}" for n in (dead or started)[:3]),
            hint=down + "See `python -m cluster status` and `python -m cluster logs`. On a slow or busy "
            "machine, close other programs and try again.",
        )

    def _fail_if_exited(self, started: list[Node]) -> None:
        for node in started:
            if node.process() is None:
                tail = node.log_tail(30)
                data_problem = any(word in tail for word in DATA_PROBLEMS)
                hint = (
                    WIPE_HINT.format(home=self.cfg.home)
                    if data_problem
                    else f"Read the whole log with `python -m cluster logs {node.id}`. "
                    "Low memory? Close other programs; each broker needs about 400 MB."
                )
                raise ClusterError(f"Node {node.id} exited during start-up.", log_tail=tail, hint=hint)

    def _works(self, admin) -> tuple[bool, str]:
        from kafka.errors import TopicAlreadyExistsError

        brokers = live_brokers(admin)
        if brokers != set(self.nodes):
            return False, f"brokers in metadata: {sorted(brokers)}"
        try:
            admin.create_topics({READY_TOPIC: {"num_partitions": 1, "replication_factor": 3}})
        except TopicAlreadyExistsError:
            pass
        topic = admin.describe_topics([READY_TOPIC])[0]
        parts = topic.get("partitions") or []
        if topic.get("error_code", 0) or not parts or len(parts[0].get("isr_nodes", [])) != 3:
            return False, f"{READY_TOPIC} not fully replicated yet"
        admin.delete_topics([READY_TOPIC])
        return True, ""

    # --- status ------------------------------------------------------------------------------
    def status(self) -> list[NodeStatus]:
        rows = []
        for node in self.nodes.values():
            proc = node.process()
            state = "alive" if proc else ("dead" if node.was_killed() else "stopped")
            rows.append(
                NodeStatus(
                    node.id, state, proc.pid if proc else None, self.cfg.ports(node.id), rss_mb=node.rss_bytes() / 2**20
                )
            )
        if any(r.state == "alive" for r in rows):
            self._add_cluster_view(rows)
        return rows

    def _add_cluster_view(self, rows: list[NodeStatus]) -> None:
        """Ask the cluster itself who is the active controller and who leads what."""
        with _quiet_kafka_logs():
            try:
                admin = self.admin(request_timeout_ms=5000)
            except Exception:
                return
            try:
                leader = admin.describe_metadata_quorum().get("topics", [{}])[0]["partitions"][0]["leader_id"]
                counts = dict.fromkeys(self.nodes, 0)
                for t in admin.describe_topics():
                    for p in t.get("partitions", []):
                        if p.get("leader_id") in counts:
                            counts[p["leader_id"]] += 1
                for r in rows:
                    r.active_controller = r.id == leader if r.id in S.NODE_IDS else None
                    r.leaders = counts[r.id]
            except Exception:
                pass
            finally:
                admin.close()

    def is_running(self) -> bool:
        return all(n.process() for n in self.nodes.values())

    # --- faults --------------------------------------------------------------------------------
    def _node(self, broker: int) -> Node:
        if broker not in self.nodes:
            hint = (
                f"add_broker() adds broker {S.ADDED_BROKER} to a cluster of your own."
                if broker == S.ADDED_BROKER
                else ""
            )
            raise ClusterError(f"There is no broker {broker}; the brokers are {list(self.nodes)}.", hint=hint)
        return self.nodes[broker]

    def stop_broker(self, broker: int) -> bool:
        """Clean shutdown of one broker (it hands over its leaderships first)."""
        return self._node(broker).stop()

    def kill_broker(self, broker: int) -> None:
        """SIGKILL one broker: no clean shutdown, as in a crash."""
        self._node(broker).kill()

    def start_broker(self, broker: int, timeout: float = S.BROKER_REJOIN_TIMEOUT_S) -> Rejoin:
        """Start one broker with its data; return when the cluster lists it again and students'
        logins work on it, with where the wait went."""
        node = self._node(broker)
        t = time.monotonic()
        if node.process() is None:
            if not node.config_file.exists():
                raise ClusterError(f"Node {broker} has never been set up.", hint="Run `python -m cluster up` first.")
            self._check_ports([node])
            node.start(java.java_executable(), jars.broker_classpath())
        self._wait_in_metadata(node, timeout)
        listed_s = time.monotonic() - t
        rejoin = Rejoin(listed_s=listed_s)
        self._wait_logins(node, timeout, rejoin)
        rejoin.logins_s = time.monotonic() - t
        return rejoin

    # --- a broker more, and one less (lab 14) --------------------------------------------------
    def add_broker(self, timeout: float = S.BROKER_REJOIN_TIMEOUT_S) -> int:
        """Start node ADDED_BROKER as a broker only (the three nodes stay the controllers' quorum);
        return its id once the cluster lists it and students' logins work on it. It holds no
        partition until some are moved to it. Already added and running: only waits for it."""
        node = self.nodes.get(S.ADDED_BROKER) or Node(self.cfg, S.ADDED_BROKER)
        if node.process() is None:
            self._check_ports([node])
            java_bin, classpath = java.java_executable(), jars.broker_classpath()
            node.write_config(self.secrets)
            if node.meta_properties() is None:  # same cluster id; it registers with the quorum as it starts
                cluster_id = json.loads(self.state_file.read_text())["cluster_id"]
                self._format([node], java_bin, classpath, cluster_id)
            self.nodes[node.id] = node
            node.start(java_bin, classpath)
        self.nodes[node.id] = node
        self._wait_in_metadata(node, timeout)
        self._wait_logins(node, timeout)
        return node.id

    def replicas_on(self, broker: int) -> list[str]:
        """The partitions ("topic-p") with a replica on this broker, internal topics included."""
        with _quiet_kafka_logs(), self.admin() as admin:
            return [
                f"{t['name']}-{p['partition_index']}"
                for t in admin.describe_topics()
                for p in t.get("partitions", [])
                if broker in p.get("replica_nodes", [])
            ]

    def remove_broker(self, broker: int, force: bool = False) -> None:
        """Take an added broker out for good: refused while it holds replicas (they would stay
        under-replicated; force=True removes it all the same); else stopped cleanly, unregistered
        from the cluster (KRaft keeps a stopped broker's registration, fenced, until told), its
        folder deleted."""
        from .tools import kafka_cli

        if broker in S.NODE_IDS:
            raise ClusterError(
                f"Broker {broker} is one of the controllers' quorum ({', '.join(map(str, S.NODE_IDS))}): it cannot be removed.",
                hint=f"stop_broker({broker}) stops it for a while; only an added broker ({S.ADDED_BROKER}) can be removed.",
            )
        node = self._node(broker)
        held = [] if force else self.replicas_on(broker)
        if held:
            raise ClusterError(
                f"Broker {broker} still holds replicas of {len(held)} partition{'s' if len(held) > 1 else ''} "
                f"({', '.join(held[:5])}{', ...' if len(held) > 5 else ''}): without it they would stay under-replicated.",
                hint="Move them off first (kafka-reassign-partitions --execute, then --verify until it is complete), "
                f"then remove it; remove_broker({broker}, force=True) removes it all the same.",
            )
        node.stop()
        kafka_cli("cluster", "unregister", "--id", str(broker), connection=self.admin_connection(), echo=False)
        del self.nodes[broker]
        shutil.rmtree(node.dir, ignore_errors=True)

    def _wait_in_metadata(self, node: Node, timeout: float) -> None:
        def listed(admin):
            live = live_brokers(admin)
            return node.id in live, f"live brokers {sorted(live)}"

        ok, last = self._poll(listed, [node], timeout)
        if not ok:
            raise ClusterError(
                f"Broker {node.id} did not rejoin within {timeout:.0f} s (last: {last}).", log_tail=node.log_tail(20)
            )

    def _wait_logins(self, node: Node, timeout: float, rejoin: Rejoin | None = None) -> None:
        """Ready means working for students too: a broker back from a crash is listed before it
        accepts SCRAM logins again (seen for 10 s and more after a SIGKILL). Wait until the
        course's probe user logs in on its EXTERNAL listener; if the broker keeps refusing the
        password itself, write the users' passwords again (the brokers then learn them afresh)
        and keep waiting. A broker that times out or is not yet known is still starting (a
        class's broker reopens thousands of logs, then catches up their replicas): writing every
        user of a class then only costs the controller time (the load bench saw 26 refusals
        after a SIGKILL, none for the password). `rejoin`, if given, records the refusals seen
        and whether the users were written again."""
        from kafka.errors import KafkaError

        probe = self.secrets.student(PROBE_USER)
        if probe is None:
            return
        deadline, repaired = time.monotonic() + timeout, False
        refused_since = None  # since when the broker answers and refuses the password
        while (refused := self._login_refused(node, probe)) is not None:
            logger.debug("broker %s: the probe's login failed: %s", node.id, refused)
            if rejoin is not None:
                rejoin.refused[refused.split(":")[0]] += 1
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"Broker {node.id} is back but refuses students' logins after {timeout:.0f} s (last: {refused}).",
                    log_tail=node.log_tail(20),
                    hint=f"Restart it: `python -m cluster stop-broker {node.id}` then `start-broker {node.id}`.",
                )
            if not refused.startswith(AUTH_REFUSALS):
                refused_since = None
            elif refused_since is None:
                refused_since = time.monotonic()
            if not repaired and refused_since is not None and time.monotonic() - refused_since > REWRITE_AFTER_S:
                try:
                    self.set_up_access()
                    repaired = True
                    if rejoin is not None:
                        rejoin.users_rewritten = True
                except (KafkaError, RuntimeError) as e:  # a broker still reopening thousands of logs (a
                    # class's cluster): it cannot learn the rights yet; try again later
                    logger.info("writing the users again failed (%s); trying again", e)
                    refused_since = time.monotonic()
            time.sleep(POLL_S)

    def _login_refused(self, node: Node, account: Account, timeout_ms: int = 3000) -> str | None:
        """None if `account` logs in on `node` and gets an answer; else what went wrong (a plain
        timeout when the broker did not answer within `timeout_ms`)."""
        from kafka import KafkaAdminClient
        from kafka.protocol.metadata import MetadataRequest

        with _quiet_kafka_logs() as kept:
            try:
                client = KafkaAdminClient(
                    bootstrap_servers=f"{self.cfg.host}:{self.cfg.port(node.id)}",
                    bootstrap_timeout_ms=timeout_ms,
                    request_timeout_ms=timeout_ms,
                    **account.kafka_python(),
                )
            except Exception as e:
                # a refused password surfaces as a bootstrap timeout; its cause was only logged,
                # and a log record can be lost (a logging set-up elsewhere in the process): ask
                # librdkafka too, which reports a refusal to its error callback
                e = next((k for k in kept.errors if type(k).__name__ in AUTH_REFUSALS), e)
                if type(e).__name__ not in AUTH_REFUSALS and (refusal := self._refusal_seen(node, account, timeout_ms)):
                    return f"SaslAuthenticationFailedError: {refusal}"
                return f"{type(e).__name__}: {e}"
            try:
                ask(client, MetadataRequest(topics=[]), node.id)
                return None
            except Exception as e:
                return f"{type(e).__name__}: {e}"
            finally:
                client.close()

    def _refusal_seen(self, node: Node, account: Account, timeout_ms: int) -> str | None:
        """What librdkafka says when `account` logs in on `node`, if it is a refused login (its
        error callback gets _AUTHENTICATION, within ~0.3 s of the broker's answer); else None."""
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import AdminClient

        errors: list = []
        client = AdminClient(
            {
                "bootstrap.servers": f"{self.cfg.host}:{self.cfg.port(node.id)}",
                **account.librdkafka(),
                "error_cb": errors.append,
                "log_level": 0,
            }
        )

        def refusals() -> list:
            client.poll(0.2)  # serves the error callback
            return [x for x in errors if x.code() == KafkaError._AUTHENTICATION]

        seen = wait_for(refusals, timeout_s=timeout_ms / 1000, every_s=0)
        return seen.last[0].str() if seen else None

    @contextlib.contextmanager
    def stopped(self, broker: int, kill: bool = False):
        """A broker down for the length of a `with` block, started again afterwards."""
        if kill:
            self.kill_broker(broker)
        else:
            self.stop_broker(broker)
        try:
            yield self
        finally:
            self.start_broker(broker)

    def _make_class_archive(self) -> None:
        """The first cluster of a JVM and classpath to stop makes the brokers' class archive
        (cluster/class_sharing.py): every later start is cheaper."""
        try:
            java_bin, classpath = java.java_executable(), jars.broker_classpath()
        except ClusterError:
            return
        class_sharing.make_archive(java_bin, classpath, [n.dir for n in self.nodes.values()])

    # --- down ----------------------------------------------------------------------------------
    def down(self, wipe: bool = False, timeout: float = S.STOP_TIMEOUT_S) -> list[int]:
        """Stop every node (all at once, so no node waits on a quorum that is leaving).
        Keeps the data unless wipe; a wiped cluster's nodes are killed at once (a clean stop
        only protects data that is about to be deleted). Returns the ids of nodes killed."""
        procs = {n.id: n.process() for n in self.nodes.values()}
        for proc in procs.values():
            if proc:
                proc.kill() if wipe else proc.terminate()
        gone, alive = psutil.wait_procs([p for p in procs.values() if p], timeout=timeout)
        for proc in alive:
            proc.kill()
        psutil.wait_procs(alive, timeout=10)
        killed = [i for i, p in procs.items() if p in alive]
        for node in self.nodes.values():
            node.pid_file.unlink(missing_ok=True)
        self._make_class_archive()
        if wipe:
            shutil.rmtree(self.cfg.home, ignore_errors=True)
        return killed
