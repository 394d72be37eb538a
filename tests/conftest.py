"""The test suite's own live cluster: started once per session on the test ports, in its
own folder, and stopped (and wiped) at the end. A student's lab cluster is left alone."""

from __future__ import annotations

import os
import uuid

import pytest

from cluster import settings

# Set before anything reads them, so helpers, subprocesses and kernels all see the test cluster.
TEST_HOME = settings.ROOT / ".test-cluster"
os.environ["COURSE_CLUSTER_HOME"] = str(TEST_HOME)
os.environ["COURSE_PORT_BASE"] = str(settings.TEST_PORT_BASE)
os.environ["COURSE_OWN_CLUSTER_HOME"] = str(settings.ROOT / ".test-own-cluster")   # lab 7's, in the tests
os.environ.pop("KAFKA_BOOTSTRAP_SERVERS", None)
os.environ.setdefault("LAB_NAMESPACE", "test")


def pytest_collection_modifyitems(items):
    """Every test that uses the live cluster is marked `cluster`: `make test-fast` leaves them out."""
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


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
