"""Jars from Maven Central, by the pinned coordinates in pyproject.toml.

jgo resolves each bundle (Kafka's broker, Spark's Kafka connector) the way Maven would,
downloads it once into the cache (settings.jars_cache()) and links it into an environment
folder; later runs find that folder and need no network. cluster/jars.lock.toml records
what each bundle resolved to, with checksums; `python -m cluster jars --check` fails when
the lock is stale, `--update` rewrites it.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from . import settings
from .errors import ClusterError

LOCK_FILE = Path(__file__).with_name("jars.lock.toml")
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"


def _builder():
    from jgo.env import EnvironmentBuilder, LinkStrategy
    from jgo.maven import MavenContext

    cache = settings.jars_cache()
    context = MavenContext(repo_cache=cache / "m2", remote_repos={"central": MAVEN_CENTRAL})
    return EnvironmentBuilder(context=context, cache_dir=cache / "envs", link_strategy=LinkStrategy.AUTO)


def bundle(name: str, update: bool = False):
    """The jgo Environment of one bundle ("kafka" or "spark-kafka"), built if needed. jgo
    relinks some bundles' folders on every call (kafka-tools, kafka-connect): processes that ask
    at once take turns (a lock file), and jars() hands out the cache's own files, so a JVM that
    is running never reads a link another process is replacing."""
    import fcntl

    coords = settings.pins()["maven"][name]
    try:
        lock = open(settings.jars_cache() / ".envs.lock", "a")
    except OSError:  # a read-only cache (the grading sandbox's): nothing is built there
        lock = None
    try:
        if lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
        return _builder().from_endpoint("+".join(coords), update=update)
    except Exception as e:  # jgo raises requests, OSError and its own errors alike
        raise ClusterError(
            f"Could not fetch the {name} jars ({', '.join(c.rstrip('!') for c in coords)}) "
            f"from Maven Central: {type(e).__name__}: {e}",
            hint="The first run needs the network to reach Maven Central; later runs use "
            f"the cache in {settings.jars_cache()}. Check your connection or proxy "
            "(HTTPS_PROXY) and run `make jars` again.",
        ) from e
    finally:
        if lock:
            lock.close()


def read_only_cache() -> bool:
    """The jars cache is there but may not be written: the grading sandbox's (the grader's cache,
    mounted read-only), or another user's on a shared machine."""
    cache = settings.jars_cache()
    envs = cache / "envs"
    return cache.exists() and not os.access(envs if envs.exists() else cache, os.W_OK)


def locked_jars(name: str) -> list[Path]:
    """The bundle's jars as the committed lock file names them, in the Maven cache, without jgo:
    where the cache is read-only, jgo cannot open a bundle at all (it links some bundles'
    folders, kafka-tools' among them, again on every call), and `make jars` outside has checked
    the cache against this lock already."""
    repo = settings.jars_cache() / "m2"
    entries = locked().get(name, {})
    found = []
    for key, entry in entries.items():
        group, artifact = key.split(":")
        version = entry["version"]
        found.append(repo / group.replace(".", "/") / artifact / version / f"{artifact}-{version}.jar")
    missing = [p for p in found if not p.exists()]
    if not entries or missing:
        raise ClusterError(
            f"The jars cache {settings.jars_cache()} may not be written here, and it lacks the {name} jars "
            f"({missing[0].name if missing else 'none locked'}).",
            hint="Run `make jars` (python -m cluster jars) where the cache can be written (outside the "
            "grading sandbox), then this again.",
        )
    return sorted(found, key=lambda p: p.name)


def jars(name: str) -> list[Path]:
    """The bundle's jars, as the Maven cache's own files, from the environment's lock (read
    while building it): the environment's folder holds hard links to them, which jgo may be
    replacing while a JVM, or another process listing them, reads the folder. In a read-only
    cache (the grading sandbox), from the committed lock file (locked_jars)."""
    if read_only_cache():
        return locked_jars(name)
    env = bundle(name)
    repo = settings.jars_cache() / "m2"
    found = []
    for d in env.lockfile.dependencies:
        file = f"{d.artifactId}-{d.version}" + (f"-{d.classifier}" if d.classifier else "") + ".jar"
        found.append(repo / d.groupId.replace(".", "/") / d.artifactId / d.version / file)
    if not all(p.exists() for p in found):  # a cache laid out otherwise: the links, then
        found = list(env.all_jars)
    return sorted(found, key=lambda p: p.name)


def kafka_classpath() -> list[Path]:
    """The broker's classpath: $KAFKA_HOME/libs when KAFKA_HOME is set, else the bundle."""
    home = settings.env("KAFKA_HOME")
    if home:
        libs = sorted((Path(home) / "libs").glob("*.jar"))
        if not libs:
            raise ClusterError(
                f"KAFKA_HOME={home} has no libs/*.jar",
                hint="Point KAFKA_HOME at an unpacked Kafka 4.x release, or unset it.",
            )
        return libs
    return jars("kafka")


POLICY_SOURCES = sorted((Path(__file__).parent / "policy").glob("*.java"))
SHARE_MEMBER_SOURCES = sorted((Path(__file__).parent / "share_member").glob("*.java"))


def policy_jar() -> Path:
    """The brokers' topic policies (cluster/policy/: the partition budget, the settings' bounds), compiled once per source and Kafka
    version into the jar cache with the JDK's javac."""
    return compiled_jar(POLICY_SOURCES, "policy", "course-policy", "the brokers' topic policy")


def share_member_jar() -> Path:
    """The share-group member that cluster/share.py drives (cluster/share_member/), compiled once
    per source and Kafka version into the jar cache, as the topic policy is."""
    return compiled_jar(SHARE_MEMBER_SOURCES, "share-member", "course-share-member", "the share-group member")


def compiled_jar(sources: list[Path], folder: str, name: str, what: str) -> Path:
    """Java sources of the kit's, compiled against the pinned kafka-clients into
    <jar cache>/<folder>/<digest>/<name>.jar, once per source and Kafka version."""
    import hashlib
    import subprocess
    import tempfile

    from .java import INSTALL_HINT, java_executable

    clients = [p for p in kafka_classpath() if p.name.startswith("kafka-clients-")]
    digest = hashlib.sha256(
        b"".join(p.read_bytes() for p in sources) + "".join(p.name for p in clients).encode()
    ).hexdigest()[:16]
    target = settings.jars_cache() / folder / digest / f"{name}.jar"
    if target.exists():
        return target
    bin_dir = Path(java_executable()).resolve().parent
    javac, jar = bin_dir / "javac", bin_dir / "jar"
    if not javac.exists():
        raise ClusterError(
            f"{bin_dir} has `java` but no `javac`: {what} is compiled "
            "once from the kit's sources, which needs a JDK, not only a JRE.",
            hint=INSTALL_HINT,
        )
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                str(javac),
                "--release",
                "17",
                "-nowarn",
                "-cp",
                os.pathsep.join(map(str, clients)),
                "-d",
                tmp,
                *map(str, sources),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if out.returncode != 0:
            raise ClusterError(f"Compiling {what} failed.", log_tail=(out.stdout + out.stderr)[-3000:])
        target.parent.mkdir(parents=True, exist_ok=True)
        # a name of this process's own, then an atomic rename: two processes (pytest's workers, two
        # users' `make up`) may compile the same new version at once; the last rename wins, equal
        partial = target.with_name(f"{name}.{os.getpid()}.partial")
        subprocess.run([str(jar), "cf", str(partial), "-C", tmp, "."], check=True, capture_output=True, timeout=120)
        os.replace(partial, target)
    return target


def metrics_agent() -> Path:
    """The Prometheus JMX exporter's Java agent (one shaded jar): `-javaagent:` of the brokers of a
    cluster of one's own (Settings.metrics)."""
    (agent,) = jars("jmx-exporter")
    return agent


def broker_classpath() -> list[Path]:
    """What a broker runs with: Kafka and the course's topic policy."""
    return [*kafka_classpath(), policy_jar()]


def locked() -> dict[str, dict[str, dict[str, str]]]:
    """What the committed lock file says: bundle -> "group:artifact" -> {version, sha256}."""
    with open(LOCK_FILE, "rb") as f:
        return tomllib.load(f)


def resolved(name: str) -> dict[str, dict[str, str]]:
    """What the bundle resolves to now, in the lock file's shape."""
    lock = bundle(name).lockfile
    return {
        f"{d.groupId}:{d.artifactId}": {"version": d.version, "sha256": d.sha256}
        for d in sorted(lock.dependencies, key=lambda d: (d.groupId, d.artifactId))
    }


def lock_differences() -> list[str]:
    """One line per artifact where the cache and the committed lock disagree."""
    want = locked() if LOCK_FILE.exists() else {}
    lines = []
    for name in settings.pins()["maven"]:
        have = resolved(name)
        w = want.get(name, {})
        for key in sorted(set(have) | set(w)):
            if have.get(key) != w.get(key):
                lines.append(f"{name}: {key}: lock says {w.get(key)}, resolved {have.get(key)}")
    return lines


def write_lock() -> None:
    import tomli_w

    data = {name: resolved(name) for name in settings.pins()["maven"]}
    header = "# Written by `python -m cluster jars --update`; checked by `--check`. Do not edit.\n"
    LOCK_FILE.write_text(header + tomli_w.dumps(data))
