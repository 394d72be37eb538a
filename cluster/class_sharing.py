"""Class data sharing for the brokers' JVMs, Kafka's tools and Spark's driver (the JDK's AppCDS).

A broker loads about 6,000 classes as it starts. The first cluster started with a given JVM and
classpath has its nodes write which (`-XX:DumpLoadedClassList`, a file in each node's folder);
the first `down` after that makes them into an archive in the jars cache; every later broker
start maps that archive instead of reading, parsing and verifying the classes again. Three
fault-tolerant brokers up and down took 13.4 CPU-s without it and 9.2 with it (measured, JDK 17,
2 cores), 40-46 s of wall time against 19-22 s on a busy machine: labs 7 and 15 start a cluster
per grading, the tests one per worker, a student one per `make up`.

Only ever an optimisation: with no archive, or one the JVM refuses (`-Xshare:auto`), a broker
starts as it did without; making the archive fails quietly (a read-only cache, no disk).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

from . import settings as S

logger = logging.getLogger(__name__)

CLASS_LIST = "classes.lst"  # in a node's folder, while its cluster has no archive
# A class list's lines that name a class of the class path's (its other lines are for lambdas
# and hidden classes, which the archive is made without).
CLASS_NAME = re.compile(r"[A-Za-z0-9_/$]+")
DUMP_TIMEOUT_S = 180


def _stamped(paths: list[Path]) -> list[str]:
    """Each path with its size and modification time: the JVM refuses an archive whose jars
    differ in either from those it was made of (a venv installed again at the same path)."""
    stamps = []
    for path in paths:
        stat = path.stat()
        stamps.append(f"{path} {stat.st_size} {stat.st_mtime_ns}")
    return stamps


def _archive_path(kind: str, java: str, parts: list[str]) -> Path:
    """An archive is valid for one JVM binary and one classpath as it is on disk: its name is a
    digest of both."""
    key = "\n".join([*_stamped([Path(java).resolve()]), *parts])
    return S.jars_cache() / "class-archives" / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def _class_names(lists: list[Path]) -> list[str]:
    """The classes the lists name, in order, once each (not their lambda and hidden-class lines)."""
    names: dict[str, None] = {}
    for listed in lists:
        for line in listed.read_text(errors="replace").splitlines():
            if CLASS_NAME.fullmatch(line):
                names[line] = None
    return list(names)


def archive(java: str, classpath: list[Path]) -> Path:
    """Where the archive of this JVM and classpath is (it is valid for those only)."""
    return _archive_path("brokers", java, _stamped(classpath))


def jvm_options(java: str, classpath: list[Path], node_dir: Path) -> list[str]:
    """The options of a node's JVM: use the archive, or write the class list that makes it."""
    try:
        found = archive(java, classpath)
    except OSError:
        return []
    if found.exists():
        return [f"-XX:SharedArchiveFile={found}", "-Xshare:auto"]
    return [f"-XX:DumpLoadedClassList={node_dir / CLASS_LIST}"]


def make_archive(java: str, classpath: list[Path], node_dirs: list[Path]) -> Path | None:
    """The archive from the nodes' class lists (once: at the first `down` of a JVM and
    classpath), then the lists removed. None if there was nothing to make or it failed."""
    lists = [d / CLASS_LIST for d in node_dirs if (d / CLASS_LIST).exists()]
    try:
        target = archive(java, classpath)
        if target.exists() or not lists:
            return None
        names = _class_names(lists)
        class_list = target.with_name(f".{target.name}.{os.getpid()}.lst")
        target.parent.mkdir(parents=True, exist_ok=True)
        class_list.write_text("\n".join(names) + "\n")
        try:
            made, why = _dump(java, os.pathsep.join(map(str, classpath)), class_list, target)
        finally:
            class_list.unlink(missing_ok=True)
        if made is None:
            logger.info("no class archive made: %s", why)
        return made
    except (OSError, subprocess.SubprocessError) as e:
        logger.info("no class archive made: %s", e)
        return None
    finally:
        for listed in lists:
            listed.unlink(missing_ok=True)


# --- Kafka's command-line tools (cluster/tools.py) ------------------------------------------
# A tool's JVM (kafka-topics.sh and the like) runs for a second and loads ~3,000 classes of the
# same jars every time: 0.80 CPU-s a call without an archive, 0.50 with one (measured, JDK 17, a
# quiet 2-core machine; lab 2's grading calls it twice). The JDK writes the archive itself as a
# tool's JVM exits (-XX:ArchiveClassesAtExit, a dynamic archive on top of the JDK's own): the first
# call where the jars cache is writable makes it (about a second more, once); a grading's sandbox,
# where the cache is read-only, only maps it.
QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def tools_archive(java: str, classpath: list[Path]) -> Path:
    return _archive_path("tools", java, _stamped(classpath))


def tool_options(java: str, classpath: list[Path]) -> tuple[list[str], Path | None]:
    """(a tool JVM's options, where it writes the archive as it exits or None): map the archive
    if there is one; else, if the cache can be written, have this JVM write it (keep_tool_archive
    after it ran)."""
    try:
        target = tools_archive(java, classpath)
        if target.exists():
            return [f"-XX:SharedArchiveFile={target}", "-Xshare:auto", *QUIET], None
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return [], None
    if not os.access(target.parent, os.W_OK):
        return [], None
    partial = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}")
    return [f"-XX:ArchiveClassesAtExit={partial}", *QUIET], partial


def keep_tool_archive(java: str, classpath: list[Path], partial: Path | None, ran: bool) -> None:
    """The archive a tool's JVM wrote as it exited becomes the tools' archive (whole, by rename),
    if it ran as it should; else it is removed."""
    if partial is None:
        return
    try:
        if ran and partial.exists():
            os.replace(partial, tools_archive(java, classpath))
        else:
            partial.unlink(missing_ok=True)
    except OSError as e:
        logger.info("no class archive for the tools: %s", e)


# --- Spark's driver -------------------------------------------------------------------------
# A driver loads about 13,000 classes of PySpark's jars. Its archive is made once per machine by
# `python -m cluster jars` (make jars), from a driver of the kit's own that runs the kinds of
# query the labs run; never from a student's driver. A session with it: 5.0 CPU-s and 16 s
# against 8.3 CPU-s and 36 s without (a local session and one count, measured on a busy 2-core
# machine). The connector's jars (spark.jars) load through Spark's own class loader: not in it.
SPARK_SAMPLE = """
import sys, tempfile
from cluster.spark import spark_session
spark = spark_session("class-archive", **{"spark.driver.extraJavaOptions": sys.argv[1]})
with tempfile.TemporaryDirectory() as tmp:
    df = spark.range(1000).selectExpr("id % 7 AS k", "id AS v", "current_timestamp() AS t")
    df.groupBy("k").count().collect()
    df.write.parquet(tmp + "/p")
    spark.read.parquet(tmp + "/p").join(df, "k").count()
    q = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
         .withWatermark("timestamp", "1 second").groupBy(__import__("pyspark.sql.functions", fromlist=["f"])
         .window("timestamp", "1 second")).count()
         .writeStream.format("parquet").option("path", tmp + "/s").option("checkpointLocation", tmp + "/c")
         .outputMode("append").start())
    q.processAllAvailable(); q.stop()
open(sys.argv[2], "w").write(spark.sparkContext._jvm.System.getProperty("java.class.path"))
spark.stop()
"""


def spark_archive(java: str) -> Path:
    """Where the driver's archive of this JVM and this PySpark's jars is."""
    import pyspark

    jars_dir = Path(pyspark.__file__).parent / "jars"
    return _archive_path("spark", java, _stamped(sorted(jars_dir.iterdir())))


def spark_options(java: str) -> str:
    """The driver's JVM options that map its archive, or "" where there is none. The JVM checks
    the archive against the classpath itself: one it refuses costs nothing and says nothing."""
    try:
        found = spark_archive(java)
    except (OSError, ImportError):
        return ""
    return f" -XX:SharedArchiveFile={found} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off" if found.exists() else ""


def make_spark_archive(java: str, timeout_s: float = 600) -> tuple[Path | None, str]:
    """The driver's archive (once): (its path, "") if it exists or was made, else (None, why)."""
    import tempfile

    target = spark_archive(java)
    if target.exists():
        return target, ""
    with tempfile.TemporaryDirectory(prefix="spark-class-list-") as tmp:
        listed, classpath = Path(tmp) / "classes.lst", Path(tmp) / "classpath"
        from .spark import LAPTOP_CONF

        options = f"{LAPTOP_CONF['spark.driver.extraJavaOptions']} -XX:DumpLoadedClassList={listed}"
        env = dict(os.environ, COURSE_SPARK_UI="off", SPARK_MASTER="local[2]")
        try:
            ran = subprocess.run(
                [sys.executable, "-c", SPARK_SAMPLE, options, str(classpath)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
                cwd=tmp,
            )
        except subprocess.TimeoutExpired:
            return None, f"the sample driver did not end within {timeout_s:.0f} s"
        if ran.returncode != 0 or not classpath.exists() or not listed.exists():
            return None, f"the sample driver failed (exit {ran.returncode}): {ran.stderr.strip()[-300:]}"
        listed.write_text("\n".join(_class_names([listed])) + "\n")
        made, why = _dump(java, classpath.read_text(), listed, target)
        if made is not None:  # beside it, the classpath it was made for (tests map it with -Xshare:on)
            made.with_suffix(".classpath").write_text(classpath.read_text())
        return made, why


def _dump(java: str, classpath: str, class_list: Path, target: Path) -> tuple[Path | None, str]:
    """java -Xshare:dump into target, whole or not at all (another process may be at it too)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        done = subprocess.run(
            [
                java,
                "-Xshare:dump",
                f"-XX:SharedClassListFile={class_list}",
                f"-XX:SharedArchiveFile={partial}",
                "-cp",
                classpath,
            ],
            capture_output=True,
            text=True,
            timeout=DUMP_TIMEOUT_S,
        )
        if done.returncode != 0 or not partial.exists():
            return (
                None,
                f"java -Xshare:dump failed (exit {done.returncode}): {(done.stdout + done.stderr).strip()[-300:]}",
            )
        os.replace(partial, target)
        return target, ""
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"java -Xshare:dump failed: {e}"
    finally:
        partial.unlink(missing_ok=True)
