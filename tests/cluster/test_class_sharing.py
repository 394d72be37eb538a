"""The brokers' class archive (cluster/class_sharing.py): made once from the nodes' class lists,
then used by every JVM of that classpath; a JVM that refuses it would not start with -Xshare:on."""

import os
import subprocess

from cluster import class_sharing, jars
from cluster.java import java_executable


def test_class_lists_become_an_archive_that_the_jvm_maps(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_JARS_CACHE", str(tmp_path / "cache"))
    java, classpath = java_executable(), jars.kafka_classpath()
    nodes = [tmp_path / "node-1", tmp_path / "node-2"]
    for node in nodes:
        node.mkdir()

    # No archive yet: each node writes the classes it loads.
    assert class_sharing.jvm_options(java, classpath, nodes[0]) == [
        f"-XX:DumpLoadedClassList={nodes[0] / class_sharing.CLASS_LIST}"
    ]
    # Two lists, with what the JDK also writes there (lambda lines) and a line two JVMs mixed up.
    (nodes[0] / class_sharing.CLASS_LIST).write_text(
        "# NOTE: Do not modify this file.\njava/lang/Object\norg/apache/kafka/common/utils/Utils\n"
        "@lambda-proxy java/lang/Runnable run ()V\n"
    )
    (nodes[1] / class_sharing.CLASS_LIST).write_text("java/lang/Object\norg/apache/kafka/common/Uuid\norg/apa@lam\n")
    made = class_sharing.make_archive(java, classpath, nodes)
    assert made is not None and made == class_sharing.archive(java, classpath) and made.stat().st_size > 0
    assert not any((node / class_sharing.CLASS_LIST).exists() for node in nodes)  # used up

    options = class_sharing.jvm_options(java, classpath, nodes[0])
    assert options == [f"-XX:SharedArchiveFile={made}", "-Xshare:auto"]
    mapped = subprocess.run(
        [java, f"-XX:SharedArchiveFile={made}", "-Xshare:on", "-cp", ":".join(map(str, classpath)), "-version"],
        capture_output=True,
        text=True,
    )
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr
    # Made once: a second cluster's lists change nothing.
    (nodes[0] / class_sharing.CLASS_LIST).write_text("java/lang/String\n")
    assert class_sharing.make_archive(java, classpath, nodes) is None


def test_another_classpath_has_another_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_JARS_CACHE", str(tmp_path))
    java, classpath = java_executable(), jars.kafka_classpath()
    assert class_sharing.archive(java, classpath) != class_sharing.archive(java, classpath[:-1])
    assert class_sharing.make_archive(java, classpath, [tmp_path / "no-node"]) is None  # nothing listed


def test_a_jar_installed_again_has_another_archive(tmp_path, monkeypatch):
    """The JVM refuses an archive whose jars changed size or time (a venv installed again at the
    same path, as CI does): such a classpath is another archive's, not the stale one's."""
    monkeypatch.setenv("COURSE_JARS_CACHE", str(tmp_path / "cache"))
    java = java_executable()
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"PK")
    before = class_sharing.archive(java, [jar])
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000_000))
    assert class_sharing.archive(java, [jar]) != before


def test_spark_drivers_map_the_archive_make_jars_made():
    """`make jars` (CI's first step) makes the drivers' archive; spark_session's drivers get the
    options that map it, and a JVM with Spark's classpath maps it with -Xshare:on (which refuses
    to start on an archive it cannot use)."""
    import pytest

    from cluster.spark import driver_class_archive

    java = java_executable()
    archive = class_sharing.spark_archive(java)
    if not archive.exists():
        pytest.skip(f"no Spark class archive at {archive}: `python -m cluster jars` makes it")
    assert f"-XX:SharedArchiveFile={archive}" in driver_class_archive()
    classpath = archive.with_suffix(".classpath").read_text()
    mapped = subprocess.run(
        [java, f"-XX:SharedArchiveFile={archive}", "-Xshare:on", "-cp", classpath, "-version"],
        capture_output=True,
        text=True,
    )
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr


def test_a_tools_jvm_writes_the_archive_the_next_ones_map(cluster, tmp_path, monkeypatch):
    """kafka_cli's first call where the cache can be written leaves the tools' archive (the JVM
    writes it as it exits); later calls map it, and a JVM of the tools' classpath maps it with
    -Xshare:on. A made archive is whole: no partial file is left beside it."""
    from cluster.tools import kafka_cli

    java, classpath = java_executable(), jars.jars("kafka-tools")
    monkeypatch.setenv("COURSE_JARS_CACHE", str(tmp_path))  # an empty cache for the archives
    monkeypatch.setattr(jars, "jars", lambda bundle, _jars=jars.jars: classpath)  # the jars where they are
    target = class_sharing.tools_archive(java, classpath)
    assert not target.exists() and class_sharing.tool_options(java, classpath)[1] is not None
    kafka_cli("topics", "--list", echo=False)
    assert target.exists() and [p.name for p in target.parent.iterdir()] == [target.name]
    assert class_sharing.tool_options(java, classpath) == (
        [f"-XX:SharedArchiveFile={target}", "-Xshare:auto", *class_sharing.QUIET],
        None,
    )
    kafka_cli("topics", "--list", echo=False)  # maps it
    mapped = subprocess.run(
        [java, f"-XX:SharedArchiveFile={target}", "-Xshare:on", "-cp", ":".join(map(str, classpath)), "-version"],
        capture_output=True,
        text=True,
    )
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr
