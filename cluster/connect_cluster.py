"""Kafka Connect as industry runs it: a cluster of distributed workers, as you, from the pinned
jars of the kit's Kafka release, with Debezium's PostgreSQL connector on their plugin path.

    from cluster.connect_cluster import ConnectCluster
    with ConnectCluster("connect") as connect:          # ready: both workers answer, one group
        connect.put("airports-cdc", {...})              # create or change a connector (REST)
        connect.wait_running("airports-cdc")
        print(connect.status("airports-cdc"))           # which worker runs each task
        connect.kill(1)                                 # SIGKILL worker 1: its tasks move

The workers form one group (`<namespace>.connect`) and keep everything in three topics of your
namespace: the connectors' configs, their source offsets and their status. No worker owns a
connector: the group's leader hands the connectors and tasks out, and when a worker leaves (or
dies and its session times out) the others take its share, after `scheduled.rebalance.max.delay.ms`
(Kafka's default waits 5 minutes for the lost worker to come back; the kit's 10 s lets a lab see it).

Each worker's REST API listens on 127.0.0.1 (your port base + 51, + 52, ...): any worker takes a
request and forwards it to the leader when it must. Logs: `worker-N.log` in the folder.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

from . import jars
from .clients import account, bootstrap_servers, namespace, qualify
from .errors import ClusterError
from .java import java_executable
from .kafka_connect import BASIC_AUTH, LOGIN_MODULE
from .process import listening_ports, properties, write_private
from .safe_files import kind, make_dirs, tail_text
from .waiting import wait_for

DISTRIBUTED = "org.apache.kafka.connect.cli.ConnectDistributed"
# Debezium's jars that Connect itself provides: left off the plugin's folder, so the plugin's
# class loader takes Kafka's and the logging API from the worker.
PROVIDED = ("connect-api-", "kafka-clients-", "slf4j-api-")
REBALANCE_DELAY_MS = 10_000


class ConnectCluster:
    """Distributed Connect workers in one group: start(), put(), status(), kill(), stop()."""

    def __init__(
        self,
        folder: str | Path,
        workers: int = 2,
        group: str | None = None,
        ports: list[int] | None = None,
        heap: str = "384m",
        login=None,
        namespace_: str | None = None,
        launch: Callable[..., subprocess.Popen] | None = None,
        private_rest: bool = False,
    ):
        """group: the workers' group and the stem of their topics (default <namespace>.connect);
        ports: each worker's REST port (default: the cluster's port base + 51, + 52, ...); 0: the
        JVM binds a free one and the port is read from its own listening socket (the grader's
        way: nobody can take the port first), which it advertises to the other workers;
        login: whose Kafka login the workers use (an Account), yours by default;
        private_rest: the REST API answers only requests with a password of this object's own
        (Kafka's basic-auth extension; a request one worker forwards to another carries it)."""
        self.folder = Path(folder).absolute()
        ns = namespace_ or namespace()
        self.group = group or qualify(ns, "connect")
        if ports is None:
            from .settings import Settings

            base = Settings.from_env().port_base
            ports = [base + 51 + i for i in range(workers)]
        self.ports, self.heap, self.login, self.launch = list(ports), heap, login, launch
        self.fixed = [p != 0 for p in ports]
        self.procs: list[subprocess.Popen | None] = [None] * workers
        self.rest_password = secrets.token_urlsafe(24) if private_rest else None

    # --- the verbs ----------------------------------------------------------------------
    def start(self, timeout_s: float = 120) -> ConnectCluster:
        """Start every worker; return once each answers REST and the group has a leader."""
        make_dirs(self.folder.parent, self.folder.name)
        self._plugins()
        for i in range(len(self.procs)):
            self.start_worker(i)
        waited = wait_for(
            self._all_answer, timeout_s=timeout_s, every_s=0.5, retry_on=(OSError, ValueError), stop_if=self._one_exited
        )
        if not waited:
            self.stop()
            raise ClusterError(
                f"The Connect workers in {self.folder} were not ready within {timeout_s:.0f} s "
                f"(last: {waited.last!r}): {self.log_tail()}",
                hint=f"Read the worker-N.log files in {self.folder}.",
            )
        return self

    def start_worker(self, i: int) -> None:
        """Start worker i (again, after kill(i)): it joins the group and gets a share of the work."""
        login = (self.login or account()).java()
        if not self.fixed[i]:
            self.ports[i] = 0  # a new JVM, a new port
        port = self.ports[i]
        worker = {
            "bootstrap.servers": bootstrap_servers(),
            "group.id": self.group,
            "config.storage.topic": f"{self.group}-configs",
            "offset.storage.topic": f"{self.group}-offsets",
            "status.storage.topic": f"{self.group}-status",
            # three replicas as every topic of the course; one partition each: a namespace has a
            # budget of partitions (Kafka's defaults, 25 and 5, would take a third of it)
            "config.storage.replication.factor": "3",
            "offset.storage.replication.factor": "3",
            "status.storage.replication.factor": "3",
            "offset.storage.partitions": "1",
            "status.storage.partitions": "1",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "false",
            "value.converter.schemas.enable": "false",
            "offset.flush.interval.ms": "1000",
            "scheduled.rebalance.max.delay.ms": str(REBALANCE_DELAY_MS),
            # a source task's records and its offsets in one transaction (KIP-618): a task that
            # dies mid-way is fenced, and its successor starts after the last committed change
            "exactly.once.source.support": "enabled",
            "listeners": f"http://127.0.0.1:{port}",
            "rest.advertised.host.name": "127.0.0.1",
            **({"rest.advertised.port": str(port)} if port else {}),
            "plugin.path": str(self.folder / "plugins"),
            # plugins found by their manifests (Kafka's and Debezium's jars have them), not by
            # scanning every class of every jar: seconds less for each worker to start
            "plugin.discovery": "service_load",
            # a connector may name its own clients' settings (a sink's group must be in your namespace)
            "connector.client.config.override.policy": "All",
            **login,
            **{f"{side}.{k}": v for side in ("producer", "consumer", "admin") for k, v in login.items()},
        }
        jvm = [f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
        if self.rest_password:
            worker["rest.extension.classes"] = BASIC_AUTH
            users = self.folder / "rest-users.properties"
            write_private(users, properties({"grader": self.rest_password}))
            jaas = self.folder / "rest-jaas.conf"
            write_private(jaas, f'KafkaConnect {{\n  {LOGIN_MODULE} required\n  file="{users}";\n}};\n')
            jvm.append(f"-Djava.security.auth.login.config={jaas}")
        path = self.folder / f"worker-{i + 1}.properties"
        write_private(path, properties(worker))  # the login is in here
        classpath = os.pathsep.join(map(str, jars.jars("kafka-connect")))
        cmd = [java_executable(), *jvm, "-cp", classpath, DISTRIBUTED, str(path)]
        log_path = self.folder / f"worker-{i + 1}.log"
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "ab") as log:
            if self.launch is None:
                self.procs[i] = subprocess.Popen(
                    cmd, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            else:
                self.procs[i] = self.launch(cmd, stdout=log, stderr=subprocess.STDOUT)

    def put(self, name: str, config: dict) -> dict:
        """Create connector `name`, or change its config (PUT /connectors/NAME/config)."""
        return self.rest("PUT", f"/connectors/{name}/config", {k: str(v) for k, v in config.items()})

    def delete(self, name: str) -> None:
        self.rest("DELETE", f"/connectors/{name}")

    def status(self, name: str) -> dict:
        """{"connector": state, "tasks": [(state, "127.0.0.1:PORT"), ...], "trace": ...}."""
        data = self.rest("GET", f"/connectors/{name}/status")
        tasks = data.get("tasks", [])
        return {
            "connector": data.get("connector", {}).get("state"),
            "tasks": [(t.get("state"), t.get("worker_id")) for t in tasks],
            "trace": " ".join(t.get("trace", "") for t in tasks if t.get("trace"))[:2000],
        }

    def offsets(self, name: str) -> list[dict]:
        """The connector's source offsets, as the workers stored them (GET /connectors/NAME/offsets)."""
        return self.rest("GET", f"/connectors/{name}/offsets").get("offsets", [])

    def wait_running(self, name: str, timeout_s: float = 60) -> dict:
        """Wait until the connector and all its tasks are RUNNING; a FAILED one ends the wait."""

        def settled(s: dict) -> bool:
            states = [s["connector"], *(t[0] for t in s["tasks"])]
            return "FAILED" in states or (
                s["connector"] == "RUNNING" and bool(s["tasks"]) and set(states) == {"RUNNING"}
            )

        waited = wait_for(
            lambda: self.status(name),
            timeout_s=timeout_s,
            until=settled,
            every_s=0.5,
            retry_on=(OSError, ValueError, ClusterError),  # 404 until the status is written
        )
        last = waited.last if isinstance(waited.last, dict) else {}
        if not waited or "FAILED" in [last.get("connector"), *(t[0] for t in last.get("tasks", []))]:
            raise ClusterError(
                f"Connector {name!r} is not running: {last or waited.last}",
                hint="Its trace (above) says why; check its config, then put() it again.",
            )
        return last

    def worker_of(self, port: int) -> int:
        """The index of the worker whose REST port is `port` (a task's worker_id ends with it)."""
        return self.ports.index(port)

    def kill(self, i: int) -> None:
        """SIGKILL worker i, as a machine's crash would: no goodbye to the group."""
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL) if self.launch is None else proc.kill()
            proc.wait(10)

    def stop(self, timeout_s: float = 30) -> None:
        """Stop every worker cleanly (SIGTERM: it leaves the group, flushes offsets), kill if it hangs."""
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for i, proc in enumerate(self.procs):
            if proc is None:
                continue
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill(i)
            self.procs[i] = None

    # --- helpers ------------------------------------------------------------------------
    def rest(self, method: str, path: str, body: dict | None = None, worker: int | None = None):
        """A REST call to a live worker (the first that runs, or `worker`); JSON in and out."""
        live = [i for i, p in enumerate(self.procs) if p is not None and p.poll() is None]
        order = [worker] if worker is not None else live
        if not order:
            raise ClusterError("No Connect worker is running.", hint="start() the cluster, or start_worker(i).")
        last: Exception | None = None
        for i in order:
            req = urllib.request.Request(
                f"http://127.0.0.1:{self.ports[i]}{path}",
                data=None if body is None else json.dumps(body).encode(),
                method=method,
                headers={"Content-Type": "application/json", **self._auth()},
            )
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    raw = r.read(1 << 20)
                return json.loads(raw) if raw else {}
            except urllib.error.HTTPError as e:
                detail = e.read(4000).decode(errors="replace")
                raise ClusterError(
                    f"Connect answered {e.code} to {method} {path}: {detail}",
                    hint="The message says which setting it refused." if e.code == 400 else "",
                ) from None
            except OSError as e:
                last = e
        raise last  # type: ignore[misc]

    def _auth(self) -> dict[str, str]:
        if not self.rest_password:
            return {}
        token = base64.b64encode(f"grader:{self.rest_password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def _all_answer(self) -> bool:
        """Every worker lists the connectors: it does once it has joined the group (before, its
        REST server answers 404 or 409)."""
        for i, proc in enumerate(self.procs):
            if proc is None:
                continue
            if not self.ports[i]:
                found = listening_ports(self._tree(proc))
                if not found:
                    return False
                self.ports[i] = min(found)
            try:
                self.rest("GET", "/connectors", worker=i)
            except ClusterError:
                return False
        return True

    @staticmethod
    def _tree(proc: subprocess.Popen) -> list[psutil.Process]:
        try:
            root = psutil.Process(proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def _one_exited(self) -> bool:
        return any(p is not None and p.poll() is not None for p in self.procs)

    def _plugins(self) -> None:
        """Debezium's PostgreSQL connector as a plugin folder of links to the jar cache."""
        plugin = make_dirs(self.folder, "plugins/debezium-postgres")
        for jar in jars.jars("debezium-postgres"):
            if not jar.name.startswith(PROVIDED) and kind(plugin, jar.name) is None:
                (plugin / jar.name).symlink_to(jar.resolve())

    def log_tail(self, lines: int = 4) -> str:
        out = []
        for i in range(len(self.procs)):
            try:
                text = tail_text(self.folder, f"worker-{i + 1}.log").strip().splitlines()
            except OSError:
                continue
            errors = [line for line in text if " ERROR " in line or "Exception" in line]
            out.append(f"worker {i + 1}: " + " | ".join((errors or text)[-lines:])[:600])
        return "; ".join(out) or "(no logs)"

    def __enter__(self) -> ConnectCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
