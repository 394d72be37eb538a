"""The course's Kafka cluster and how to reach it.

    from cluster import Cluster, connection, topic_name, spark_session

`Cluster` runs the local three-broker cluster (`python -m cluster --help` for the CLI);
`connection()` gives a client where Kafka is and your login, `namespace()` which names are
your own, whichever way the cluster runs (local, docker compose, hosted).
"""

from . import kafka_python_fix  # noqa: F401  (a race in kafka-python 3.0.12's group joins; see the module)
from .clients import (
    admin_connection,
    bootstrap_servers,
    connection,
    group_name,
    mode,
    namespace,
    topic_name,
    transactional_id,
)
from .errors import ClusterError
from .brokers import Cluster, NodeStatus


def spark_session(*args, **kwargs):
    """A SparkSession wired to the cluster (see cluster/spark.py). Imported on first use:
    PySpark is slow to import and most labs do not need it."""
    from .spark import spark_session as make

    return make(*args, **kwargs)


__all__ = [
    "Cluster",
    "ClusterError",
    "NodeStatus",
    "admin_connection",
    "bootstrap_servers",
    "connection",
    "group_name",
    "mode",
    "namespace",
    "spark_session",
    "topic_name",
    "transactional_id",
]
