"""The test suite's own live cluster: started once per session on the test ports, in its
own folder, and stopped (and wiped) at the end. A student's lab cluster is left alone.

`make test` runs the suite in two processes (pytest-xdist, `-n 2 --dist loadscope`): the
self-test's gradings, which keep both cores busy on their own, in one while the other runs
everything else; each process has a cluster of its own (its own ports and folder), so a test
that kills brokers never touches a grading. Each test module stays in one process."""

from __future__ import annotations

import os
import uuid

import pytest

from cluster import settings

# pytest-xdist's worker number (gw0, gw1, ...): 0 without xdist.
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)
SUFFIX = f"-{WORKER}" if WORKER else ""
# Set before anything reads them, so helpers, subprocesses and kernels all see the test cluster.
TEST_HOME = settings.ROOT / f".test-cluster{SUFFIX}"
os.environ["COURSE_CLUSTER_HOME"] = str(TEST_HOME)
os.environ["COURSE_PORT_BASE"] = str(settings.TEST_PORT_BASE + settings.TEST_WORKER_PORT_STEP * WORKER)
os.environ["COURSE_OWN_CLUSTER_HOME"] = str(settings.ROOT / f".test-own-cluster{SUFFIX}")  # lab 7's, in the tests
os.environ.pop("KAFKA_BOOTSTRAP_SERVERS", None)
os.environ.setdefault("LAB_NAMESPACE", "test")


def pytest_collection_modifyitems(items):
    """Every test that uses the live cluster is marked `cluster`: `make test-fast` leaves them out.
    The self-test comes first, so that under xdist one process starts on it at once (it takes
    the longest) while the other works through the rest."""
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
    first = (
        "tests/autograder/test_selftest.py",
        "tests/autograder/test_selftest_heavy.py",
        "tests/autograder/test_selftest_capstone.py",
    )
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in first)


@pytest.fixture(scope="session")
def cluster():
    from cluster import Cluster

    c = Cluster()
    c.down(wipe=True)  # leftovers of an interrupted run
    c.up()
    yield c
    c.down(wipe=True)


@pytest.fixture
def healthy(cluster):
    """The cluster, with every broker back and working after the test (fault tests)."""
    yield cluster
    for node in cluster.nodes:
        cluster.start_broker(node)
    cluster.wait_ready()


@pytest.fixture
def admin(cluster):
    a = cluster.admin()
    yield a
    a.close()


@pytest.fixture
def topic(admin):
    """A fresh topic name, deleted after the test."""
    name = f"test.{uuid.uuid4().hex[:10]}"
    yield name
    try:
        admin.delete_topics([name])
    except Exception:
        pass
