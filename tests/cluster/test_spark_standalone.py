"""Lab 9's job runs unchanged on a Spark standalone cluster (a master and a worker started from
the pinned pyspark, as docker-compose.yml's spark-master and spark-worker run them): only
SPARK_MASTER differs, and the Parquet it writes is the batch truth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime

import nbformat
import pytest
from kafka import KafkaProducer
from kafka.admin import NewTopic

from selfcheck.checks import CheckFailed
from selfcheck.checks.lab9 import WATERMARK, WINDOW, compare_hourly, committed_files, hourly_truth, utc_text, when
from autograder.pipeline import SOLUTIONS

from cluster import connection
from cluster.lab import departures
from cluster.process import free_port
from cluster.spark import master_state, standalone

pytestmark = pytest.mark.heavy  # a master, a worker and lab 9's job: the `heavy` layer (make test-heavy)


def solution_job() -> str:
    """delays_job.py as the solution notebook writes it (without its %%writefile line)."""
    nb = nbformat.read(SOLUTIONS / "lab9" / "lab9.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "lab9-job")
    return cell.source.split("\n", 1)[1]


def test_lab9s_job_runs_unchanged_on_a_standalone_cluster(cluster, admin, topic, tmp_path):
    import pyarrow.parquet as pq

    admin.create_topics([NewTopic(topic, 3, 3)])
    admin.wait_for_topics([topic])
    events = departures(day=7)
    producer = KafkaProducer(**connection(), acks="all")
    for e in events:
        producer.send(topic, key=e["origin"].encode(), value=json.dumps(e).encode())
    producer.flush()
    producer.close()
    (tmp_path / "delays_job.py").write_text(solution_job())

    web = free_port()
    with standalone(tmp_path / "spark", port=free_port(), web_port=web, worker_web_port=free_port()) as master:
        run = subprocess.run(
            [sys.executable, "delays_job.py", topic, "hourly", "checkpoint"],
            cwd=tmp_path,
            env=dict(os.environ, SPARK_MASTER=master),
            capture_output=True,
            text=True,
            timeout=400,
        )
        state = master_state(web)
    assert run.returncode == 0, run.stderr[-3000:]
    # It ran on the cluster, not in a local driver: the master lists it, done.
    assert [a["name"] for a in state.get("completedapps", [])] == ["delays-job"], state

    rows = []
    for f in committed_files(tmp_path / "hourly"):
        for r in pq.read_table(f).to_pylist():
            rows.append((utc_text(r["hour"], False), r["origin"], r["flights"], r["avg_delay"]))
    truth = hourly_truth(events)
    watermark = when(events[-1]) - WATERMARK
    # availableNow ends with a batch that moves the watermark: every hour closed by then is written
    closed = {k for k in truth if datetime.strptime(k[0], "%Y-%m-%d %H:%M:%S") + WINDOW <= watermark}
    try:
        compare_hourly(rows, truth, closed, "hours written on the standalone cluster", "")
    except CheckFailed as e:
        raise AssertionError(str(e)) from None
    assert len(rows) == len(closed)
