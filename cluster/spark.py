"""A SparkSession wired to the course's Kafka cluster.

    from cluster import spark_session
    spark = spark_session()
    df = spark.readStream.format("kafka").options(**kafka_options("my-topic"))

Local mode by default (SPARK_MASTER overrides it, e.g. spark://spark-master:7077 under
docker compose, or the master of `standalone()` below). The Kafka connector's jars come from the pinned, cached bundle; jars that
PySpark already ships are left out so no class is on the classpath twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from . import jars
from . import settings as course_settings
from .clients import account, bootstrap_servers, group_name
from .waiting import wait_for

# Sized for an 8 GB laptop that also runs three brokers and JupyterLab.
LAPTOP_CONF = {
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": "4",  # 200 by default: far too many for lab-sized data
    "spark.default.parallelism": "2",
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.killEnabled": "false",  # the UI shows jobs; it need not stop them for anyone who finds it
    "spark.sql.session.timeZone": "UTC",
    # C1 only: a lab's jobs are small and short, and the second JIT compiler costs a third of a
    # driver's CPU before the first query has run (measured: 12.5 s -> 8.8 s of CPU per session);
    # the course's logging (LOG_CONFIG) is added by spark_session
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}
# The driver's logging: warnings on stderr, without the lines every start and restart prints
LOG_CONFIG = Path(__file__).with_name("spark-log4j2.properties")


def connector_jars() -> list[Path]:
    """The connector bundle minus the artifacts PySpark ships itself."""
    import pyspark

    # "scala-library-2.13.16.jar" -> "scala-library": any version PySpark ships wins.
    shipped = {p.name.rsplit("-", 1)[0] for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    env = jars.bundle("spark-kafka")
    artifact_of = {f"{d.artifactId}-{d.version}.jar": d.artifactId for d in env.lockfile.dependencies}
    return sorted((jar for jar in env.all_jars if artifact_of.get(jar.name) not in shipped), key=lambda p: p.name)


def kafka_options(topic: str | None = None, own: bool = False, **extra: str) -> dict[str, str]:
    """Options for spark.read(Stream).format("kafka") on this cluster: where it is and your
    login (Spark passes every "kafka."-prefixed option to its Kafka clients). own=True: your
    cluster of your own instead (cluster/own.py; the grader's, while a notebook is graded)."""
    if own:
        from .own import servers_and_account

        servers, login = servers_and_account()
    else:
        servers, login = bootstrap_servers(), account()
    opts = {
        "kafka.bootstrap.servers": servers,
        **{f"kafka.{k}": v for k, v in login.java().items()},
        # Spark's readers name their consumer groups with this prefix: inside your namespace.
        "groupIdPrefix": group_name("spark"),
    }
    if topic:
        opts["subscribe"] = topic
    opts.update(extra)
    return opts


def spark_session(app_name: str = "kafka-course", master: str | None = None, **conf: str):
    """Get (or create) the SparkSession, with the Kafka connector on its classpath."""
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    if existing is not None:
        # The builder would say on stderr that only runtime SQL settings apply to a session that
        # runs already (every check and every re-run cell asks again): apply those, quietly.
        for key, value in conf.items():
            if key.startswith("spark.sql."):
                existing.conf.set(key, value)
        return existing
    master = master or course_settings.env_value("SPARK_MASTER")
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = dict(LAPTOP_CONF, **{"spark.jars": ",".join(str(p) for p in connector_jars())})
    settings["spark.driver.extraJavaOptions"] += f" -Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}"
    settings["spark.driver.extraJavaOptions"] += driver_class_archive()
    if master.startswith("local"):
        # Python workers with the kernel's own interpreter: Spark starts `python3` from the PATH
        # otherwise, which on many laptops is another Python, without pyspark's packages.
        settings["spark.pyspark.python"] = sys.executable
        # That setting reaches spark-submit's workers only: a session made in Python takes its
        # workers' interpreter from PYSPARK_PYTHON when the SparkContext starts (pyspark's
        # context.py), else `python3`; without it, a Python UDF or transformWithStateInPandas
        # fails with "No module named 'pyarrow'" (or 'pandas').
        os.environ["PYSPARK_PYTHON"] = sys.executable
        # The driver's RPC and block ports listen on the machine's network, which other users'
        # (and, while grading, other submissions') code shares: only a holder of this session's
        # own secret is let in. In local mode Spark makes the secret itself, in the driver (a
        # secret in the settings would show in `ps` on the command line). A standalone master
        # and worker would need one given to all three, so they go without.
        settings["spark.authenticate"] = "true"
    if course_settings.env("COURSE_SPARK_UI") == "off":
        settings["spark.ui.enabled"] = "false"
    settings.update(conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


# Stopping a query in real-time mode interrupts its long-running batch: Spark then logs, as errors
# with Java stack traces, the write it aborts and the task it kills. That is what stopping means
# there; nothing went wrong.
REAL_TIME_STOP_LOGGERS = (
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec",
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
    "org.apache.spark.util.Utils",
    "org.apache.spark.scheduler.TaskSetManager",
)
STOP_SETTLE_S = 10  # for the stopped query's tasks to end
STOP_GRACE_S = 1


def stop_quietly(query) -> None:
    """Stop a streaming query (lab 10: one in real-time mode) without the lines Spark logs for
    the batch it interrupts; every other line of those loggers, before and after, still shows."""
    import time

    from pyspark import SparkContext

    sc = SparkContext.getOrCreate()  # the running session's
    jvm = sc._jvm
    assert jvm is not None  # a running SparkContext has its JVM
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    levels = {
        name: jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel() for name in REAL_TIME_STOP_LOGGERS
    }
    for name in levels:
        configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.OFF)
    try:
        query.stop()
        tracker, deadline = sc.statusTracker(), time.monotonic() + STOP_SETTLE_S
        while tracker.getActiveStageIds() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(STOP_GRACE_S)  # a killed task reports back after its stage is gone
    finally:
        for name, level in levels.items():
            configurator.setLevel(name, level)


def driver_class_archive() -> str:
    """The driver's options that map the class archive `make jars` made (cluster/class_sharing.py), or ""."""
    from .class_sharing import spark_options
    from .errors import ClusterError
    from .java import java_executable

    try:
        return spark_options(java_executable())
    except ClusterError:  # no Java: Spark says so itself, in its own words
        return ""


STANDALONE_READY_S = 90  # for the master to start and the worker to register with it


@contextmanager
def standalone(
    folder: Path,
    port: int = 7077,
    web_port: int = 8080,
    worker_web_port: int = 8081,
    cores: int = 1,
    memory: str = "1g",
):
    """A Spark standalone cluster on this machine: a master and one worker, started by the
    pinned pyspark's own launcher (bin/spark-class), the same classes docker-compose.yml runs.
    Yields the master's URL (for SPARK_MASTER) once the worker has registered and is ALIVE;
    stops both at the end. Logs and the worker's files go in `folder`."""
    import pyspark

    home = Path(pyspark.__file__).parent
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_DAEMON_MEMORY="256m",
        SPARK_LOG_DIR=str(folder),
    )
    url = f"spark://127.0.0.1:{port}"
    commands = {
        "master": [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(web_port),
        ],
        "worker": [
            "org.apache.spark.deploy.worker.Worker",
            url,
            "--host",
            "127.0.0.1",
            "--cores",
            str(cores),
            "--memory",
            memory,
            "--webui-port",
            str(worker_web_port),
            "--work-dir",
            str(folder / "work"),
        ],
    }
    procs: dict[str, subprocess.Popen] = {}
    try:
        for name, args in commands.items():
            with open(folder / f"{name}.log", "wb") as log:
                procs[name] = subprocess.Popen(
                    [str(home / "bin" / "spark-class"), *args],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )

        def a_worker_alive() -> bool:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    tail = (folder / f"{name}.log").read_text(errors="replace")[-1500:]
                    raise RuntimeError(f"the Spark {name} exited ({proc.returncode}) while starting:\n{tail}")
            return any(w.get("state") == "ALIVE" for w in master_state(web_port).get("workers", []))

        if not wait_for(a_worker_alive, timeout_s=STANDALONE_READY_S, every_s=0.5):
            raise RuntimeError(
                f"no Spark worker registered with {url} within {STANDALONE_READY_S} s; "
                f"see {folder}/master.log and worker.log"
            )
        yield url
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def master_state(web_port: int) -> dict:
    """The standalone master's state (its web UI's /json): workers, applications; {} if it does
    not answer yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=2) as reply:
            return json.load(reply)
    except (OSError, ValueError):
        return {}
