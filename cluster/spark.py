"""A SparkSession wired to the course's Kafka cluster.

    from cluster import spark_session
    spark = spark_session()
    df = spark.readStream.format("kafka").options(**kafka_options("my-topic"))

Local mode by default (SPARK_MASTER overrides it, e.g. spark://spark-master:7077 under
docker compose). The Kafka connector's jars come from the pinned, cached bundle; jars that
PySpark already ships are left out so no class is on the classpath twice.
"""

from __future__ import annotations

from pathlib import Path

from . import jars
from . import settings as course_settings
from .connect import account, bootstrap_servers, group_name

# Sized for an 8 GB laptop that also runs three brokers and JupyterLab.
LAPTOP_CONF = {
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": "4",   # 200 by default: far too many for lab-sized data
    "spark.default.parallelism": "2",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
}


def connector_jars() -> list[Path]:
    """The connector bundle minus the artifacts PySpark ships itself."""
    import pyspark

    # "scala-library-2.13.16.jar" -> "scala-library": any version PySpark ships wins.
    shipped = {p.name.rsplit("-", 1)[0] for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    env = jars.bundle("spark-kafka")
    artifact_of = {f"{d.artifactId}-{d.version}.jar": d.artifactId for d in env.lockfile.dependencies}
    return sorted((jar for jar in env.all_jars if artifact_of.get(jar.name) not in shipped),
                  key=lambda p: p.name)


def kafka_options(topic: str | None = None, **extra: str) -> dict[str, str]:
    """Options for spark.read(Stream).format("kafka") on this cluster: where it is and your
    login (Spark passes every "kafka."-prefixed option to its Kafka clients)."""
    opts = {"kafka.bootstrap.servers": bootstrap_servers(),
            **{f"kafka.{k}": v for k, v in account().java().items()},
            # Spark's readers name their consumer groups with this prefix: inside your namespace.
            "groupIdPrefix": group_name("spark")}
    if topic:
        opts["subscribe"] = topic
    opts.update(extra)
    return opts


def spark_session(app_name: str = "kafka-course", master: str | None = None, **conf: str):
    """Get (or create) the SparkSession, with the Kafka connector on its classpath."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).master(
        master or course_settings.env("SPARK_MASTER"))
    settings = dict(LAPTOP_CONF, **{"spark.jars": ",".join(str(p) for p in connector_jars())})
    settings.update(conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
