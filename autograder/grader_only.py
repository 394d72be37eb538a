"""What only the course's grader holds for a lab's checks: settings that would be a part's answer
if the student kit or the grading sandbox showed them (neither does: autograder/ is the grader's).

The checks (selfcheck/checks/, which students have) get these through `Context.grader_only`, by
name, when the course's grader runs them; a self-check in the student's kernel has none and says
what it uses instead (lab 13: the student's own connector settings, docs/cdc-grading.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def lab13_connector(conninfo: dict, prefix: str, slot: str, publication: str, table: str) -> dict[str, Any]:
    """Lab 13: the grader's own Debezium source on its table (the stream lab13-q2 to q4 read)."""
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": conninfo["host"],
        "database.port": conninfo["port"],
        "database.user": conninfo["user"],
        "database.password": conninfo["password"],
        "database.dbname": conninfo["dbname"],
        "topic.prefix": prefix,
        "plugin.name": "pgoutput",
        "publication.name": publication,
        "publication.autocreate.mode": "disabled",
        "slot.name": slot,
        "table.include.list": f"public.{table}",
        "snapshot.mode": "initial",
        "topic.creation.default.replication.factor": 3,
        "topic.creation.default.partitions": 1,
        "exactly.once.support": "required",
    }


GRADER_ONLY: dict[str, Callable[..., Any]] = {"lab13-connector": lab13_connector}
