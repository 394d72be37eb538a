"""A notebook run as its student runs it: the self-check's side of the grade.

    python -m staff.as_student LAB NOTEBOOK --json FILE

One kernel on this machine, as the student's own (no sandbox), logged in to the course's
cluster as a namespace and user of its own; every cell in order, the course's demo cells left
out (grading leaves them out too), and each test cell's `grade(label)` run in the kernel: the
self-check the student sees while working. A part counts as passed when its test cell ran
without an error. `python -m staff selftest --via kernel` compares this with the scores
the corpus expects from the grader; the two must agree on every piece of student work.

A cell that runs past its time is interrupted, as a student would, and the run goes on. The
namespace, its user and the working folder are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from autograder.kernel import CELL_TIMEOUT_S, DEMO_TAG
from autograder.pipeline import copy_release, namespace_groups, remove_namespace, test_label
from cluster import accounts
from cluster.accounts import Account
from cluster.clients import admin_client, admin_connection
from selfcheck.checks import policy

# A test cell runs the part's check in the kernel: it may start scripts, crash them and wait
# for groups (lab 4: a minute or more), or run a Spark job three times (lab 9).
CHECK_TIMEOUT_S = 600


def first_line(outputs: list) -> str:
    """What a failed test cell said: the error's type and first line."""
    for out in outputs:
        if out.get("output_type") == "error":
            value = (out.get("evalue") or "").strip().splitlines()
            return f"{out.get('ename')}: {value[0] if value else ''}"[:300]
    return ""


def footprint(connection: dict, namespace: str) -> dict:
    """What a namespace holds on the cluster: its topics, their partitions (each kept on three
    brokers), its consumer groups. What one student's lab leaves behind until the next lab's
    start_lab() deletes the topics."""
    from cluster.clients import in_namespace

    with admin_client("selftest", connection) as admin:
        topics = [t for t in admin.list_topics() if in_namespace(namespace, t)]
        partitions = sum(len(t["partitions"]) for t in admin.describe_topics(topics)) if topics else 0
        return {"topics": len(topics), "partitions": partitions, "groups": len(namespace_groups(admin, namespace))}


def run(lab: str, notebook: Path, demos: bool = False) -> dict:
    """{label: {"passed": bool, "said": first line of the failure}} for each test cell, the run's
    "seconds", and what it "left" on the cluster (footprint)."""
    nb = nbformat.read(notebook, as_version=4)
    namespace = f"self-{lab}-{secrets.token_hex(4)}"
    account = Account(namespace, accounts.new_password())
    connection = admin_connection()
    with admin_client("selftest", connection) as admin:
        accounts.grant(admin, account, namespace)
    folder = Path(tempfile.mkdtemp(prefix=f"as-student-{lab}-"))
    copy_release(lab, folder)
    env = {k: v for k, v in os.environ.items() if k != "COURSE_OWN_CLUSTER"}
    env.update(
        LAB_NAMESPACE=namespace,
        KAFKA_USERNAME=account.username,
        KAFKA_PASSWORD=account.password,
        COURSE_OWN_CLUSTER_HOME=str(folder / ".own-cluster"),
    )  # lab 7: a cluster of this run's own
    cell_timeout = max(CELL_TIMEOUT_S, policy(lab).slowest_cell_s)
    client = NotebookClient(
        nb,
        timeout=cell_timeout,
        kernel_name="python3",
        allow_errors=True,
        interrupt_on_timeout=True,
        resources={"metadata": {"path": str(folder)}},
    )
    parts: dict[str, dict] = {}
    start = time.monotonic()
    try:
        client.reset_execution_trackers()
        with client.setup_kernel(env=env):
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code" or (DEMO_TAG in cell.metadata.get("tags", []) and not demos):
                    continue
                label = test_label(cell)
                if label in parts:  # each part is checked once, as when grading
                    continue
                client.timeout = CHECK_TIMEOUT_S if label else cell_timeout  # type: ignore[assignment]  # seconds
                try:
                    client.execute_cell(cell, index)
                except DeadKernelError:
                    if label:
                        parts[label] = {"passed": False, "said": "the kernel died"}
                    break
                if label:
                    parts[label] = {
                        "passed": not any(o.get("output_type") == "error" for o in cell.outputs),
                        "said": first_line(cell.outputs),
                    }
    finally:
        try:
            left = footprint(connection, namespace)
        except Exception as e:  # a figure for a table, not the run's outcome
            left = {"error": f"{type(e).__name__}: {e}"}
        try:
            remove_namespace(connection, namespace, account.username)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    for cell in nb.cells:  # a part whose test cell never ran (the kernel died first)
        label = test_label(cell)
        if label and label not in parts:
            parts[label] = {"passed": False, "said": "its test cell did not run: the kernel had died"}
    return {"parts": parts, "seconds": round(time.monotonic() - start, 1), "left": left}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m staff.as_student", description=__doc__.split("\n\n")[0])
    p.add_argument("lab")
    p.add_argument("notebook", type=Path)
    p.add_argument("--json", type=Path, required=True, help="where the parts' outcomes go")
    p.add_argument(
        "--demos",
        action="store_true",
        help="run the demo cells too, as a student does (a lab's whole footprint on the cluster)",
    )
    a = p.parse_args(argv)
    a.json.write_text(json.dumps(run(a.lab, a.notebook, a.demos), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
