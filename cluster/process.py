"""One Kafka node as a local JVM process: its folder, pid file, log, start, stop and kill.

Each node lives in <home>/node-N/ with server.properties, a pid file, server.log (the JVM's
stdout and stderr, so nothing is left in a pipe that nobody reads) and data/.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections import deque
from contextlib import contextmanager
from pathlib import Path

import psutil

from . import class_sharing
from . import settings as S
from .accounts import Secrets
from .errors import ClusterError
from .safe_files import write_text

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
METRICS_RULES = Path(__file__).with_name("jmx-exporter.yaml")  # what a broker's metrics page shows
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"


def properties(values: dict) -> str:
    """Java properties text, one line per key whatever a key or value holds: Java ends a line
    at \\n, \\r or both, so every control or non-ASCII character is written as an escape
    (\\uXXXX), a backslash doubled, and a key's separators (=, :, space) and comment marks
    escaped, so no value can start a setting of its own."""

    def escaped(v, key: bool = False) -> str:
        out = []
        for ch in str(v):
            if ch == "\\":
                out.append("\\\\")
            elif ch < " " or ch > "~":
                units = ch.encode("utf-16-be")  # one unit, or a surrogate pair beyond the BMP
                out.append(
                    "".join(f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2))
                )
            elif key and ch in "=: #!":
                out.append("\\" + ch)
            else:
                out.append(ch)
        return "".join(out)

    return "".join(f"{escaped(k, key=True)}={escaped(v)}\n" for k, v in values.items())


@contextmanager
def login_file(values: dict):
    """A Java properties file of `values` (a login) for a tool's `--command-config` or
    `--producer.config`, removed afterwards: a temporary file only its owner can read, where the
    command line would show the password to everyone on the machine (`ps`)."""
    with tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False) as f:
        f.write(properties(values))
    try:
        yield f.name
    finally:
        os.unlink(f.name)


def write_private(path: Path, text: str) -> None:
    """Write a file readable by its owner only (it holds a password), whatever mode it had;
    never through a link (a link planted at the path is refused, not written through)."""
    path = Path(path)
    write_text(path.parent, path.name, text, mode=0o600)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_open_files(least: int = S.BROKER_OPEN_FILES[0], wanted: int = S.BROKER_OPEN_FILES[1]) -> int:
    """Raise this process's open-file limit (which the brokers it starts inherit) as far as the
    system lets it, up to `wanted`; refuse, saying what to do, if that is below `least`. Every
    segment of every partition replica keeps a file open in its broker."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    for candidate in (wanted, top, 10_240):  # 10240: macOS's most without sysctl changes
        if soft >= candidate:
            break
        try:
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (candidate, max(hard, candidate) if hard != resource.RLIM_INFINITY else hard)
            )
            soft = candidate
            break
        except (ValueError, OSError):
            continue
    if soft < least:
        raise ClusterError(
            f"The brokers may open only {soft:,} files here (the system's limit, `ulimit -n`); "
            f"they need {least:,} at least: every segment of every partition keeps one open.",
            hint=f"Raise the limit before starting: `ulimit -n {wanted}` in this shell (if the hard "
            f"limit allows), LimitNOFILE={wanted} in a systemd unit, or nofile in "
            "/etc/security/limits.conf; in Docker, docker-compose.yml sets it already.",
        )
    return soft


def listening_ports(procs) -> set[int]:
    """The TCP ports these processes (psutil.Process) listen on; a process gone or not ours adds
    none. How the grader knows a port is held by the process it means, not by whoever bound it."""
    ports = set()
    for p in procs:
        try:
            ports |= {c.laddr.port for c in p.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
        except (psutil.Error, OSError):
            pass
    return ports


class Node:
    def __init__(self, cfg: S.Settings, node_id: int):
        self.cfg, self.id = cfg, node_id
        self.dir = cfg.node_dir(node_id)
        self.config_file = self.dir / "server.properties"
        self.pid_file = self.dir / "pid"
        self.log_file = self.dir / "server.log"
        self.data_dir = self.dir / "data"

    def __repr__(self) -> str:
        return f"Node({self.id}, {self.dir})"

    # --- what is running -------------------------------------------------------------
    @property
    def marker(self) -> str:
        """A system property on the JVM's command line that names this node's folder, so a
        recycled pid is never mistaken for our broker."""
        return f"-Dcourse.node={self.dir}"

    def process(self) -> psutil.Process | None:
        """The live JVM of this node, or None."""
        try:
            pid = int(self.pid_file.read_text())
            proc = psutil.Process(pid)
            popen = _children.get(pid)
            if popen is not None:  # started by us: its own exit status is the truth
                return proc if popen.poll() is None else None
            if proc.status() != psutil.STATUS_ZOMBIE and self.marker in proc.cmdline():
                return proc
        except (FileNotFoundError, ValueError, psutil.Error):
            pass
        return None

    @property
    def pid(self) -> int | None:
        proc = self.process()
        return proc.pid if proc else None

    def rss_bytes(self) -> int:
        proc = self.process()
        return proc.memory_info().rss if proc else 0

    # --- configuration -----------------------------------------------------------------
    def write_config(self, secrets: Secrets) -> None:
        """server.properties, readable by its owner only: it holds the brokers' passwords."""
        self.dir.mkdir(parents=True, exist_ok=True)
        props = self.cfg.broker_properties(self.id, secrets.broker().password, secrets.admin().password)
        text = "# Written by `python -m cluster up` from cluster/settings.py; edits are overwritten.\n"
        write_private(self.config_file, text + properties(props))

    def java_command(self, java: str, classpath: list[Path], main: str, *args: str) -> list[str]:
        # The classpath (about 50 jars) goes in an argument file, so `ps` stays readable.
        self.dir.mkdir(parents=True, exist_ok=True)
        argfile = self.dir / "classpath.args"
        argfile.write_text('-cp "' + os.pathsep.join(str(p) for p in classpath) + '"\n')
        return [
            java,
            f"-Xmx{self.cfg.heap}",
            "-Xms64m",
            *S.BROKER_JVM_OPTS,
            *self.cfg.jvm_opts,
            *class_sharing.jvm_options(java, classpath, self.dir),
            f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            f"-Dkafka.logs.dir={self.dir}",
            self.marker,
            f"@{argfile}",
            main,
            *args,
        ]

    def format_storage(self, java: str, classpath: list[Path], cluster_id: str) -> subprocess.CompletedProcess:
        """Write meta.properties into data/ (Kafka's own storage tool)."""
        cmd = self.java_command(
            java, classpath, STORAGE_TOOL, "format", "-t", cluster_id, "-c", str(self.config_file), "--ignore-formatted"
        )
        return subprocess.run(cmd, capture_output=True, text=True, timeout=S.READY_TIMEOUT_S)

    def meta_properties(self) -> dict[str, str] | None:
        """The data folder's meta.properties, or None if there is none."""
        path = self.data_dir / "meta.properties"
        if not path.exists():
            return None
        pairs = (
            line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#")
        )
        return {k.strip(): v.strip() for k, v in pairs}

    # --- start, stop, kill -----------------------------------------------------------------
    def metrics_agent(self) -> list[str]:
        """The JVM option that serves this broker's metrics on its METRICS port, where the cluster
        has them (Settings.metrics): the Prometheus JMX exporter's agent, on 127.0.0.1 only."""
        if not self.cfg.metrics:
            return []
        from .jars import metrics_agent

        port = self.cfg.port(self.id, S.METRICS)
        return [f"-javaagent:{metrics_agent()}={self.cfg.host}:{port}:{METRICS_RULES}"]

    def start(self, java: str, classpath: list[Path]) -> psutil.Process:
        """Launch the JVM detached from us (own session), logging to server.log."""
        raise_open_files()  # the JVM inherits the limit
        cmd = self.java_command(java, classpath, MAIN_CLASS, str(self.config_file))
        cmd[1:1] = self.metrics_agent()  # the broker only, not the storage tool (it would take the port)
        with open(self.log_file, "ab") as log:
            log.write(f"\n===== starting node {self.id} at {time.strftime('%Y-%m-%d %H:%M:%S')} =====\n".encode())
            log.flush()
            popen = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
            )
        self.pid_file.write_text(str(popen.pid))
        # Keep the Popen reachable so Python reaps it (no zombie) when it exits while we run.
        _children[popen.pid] = popen
        return psutil.Process(popen.pid)

    def stop(self, timeout: float = S.STOP_TIMEOUT_S) -> bool:
        """Clean shutdown (SIGTERM), waiting up to `timeout`; SIGKILL after that.
        Returns True if the broker stopped cleanly."""
        proc = self.process()
        if proc is None:
            return True
        proc.send_signal(signal.SIGTERM)
        try:
            _wait_exited(proc, timeout)
            clean = True
        except psutil.TimeoutExpired:
            proc.kill()
            _wait_exited(proc, 10)
            clean = False
        self.pid_file.unlink(missing_ok=True)
        self._wait_ports_released()
        return clean

    def kill(self) -> None:
        """SIGKILL: the broker dies at once, as in a power cut. The pid file stays, so
        `status` can report the node as dead rather than stopped."""
        proc = self.process()
        if proc is not None:
            proc.kill()
            try:
                _wait_exited(proc, 10)
            except psutil.TimeoutExpired:
                pass
            self._wait_ports_released()

    def _wait_ports_released(self, timeout_s: float = 5) -> None:
        """Until its ports can be listened on again (at most timeout_s): a JVM seen exited by a
        process that is not its parent (a zombie) still held its metrics port for a few hundred ms,
        and a start right after it (a rolling restart's) found the port taken."""
        from .waiting import wait_for

        wait_for(
            lambda: all(_bindable(self.cfg.host, p) for p in self.cfg.ports(self.id).values()),
            timeout_s=timeout_s,
            every_s=0.05,
        )

    def was_killed(self) -> bool:
        """A pid file with no live process: the node died without a clean stop."""
        return self.pid_file.exists() and self.process() is None

    def log_tail(self, lines: int = 25) -> str:
        try:
            with open(self.log_file, errors="replace") as f:
                return "".join(deque(f, maxlen=lines)).rstrip()
        except FileNotFoundError:
            return "(no log yet)"


_children: dict[int, subprocess.Popen] = {}


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM and brokers.port_holder do
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def _wait_exited(proc: psutil.Process, timeout: float) -> None:
    """Until the process has exited (psutil.TimeoutExpired after `timeout`). One this process did
    not start is gone once it is a zombie: its parent (the kernel that started the broker, when a
    script stops it: lab 14's rolling restart) reaps it in its own time, and psutil's wait would
    wait for that."""
    if proc.pid in _children:  # our child: waitpid reaps it
        proc.wait(timeout)
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        if time.monotonic() > deadline:
            raise psutil.TimeoutExpired(timeout, proc.pid)
        time.sleep(0.05)
