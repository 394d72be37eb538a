"""Class data sharing for the brokers' JVMs (the JDK's AppCDS).

A broker loads about 6,000 classes as it starts. The first cluster started with a given JVM and
classpath has its nodes write which (`-XX:DumpLoadedClassList`, a file in each node's folder);
the first `down` after that makes them into an archive in the jars cache; every later broker
start maps that archive instead of reading, parsing and verifying the classes again. Three
fault-tolerant brokers up and down took 13.4 CPU-s without it and 9.2 with it (measured, JDK 17,
2 cores), 40-46 s of wall time against 19-22 s on a busy machine: labs 7 and 13 start a cluster
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
from pathlib import Path

from . import settings as S

logger = logging.getLogger(__name__)

CLASS_LIST = "classes.lst"  # in a node's folder, while its cluster has no archive
# A class list's lines that name a class of the class path's (its other lines are for lambdas
# and hidden classes, which the archive is made without).
CLASS_NAME = re.compile(r"[A-Za-z0-9_/$]+")
DUMP_TIMEOUT_S = 180


def archive(java: str, classpath: list[Path]) -> Path:
    """Where the archive of this JVM and classpath is (it is valid for those only)."""
    binary = Path(java).resolve()
    stat = binary.stat()
    key = "\n".join([str(binary), str(stat.st_size), str(stat.st_mtime_ns), *map(str, classpath)])
    return S.jars_cache() / "class-archives" / f"brokers-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


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
        names: dict[str, None] = {}  # in order, once each
        for listed in lists:
            for line in listed.read_text(errors="replace").splitlines():
                if CLASS_NAME.fullmatch(line):
                    names[line] = None
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        class_list = partial.with_suffix(".lst")
        class_list.write_text("\n".join(names) + "\n")
        try:
            done = subprocess.run(
                [
                    java,
                    "-Xshare:dump",
                    f"-XX:SharedClassListFile={class_list}",
                    f"-XX:SharedArchiveFile={partial}",
                    "-cp",
                    os.pathsep.join(map(str, classpath)),
                ],
                capture_output=True,
                text=True,
                timeout=DUMP_TIMEOUT_S,
            )
            if done.returncode != 0 or not partial.exists():
                logger.info(
                    "no class archive made (exit %s): %s", done.returncode, done.stdout[-500:] + done.stderr[-500:]
                )
                return None
            os.replace(partial, target)  # whole or not at all: another cluster may be starting
            return target
        finally:
            partial.unlink(missing_ok=True)
            class_list.unlink(missing_ok=True)
    except (OSError, subprocess.SubprocessError) as e:
        logger.info("no class archive made: %s", e)
        return None
    finally:
        for listed in lists:
            listed.unlink(missing_ok=True)
