"""What a lab notebook needs: a first cell that checks the cluster, your names, the data.

    from cluster.lab import start_lab, load_flights
    lab = start_lab("lab2")          # where Kafka is, who you are; clears this lab's leftovers
    lab.topic("flights")             # "<namespace>.flights": your topic
    KafkaProducer(**lab.connection)  # every client: the servers and your login
    flights = load_flights(day=1)    # January 2013 flights from New York City, as dicts
"""

from __future__ import annotations

import csv
import gzip
import time
from dataclasses import dataclass
from functools import cached_property

from . import settings
from .connect import anything_listens, bootstrap_servers, connection, group_name, namespace, topic_name

FLIGHTS_FILE = settings.ROOT / "datasets" / "flights-2013-01.csv.gz"
INT_COLUMNS = ("year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time",
               "sched_arr_time", "arr_delay", "flight", "air_time", "distance", "hour", "minute")


@dataclass
class Lab:
    name: str
    bootstrap_servers: str
    namespace: str
    # What every client needs: bootstrap_servers and your login (the brokers ask every client
    # who it is, and let yours use only the topics and groups named "<namespace>.*").
    connection: dict

    def topic(self, name: str) -> str:
        return topic_name(name)

    def group(self, name: str) -> str:
        return group_name(name)

    @cached_property
    def admin(self):
        from kafka import KafkaAdminClient

        return KafkaAdminClient(**self.connection, client_id=f"{self.namespace}-admin")

    def my_topics(self) -> list[str]:
        prefix = self.namespace + "."
        return sorted(t for t in self.admin.list_topics() if t.startswith(prefix))

    def delete_my_topics(self, timeout_s: float = 30) -> list[str]:
        """Delete every topic in your namespace and wait until they are gone, so a notebook
        can be run again from the top."""
        mine = self.my_topics()
        if mine:
            self.admin.delete_topics(mine)
            deadline = time.monotonic() + timeout_s
            while self.my_topics() and time.monotonic() < deadline:
                time.sleep(0.2)
        return mine


def start_lab(name: str, clean: bool = True) -> Lab:
    """Check that Kafka answers, say where it is, and (clean=True) delete the topics left in
    your namespace by an earlier run. A clear message if the cluster is not running."""
    import os

    from kafka.errors import KafkaError

    # gRPC's own log (lab 1) prints a GOAWAY line when a notebook is run again, which reads like
    # an error and is not one; only its errors are shown. Read by gRPC when it is first imported.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    servers = bootstrap_servers()
    if not anything_listens(servers):
        raise RuntimeError(
            f"No Kafka broker answers at {servers}. Start the cluster in a terminal "
            "with `make up` (or `python -m cluster up`), then run this cell again.")
    lab = Lab(name, servers, namespace(), connection())
    try:
        lab.admin.list_topics()
    except KafkaError as e:
        raise RuntimeError(
            f"The brokers at {servers} answer but did not let you in ({type(e).__name__}: {e}): your login "
            f"({lab.connection.get('sasl_plain_username')}) was refused, or the cluster is still starting. "
            "On your laptop, `make up` sets your login up; on a hub, ask your course admin.") from None
    removed = lab.delete_my_topics() if clean else []
    print(f"{name}: Kafka at {lab.bootstrap_servers}; your namespace is '{lab.namespace}'"
          + (f"; removed {len(removed)} old topic(s)" if removed else ""))
    return lab


def load_flights(day: int | None = None, origin: str | None = None) -> list[dict]:
    """Flights that left NYC in January 2013 (optionally one day, one airport), in the
    original order. Numbers are ints; a missing value (cancelled flight) is None."""
    with gzip.open(FLIGHTS_FILE, "rt", newline="") as f:
        rows = []
        for row in csv.DictReader(f):
            if day is not None and int(row["day"]) != day:
                continue
            if origin is not None and row["origin"] != origin:
                continue
            for col in INT_COLUMNS:
                row[col] = int(row[col]) if row[col] not in ("", "NA") else None
            rows.append(row)
    return rows
