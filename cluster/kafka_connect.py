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
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import jars
from .connect import account, bootstrap_servers
from .errors import ClusterError
from .java import java_executable
from .process import free_port, properties, write_private

STANDALONE = "org.apache.kafka.connect.cli.ConnectStandalone"
OFFSETS_FILE = "connect.offsets"
LOG_FILE = "connect.log"


class ConnectWorker:
    """A standalone Connect worker: start(), status(), stop(); a context manager too."""

    def __init__(self, folder: str | Path, connectors: list[dict], port: int | None = None, heap: str = "256m",
                 login=None):
        """login: whose Kafka login the worker uses (an Account); yours by default."""
        self.folder, self.login = Path(folder).resolve(), login
        self.connectors = [dict(c) for c in connectors]
        missing = [c for c in self.connectors if not c.get("name") or not c.get("connector.class")]
        if missing:
            raise ValueError(f"every connector needs a name and a connector.class: {missing[0]}")
        self.port, self.heap, self.proc = port or free_port(), heap, None

    # --- the verbs ----------------------------------------------------------------------
    def start(self, timeout_s: float = 90) -> "ConnectWorker":
        """Start the worker; return once every connector and its tasks are RUNNING."""
        self.folder.mkdir(parents=True, exist_ok=True)
        login = (self.login or account()).java()
        worker = {
            "bootstrap.servers": bootstrap_servers(),
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.storage.file.filename": str(self.folder / OFFSETS_FILE),
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://127.0.0.1:{self.port}",
            # a connector may name its own consumer group (a sink's must be in your namespace)
            "connector.client.config.override.policy": "All",
            **login, **{f"{side}.{k}": v for side in ("producer", "consumer", "admin") for k, v in login.items()},
        }
        # The FileStream connectors as a plugin (a folder on plugin.path): Connect then knows them
        # by their short names too ("FileStreamSource"), as Kafka's own example configs write them.
        classpath = jars.jars("kafka-connect")
        plugins = self.folder / "plugins" / "connect-file"
        plugins.mkdir(parents=True, exist_ok=True)
        for jar in classpath:
            if jar.name.startswith("connect-file-") and not (plugins / jar.name).exists():
                (plugins / jar.name).symlink_to(jar.resolve())
        worker["plugin.path"] = str(self.folder / "plugins")
        files = [self._write("worker.properties", worker)]
        files += [self._write(f"connector-{i}.properties", c) for i, c in enumerate(self.connectors)]
        cmd = [java_executable(), f"-Xmx{self.heap}", "-Dorg.apache.logging.log4j.level=INFO",
               "-cp", os.pathsep.join(map(str, classpath)), STANDALONE, *map(str, files)]
        log = open(self.folder / LOG_FILE, "ab")
        self.proc = subprocess.Popen(cmd, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise ClusterError(f"The Connect worker exited (code {self.proc.returncode}) before its connectors "
                                   f"ran: {self.log_tail()}", hint=f"Read {self.folder / LOG_FILE}.")
            states = self.status()
            failed = {n: s for n, s in states.items() if "FAILED" in [s["connector"], *s["tasks"]]}
            if failed:
                name, state = next(iter(failed.items()))
                self.stop()
                raise ClusterError(f"Connector {name!r} failed: {state.get('trace', '')[:400]}",
                                   hint="Check its settings (file, topic or topics) and that the topic is yours "
                                        "(lab.topic(...)).")
            if len(states) == len(self.connectors) and all(
                    s["connector"] == "RUNNING" and s["tasks"] and set(s["tasks"]) == {"RUNNING"}
                    for s in states.values()):
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise ClusterError(f"The Connect worker's connectors were not running within {timeout_s:.0f} s: "
                                   f"{states}", hint=f"Read {self.folder / LOG_FILE}.")
            time.sleep(0.5)

    def status(self) -> dict:
        """name -> {"connector": "RUNNING", "tasks": ["RUNNING"], "trace": ...}, from the REST API
        ({} while the worker is starting)."""
        found = {}
        for c in self.connectors:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/connectors/{c['name']}/status",
                                            timeout=5) as r:
                    data = json.load(r)
            except (urllib.error.URLError, OSError, ValueError):
                continue
            tasks = data.get("tasks", [])
            found[c["name"]] = {"connector": data.get("connector", {}).get("state"),
                                "tasks": [t.get("state") for t in tasks],
                                "trace": " ".join(t.get("trace", "") for t in tasks if t.get("trace"))
                                or data.get("connector", {}).get("trace", "")}
        return found

    def stop(self, timeout_s: float = 30) -> None:
        """Stop cleanly (SIGTERM: the worker flushes its offsets), or kill after timeout_s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = (self.folder / LOG_FILE).read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        errors = [line for line in text if " ERROR " in line or "Exception" in line]
        return " | ".join((errors or text)[-lines:])[:1000]

    def _write(self, name: str, values: dict) -> Path:
        path = self.folder / name
        write_private(path, properties(values))   # the login is in here
        return path

    def __enter__(self) -> "ConnectWorker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
