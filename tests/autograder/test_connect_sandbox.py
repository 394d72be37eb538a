"""A standalone Connect worker as a grader runs it (cluster/kafka_connect.py's grader mode, which
lab 11's Connect part used until that part moved to lab 13; no check uses it now): inside a
grading sandbox, in a folder of the grader's that the kernel's sandbox never sees, with a REST
API that answers only the grader. A submission can neither put a jar on its plugin path nor
drive it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest
from kafka.admin import NewTopic

from autograder.sandbox import Sandbox, available
from cluster import topic_name
from cluster.kafka_connect import ConnectWorker
from cluster.safe_files import write_text

pytestmark = [pytest.mark.heavy, pytest.mark.skipif(available() is not None, reason=f"no sandbox here: {available()}")]

SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"


def env_of(workdir: Path) -> dict[str, str]:
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(workdir / ".home"),
        "TMPDIR": str(workdir / ".tmp"),
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return env


def in_kernel_sandbox(workdir: Path, code: str) -> str:
    """What a snippet prints when run where the student's kernel runs."""
    out = subprocess.run(
        Sandbox(workdir).wrap([sys.executable, "-c", textwrap.dedent(code)]),
        env=env_of(workdir),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.strip() + out.stderr.strip()[-300:]


@pytest.fixture
def folders():
    """A grading's working folder (the kernel's sandbox) and a private folder of the grader's."""
    work, private = Path(tempfile.mkdtemp(prefix="grade-test-")), Path(tempfile.mkdtemp(prefix="grade-test-private-"))
    for sub in (".home", ".tmp"):
        (work / sub).mkdir()
    yield work, private
    subprocess.run(["rm", "-rf", str(work), str(private)], check=False)


def test_the_graders_worker_runs_sandboxed_and_answers_only_the_grader(cluster, folders):
    work, private = folders
    topic = topic_name(f"connect-{uuid.uuid4().hex[:6]}")
    admin = cluster.admin()
    admin.create_topics([NewTopic(topic, 1, 3)])
    admin.wait_for_topics([topic])
    admin.close()
    folder = private / "connect"
    folder.mkdir()
    write_text(folder, "flights.csv", "2013-01-01,UA,1545,EWR\n", mode=0o644)
    source = {
        "name": "csv-in",
        "connector.class": SOURCE,
        "tasks.max": "1",
        "file": str(folder / "flights.csv"),
        "topic": topic,
    }
    sandbox = Sandbox(work).with_writable(folder)
    launch = lambda argv, **kw: sandbox.popen(argv, env_of(work), **kw)
    with ConnectWorker(folder / "worker", [source], launch=launch, private_rest=True) as worker:
        assert worker.status()["csv-in"]["tasks"] == ["RUNNING"]  # the grader's password works
        jvm = next(p for p in psutil.Process(worker.proc.pid).children(recursive=True) if p.name() == "java")
        for ns in ("mnt", "pid"):  # the JVM is in the sandbox's namespaces, not the grader's
            assert os.readlink(f"/proc/{jvm.pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"), ns
        # The port the grader talks to is the JVM's own socket (bound as port 0), so nothing could
        # take it first and receive the grader's password.
        assert worker.port in {c.laddr.port for c in jvm.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        url = f"http://127.0.0.1:{worker.port}/connectors"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10)
        assert refused.value.code == 401
        # From the kernel's sandbox: the port answers, but nothing without the password, and
        # the worker's folder (its settings, its offsets, the connectors' files) is not there.
        seen = in_kernel_sandbox(
            work,
            f"""
            import os, urllib.request, urllib.error, json
            try:
                urllib.request.urlopen(urllib.request.Request({url!r}, method="POST",
                    data=json.dumps({{"name": "mine", "config": {{"connector.class": "FileStreamSink"}}}}).encode(),
                    headers={{"Content-Type": "application/json"}}), timeout=10)
                print("ADDED")
            except urllib.error.HTTPError as e:
                print("HTTP", e.code)
            print("folder seen:", os.path.exists({str(folder)!r}))
        """,
        )
        assert "HTTP 401" in seen and "folder seen: False" in seen, seen
        assert list(worker.status()) == ["csv-in"]
