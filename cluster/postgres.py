"""A PostgreSQL server of your own, in a folder, for change data capture (Debezium reads its
write-ahead log): made with the machine's own PostgreSQL (`initdb`, `postgres`), started and
stopped like the brokers.

    from cluster.postgres import Postgres
    db = Postgres("pg")                 # the folder: made and initialised on the first start
    db.start()                          # ready: it answers SQL and its WAL is logical
    with db.connect() as conn:          # psycopg, as the database's owner
        conn.execute("create table airports (faa text primary key, name text)")
    db.stop()

Why these settings: `wal_level=logical` is what lets a connector decode the log into row changes;
a few replication slots and WAL senders are enough for a class's connectors; the server listens
on 127.0.0.1 only, with a password (scram) of its own kept in the folder (secrets.json, mode
600), because on a shared host other users' programs reach 127.0.0.1 too.

PostgreSQL refuses to run as root (CI and the hub's grader run as root). As root the kit runs
it in a user namespace of bubblewrap (`bwrap --unshare-user --uid 1000`): inside it the server is
an ordinary user, and its files, seen from outside, still belong to root.
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import shutil
import signal
import subprocess
from pathlib import Path

from .errors import ClusterError
from .process import write_private
from .safe_files import make_dirs, tail_text
from .waiting import wait_for

OWNER = "course"  # the database's owner: the one role initdb makes
LOG_FILE = "postgres.log"
SECRETS = "secrets.json"
DATA = "data"
# What a class's CDC needs and a laptop can spare (the defaults of 128 MB buffers are for a server).
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "wal_level": "logical",
    "max_wal_senders": 10,
    "max_replication_slots": 10,
    "shared_buffers": "'32MB'",
    "max_connections": 40,
    "fsync": "off",  # a teaching database: a crash of the machine may lose it, never a student's work
    "logging_collector": "off",
}
INSTALL_HINT = (
    "Install PostgreSQL 14 or later: Debian/Ubuntu `sudo apt install postgresql`, Fedora `sudo dnf "
    "install postgresql-server`, macOS `brew install postgresql@17`; or set COURSE_POSTGRES_BIN to "
    "the folder that holds its `initdb` and `postgres`."
)


def binaries() -> Path:
    """The folder of the machine's PostgreSQL server programs (initdb, postgres): COURSE_POSTGRES_BIN,
    then `pg_config --bindir`, then the usual places of Debian's and Homebrew's packages (the newest)."""
    from .settings import env

    candidates = []
    if given := env("COURSE_POSTGRES_BIN"):
        candidates.append(Path(given))
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            candidates.append(Path(out.stdout.strip()))
    if shutil.which("initdb"):
        candidates.append(Path(shutil.which("initdb")).resolve().parent)  # type: ignore[arg-type]

    def newest(pattern: str) -> list[Path]:
        found = glob.glob(pattern)
        return [Path(p) for p in sorted(found, key=lambda p: [int(x) for x in _digits(p)], reverse=True)]

    candidates += newest("/usr/lib/postgresql/*/bin")
    candidates += newest("/opt/homebrew/opt/postgresql@*/bin") + newest("/usr/local/opt/postgresql@*/bin")
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "postgres").is_file():
            return folder
    raise ClusterError("No PostgreSQL server programs (initdb, postgres) on this machine.", hint=INSTALL_HINT)


def missing() -> str | None:
    """None when the change-data-capture lab can run its PostgreSQL here; else what is missing
    and how to get it (the other labs need none of it)."""
    try:
        binaries()
    except ClusterError as e:
        return f"{e.message} The change-data-capture lab needs it; every other lab works without it. {e.hint}"
    if os.geteuid() == 0 and not shutil.which("bwrap"):
        return "PostgreSQL refuses to run as root and bubblewrap (bwrap) is not installed: the change-data-capture lab needs one of the two (run as a user, or `apt install bubblewrap`)."
    return None


def _digits(path: str) -> list[str]:
    import re

    return re.findall(r"\d+", path) or ["0"]


def as_ordinary_user(argv: list[str]) -> list[str]:
    """argv as a program PostgreSQL accepts to run: unchanged for a user, in a user namespace for root."""
    if os.geteuid() != 0:
        return argv
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise ClusterError(
            "PostgreSQL refuses to run as root, and bubblewrap (bwrap), which would run it as an "
            "ordinary user here, is not installed.",
            hint="Run the course as an ordinary user, or install bubblewrap (`apt install bubblewrap`).",
        )
    return [bwrap, "--dev-bind", "/", "/", "--unshare-user", "--uid", "1000", "--gid", "1000", "--", *argv]


class Postgres:
    """One PostgreSQL server in `folder`: start(), connect(), stop(); a context manager too."""

    def __init__(self, folder: str | Path, port: int | None = None):
        """port: where it listens (on 127.0.0.1); by default the cluster's port base + 50."""
        self.folder = Path(folder).absolute()
        if port is None:
            from .settings import Settings

            port = Settings.from_env().port_base + 50
        self.port = port
        self.proc: subprocess.Popen | None = None

    # -- what a client needs --------------------------------------------------------------
    @property
    def password(self) -> str:
        return json.loads((self.folder / SECRETS).read_text())["password"]

    def conninfo(self, dbname: str = "postgres") -> dict:
        return {"host": "127.0.0.1", "port": self.port, "user": OWNER, "password": self.password, "dbname": dbname}

    def connect(self, dbname: str = "postgres", autocommit: bool = True):
        import psycopg

        return psycopg.connect(**self.conninfo(dbname), autocommit=autocommit, connect_timeout=5)

    # -- its life -------------------------------------------------------------------------
    def initialised(self) -> bool:
        return (self.folder / DATA / "PG_VERSION").is_file()

    def init(self) -> None:
        """Make the data folder: initdb with the owner's password, then the kit's settings."""
        bin_dir = binaries()
        make_dirs(self.folder.parent, self.folder.name)
        password = secrets.token_urlsafe(18)
        write_private(self.folder / SECRETS, json.dumps({"password": password}))
        pwfile = self.folder / ".initdb-password"
        write_private(pwfile, password + "\n")
        try:
            out = subprocess.run(
                as_ordinary_user(
                    [
                        str(bin_dir / "initdb"),
                        "-D",
                        str(self.folder / DATA),
                        "-U",
                        OWNER,
                        "--auth=scram-sha-256",
                        f"--pwfile={pwfile}",
                        "-E",
                        "UTF8",
                        "--locale=C",
                        "--no-sync",
                    ]
                ),
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if out.returncode != 0:
            raise ClusterError(
                f"initdb failed in {self.folder / DATA}: {(out.stderr or out.stdout).strip()[-600:]}",
                hint="Delete that folder and start again; if it fails again, check the PostgreSQL install.",
            )
        conf = "\n".join(f"{k} = {v}" for k, v in SETTINGS.items())
        with open(self.folder / DATA / "postgresql.conf", "a") as f:  # initdb's file, in our folder
            f.write(f"\n# the course kit's settings (cluster/postgres.py)\n{conf}\n")

    def start(self, timeout_s: float = 60) -> Postgres:
        """Start the server (initialising the folder the first time); ready when it answers SQL as
        its owner and says its WAL is logical."""
        if not self.initialised():
            self.init()
        bin_dir = binaries()
        argv = [
            str(bin_dir / "postgres"),
            "-D",
            str(self.folder / DATA),
            "-p",
            str(self.port),
            "-k",
            str(self.folder),  # its Unix socket in the folder, not in /var/run (not ours to write)
        ]
        fd = os.open(self.folder / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "ab") as log:
            proc = subprocess.Popen(
                as_ordinary_user(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.proc = proc
        waited = wait_for(
            self._ready, timeout_s=timeout_s, retry_on=(Exception,), stop_if=lambda: proc.poll() is not None
        )
        if not waited:
            tail = tail_text(self.folder, LOG_FILE, 3000).strip().splitlines()[-8:]
            self.stop()
            in_use = any("Address already in use" in line for line in tail)
            raise ClusterError(
                f"PostgreSQL in {self.folder} did not become ready within {timeout_s:.0f} s "
                f"(last: {waited.last!r}); its log ends:\n  " + "\n  ".join(tail),
                hint=f"Port {self.port} is taken by another program: stop it or choose another COURSE_PORT_BASE."
                if in_use
                else f"Read {self.folder / LOG_FILE}.",
            )
        return self

    def _ready(self) -> bool:
        with self.connect() as conn:
            return conn.execute("show wal_level").fetchone()[0] == "logical"

    def answers(self) -> bool:
        """A server answers on this folder's port with this folder's password (one started
        before, by another kernel or an earlier run of the cell)."""
        if not self.initialised():
            return False
        try:
            return self._ready()
        except Exception:
            return False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 30) -> None:
        """A fast shutdown (SIGINT: connections closed, the WAL flushed), then a kill if it hangs."""
        if self.proc is None:  # started by another process (an earlier kernel): ask pg_ctl
            if (self.folder / DATA / "postmaster.pid").is_file():
                pg_ctl = str(binaries() / "pg_ctl")
                subprocess.run(
                    as_ordinary_user([pg_ctl, "-D", str(self.folder / DATA), "-m", "fast", "-w", "stop"]),
                    capture_output=True,
                    timeout=timeout_s + 5,
                )
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> Postgres:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
