"""Kafka Connect in standalone mode, from the pinned jars of the same Kafka release, as you:
one worker process that runs the connectors you give it and keeps its source offsets in a
file of its folder (so a restart goes on where it stopped).

    from cluster.kafka_connect import ConnectWorker
    source = {"name": "csv-in", "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
              "file": "flights.csv", "topic": lab.topic("flights-csv")}
    with ConnectWorker("connect", [source]) as worker:   # ready: every connector and task RUNNING
        print(worker.status())

The worker's own log is `connect.log` in its folder; its REST API (http://127.0.0.1:PORT) shows
what a distributed worker would: `GET /connectors/NAME/status`.

The grader runs its worker differently (selfcheck/checks/lab11.py): inside the grading's
sandbox (`launch`), in a folder of the grader's that student code cannot write, and with
`private_rest=True`: the REST API then answers only requests with a password of the worker's
own (Kafka's basic-auth REST extension), so no other program on the machine can add a
connector to it. Its port is the one the JVM itself listens on (it binds port 0), so nobody
can take the port first and receive the grader's requests.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

from . import jars
from .clients import account, bootstrap_servers
from .errors import ClusterError
from .java import java_executable
from .process import listening_ports, properties, write_private
from .safe_files import kind, make_dirs, tail_text
from .waiting import wait_for

BASIC_AUTH = "org.apache.kafka.connect.rest.basic.auth.extension.BasicAuthSecurityRestExtension"
LOGIN_MODULE = "org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule"

STANDALONE = "org.apache.kafka.connect.cli.ConnectStandalone"
OFFSETS_FILE = "connect.offsets"
LOG_FILE = "connect.log"


class ConnectWorker:
    """A standalone Connect worker: start(), status(), stop(); a context manager too."""

    def __init__(
        self,
        folder: str | Path,
        connectors: list[dict],
        port: int | None = None,
        heap: str = "256m",
        login=None,
        launch: Callable[..., subprocess.Popen] | None = None,
        private_rest: bool = False,
    ):
        """login: whose Kafka login the worker uses (an Account); yours by default.
        launch(argv, **popen_options): how to start the JVM (the grader's: in the grading's sandbox).
        private_rest: the REST API answers only this object (a password of its own)."""
        self.folder, self.login = Path(folder).absolute(), login
        self.connectors = [dict(c) for c in connectors]
        missing = [c for c in self.connectors if not c.get("name") or not c.get("connector.class")]
        if missing:
            raise ValueError(f"every connector needs a name and a connector.class: {missing[0]}")
        # No port given: the worker binds port 0 and the port is read from the JVM's own listening
        # socket once it is up. A port picked beforehand (and free then) could be taken by someone
        # else first, who would then get the grader's requests and the REST password with them.
        self.port, self.heap = port, heap
        self.proc: subprocess.Popen | None = None
        self.fixed_port = port is not None
        self.launch = launch
        self.rest_password = secrets.token_urlsafe(24) if private_rest else None

    # --- the verbs ----------------------------------------------------------------------
    def start(self, timeout_s: float = 90) -> "ConnectWorker":
        """Start the worker; return once every connector and its tasks are RUNNING."""
        make_dirs(self.folder.parent, self.folder.name)  # never through a link at the folder
        if not self.fixed_port:
            self.port = None  # a new JVM, a new port
        login = (self.login or account()).java()
        worker = {
            "bootstrap.servers": bootstrap_servers(),
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.storage.file.filename": str(self.folder / OFFSETS_FILE),
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://127.0.0.1:{self.port if self.fixed_port else 0}",
            # a connector may name its own consumer group (a sink's must be in your namespace)
            "connector.client.config.override.policy": "All",
            **login,
            **{f"{side}.{k}": v for side in ("producer", "consumer", "admin") for k, v in login.items()},
        }
        # The FileStream connectors as a plugin (a folder on plugin.path): Connect then knows them
        # by their short names too ("FileStreamSource"), as Kafka's own example configs write them.
        classpath = jars.jars("kafka-connect")
        plugins = make_dirs(self.folder, "plugins/connect-file")
        for jar in classpath:
            if jar.name.startswith("connect-file-") and kind(plugins, jar.name) is None:
                (plugins / jar.name).symlink_to(jar.resolve())
        worker["plugin.path"] = str(self.folder / "plugins")
        # a small worker for a few connectors: one GC thread, C1 only (far less CPU to start)
        jvm = [
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dorg.apache.logging.log4j.level=INFO",
        ]
        if self.rest_password:
            worker["rest.extension.classes"] = BASIC_AUTH
            self._write("rest-users.properties", {"grader": self.rest_password})
            jaas = self.folder / "rest-jaas.conf"
            write_private(
                jaas,
                f'KafkaConnect {{\n  {LOGIN_MODULE} required\n  file="{self.folder / "rest-users.properties"}";\n}};\n',
            )
            jvm.append(f"-Djava.security.auth.login.config={jaas}")
        files = [self._write("worker.properties", worker)]
        files += [self._write(f"connector-{i}.properties", c) for i, c in enumerate(self.connectors)]
        cmd = [java_executable(), *jvm, "-cp", os.pathsep.join(map(str, classpath)), STANDALONE, *map(str, files)]
        fd = os.open(self.folder / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "ab") as log:
            if self.launch is None:
                self.proc = subprocess.Popen(
                    cmd, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            else:
                self.proc = self.launch(cmd, stdout=log, stderr=subprocess.STDOUT)

        def states() -> dict:
            assert self.proc is not None  # started just above
            if self.proc.poll() is not None:
                raise ClusterError(
                    f"The Connect worker exited (code {self.proc.returncode}) before its connectors "
                    f"ran: {self.log_tail()}",
                    hint=f"Read {self.folder / LOG_FILE}.",
                )
            if not self.fixed_port and self.port is None:
                self.port = self._rest_port()
            return self.status() if self.port else {}

        def settled(states: dict) -> bool:  # every connector and task running, or one failed
            return any("FAILED" in [s["connector"], *s["tasks"]] for s in states.values()) or (
                len(states) == len(self.connectors)
                and all(
                    s["connector"] == "RUNNING" and s["tasks"] and set(s["tasks"]) == {"RUNNING"}
                    for s in states.values()
                )
            )

        waited = wait_for(states, timeout_s=timeout_s, until=settled, every_s=0.5)
        failed = {n: s for n, s in waited.last.items() if "FAILED" in [s["connector"], *s["tasks"]]}
        if failed:
            name, state = next(iter(failed.items()))
            self.stop()
            raise ClusterError(
                f"Connector {name!r} failed: {state.get('trace', '')[:400]}",
                hint="Check its settings (file, topic or topics) and that the topic is yours (lab.topic(...)).",
            )
        if not waited:
            self.stop()
            raise ClusterError(
                f"The Connect worker's connectors were not running within {timeout_s:.0f} s: {waited.last}",
                hint=f"Read {self.folder / LOG_FILE}.",
            )
        return self

    def status(self) -> dict:
        """name -> {"connector": "RUNNING", "tasks": ["RUNNING"], "trace": ...}, from the REST API
        ({} while the worker is starting)."""
        found = {}
        for c in self.connectors:
            try:
                with urllib.request.urlopen(self.request(f"/connectors/{c['name']}/status"), timeout=5) as r:
                    data = json.load(r)
            except (urllib.error.URLError, OSError, ValueError):
                continue
            tasks = data.get("tasks", [])
            found[c["name"]] = {
                "connector": data.get("connector", {}).get("state"),
                "tasks": [t.get("state") for t in tasks],
                "trace": " ".join(t.get("trace", "") for t in tasks if t.get("trace"))
                or data.get("connector", {}).get("trace", ""),
            }
        return found

    def _rest_port(self) -> int | None:
        """The port the worker's JVM listens on (its REST API; it opens no other), None until it does."""
        jvms = []
        for p in self._tree():
            try:
                if p.name() == "java":
                    jvms.append(p)
            except psutil.Error:
                pass
        ports = listening_ports(jvms)
        return min(ports) if ports else None

    def request(self, path: str) -> urllib.request.Request:
        """A request to the worker's REST API (with its password, when it has one)."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        if self.rest_password:
            token = base64.b64encode(f"grader:{self.rest_password}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        return req

    def stop(self, timeout_s: float = 30) -> None:
        """Stop cleanly (SIGTERM to the JVM: the worker flushes its offsets), or kill after
        timeout_s. The JVM may be the process started, or a child of it (a sandbox's)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for p in self._tree():  # launched in a sandbox, its outer process ends when the JVM does
            try:
                if (p.name() == "java") if self.launch is not None else p.pid == self.proc.pid:
                    p.terminate()
            except psutil.Error:
                pass
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            for p in reversed(self._tree()):
                try:
                    p.kill()
                except psutil.Error:
                    pass
            self.proc.wait(10)

    def _tree(self) -> list[psutil.Process]:
        if self.proc is None:
            return []
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = tail_text(self.folder, LOG_FILE).strip().splitlines()
        except OSError:
            return "(no log)"
        errors = [line for line in text if " ERROR " in line or "Exception" in line]
        return " | ".join((errors or text)[-lines:])[:1000]

    def _write(self, name: str, values: dict) -> Path:
        path = self.folder / name
        write_private(path, properties(values))  # the login is in here
        return path

    def __enter__(self) -> "ConnectWorker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
