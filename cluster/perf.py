"""The Java client's own producer perf test (`kafka-producer-perf-test.sh` in a Kafka release),
run from the pinned kafka-tools jars against this cluster as you: lab 8's physical reference
for what one producer can do on this hardware.

    from cluster.perf import java_producer_perf
    java_producer_perf(lab.topic("perf"), records=200_000, record_size=100, acks="all")
    # {'records': 200000, 'records_per_s': 59123.4, 'mb_per_s': 5.64, 'avg_ms': 310.2, ..., 'p99_ms': 480}
"""

from __future__ import annotations

import os
import re
import subprocess

from . import jars
from .clients import account, bootstrap_servers
from .errors import ClusterError
from .java import java_executable
from .process import login_file

# The tool's summary line, e.g. "200000 records sent, 59123.4 records/sec (5.64 MB/sec), 310.20 ms avg
# latency, 612.00 ms max latency, 290 ms 50th, 520 ms 95th, 580 ms 99th, 610 ms 99.9th."
SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)
FIELDS = ("records", "records_per_s", "mb_per_s", "avg_ms", "max_ms", "p50_ms", "p95_ms", "p99_ms", "p999_ms")


def java_producer_perf(
    topic: str, records: int = 200_000, record_size: int = 100, timeout_s: float = 180, **producer_props: str
) -> dict:
    """Send `records` records of `record_size` bytes to `topic` (a full name) as fast as the
    Java client can, with the given producer settings (Java names with _ for ., e.g.
    batch_size="1048576", linger_ms="20"). Returns the tool's summary as a dict."""
    props = {
        **account().java(),
        "bootstrap.servers": bootstrap_servers(),
        **{k.replace("_", "."): str(v) for k, v in producer_props.items()},
    }
    with login_file(props) as login:
        cmd = [
            java_executable(),
            "-Xmx384m",
            "-Dorg.apache.logging.log4j.level=WARN",
            "-cp",
            os.pathsep.join(map(str, jars.jars("kafka-tools"))),
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--record-size",
            str(record_size),
            "--throughput",
            "-1",
            "--producer.config",
            login,
        ]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ClusterError(
                f"The Java perf test did not finish {records} records within {timeout_s:.0f} s.",
                hint="Is every broker up (`python -m cluster status`)? Try fewer records.",
            ) from None
    found = [m for line in out.stdout.splitlines() if (m := SUMMARY.search(line))]
    if out.returncode != 0 or not found:
        tail = (out.stderr or out.stdout).strip().splitlines()[-5:]
        raise ClusterError(
            f"The Java perf test failed (exit code {out.returncode}): " + " | ".join(tail),
            hint="Check the topic's name (the full one, lab.topic(...)) and that the cluster is up.",
        )
    values = found[-1].groups()  # the last line sums up the whole run; earlier ones are progress
    return {
        k: (int(v) if k in ("records", "p50_ms", "p95_ms", "p99_ms", "p999_ms") else float(v))
        for k, v in zip(FIELDS, values)
    }
