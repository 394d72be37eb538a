"""The grader's own flights, for the labs that stream them (9, 10, 12): a seeded day of January
2013 (not the day the notebooks use) with flights of a made-up carrier mixed in, so answers worked
out from the public dataset cannot match; the topic of the grader's that holds them; their times."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from . import Context
from .kafka_state import graders_topic

WINDOW = timedelta(hours=1)
FAKE_CARRIER = "ZZ"  # no such airline: its flights exist only on the grader's topics
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
SCHEMA = "id STRING, carrier STRING, origin STRING, dest STRING, tailnum STRING, dep_delay INT, dep_time TIMESTAMP"


def iso(t: datetime) -> str:
    return t.strftime(TIME_FORMAT)


def when(event: dict) -> datetime:
    return datetime.strptime(event["dep_time"], TIME_FORMAT)


def hour_of(t: datetime) -> datetime:
    return t.replace(minute=0, second=0)


def graders_flights(ctx: Context, cut_hour: int | None = None) -> list[dict]:
    """A seeded day of January 2013 (2-31; the notebook uses day 1) plus made-up flights of
    FAKE_CARRIER at seeded moments and delays, in event-time order."""
    from cluster.lab import departures

    day = ctx.rng.randrange(2, 32)
    events = departures(day=day)
    start_t, end_t = when(events[0]), when(events[-1])
    numbers = ctx.rng.sample(range(1000, 10000), 12)  # distinct: lab10-q2 keys its rows by id
    for i in range(12):
        at = start_t + timedelta(minutes=ctx.rng.randrange(int((end_t - start_t).total_seconds() // 60)))
        origin = ctx.rng.choice(["EWR", "JFK", "LGA"])
        events.append(
            {
                "id": f"2013-01-{day:02d} {FAKE_CARRIER}{numbers[i]} {origin}",
                "carrier": FAKE_CARRIER,
                "origin": origin,
                "dest": "ORD",
                "tailnum": None,
                "dep_delay": ctx.rng.randrange(-15, 300),
                "dep_time": iso(at),
            }
        )
    return sorted(events, key=lambda e: e["dep_time"])


def send(ctx: Context, topic: str, events: list[dict]) -> None:
    from kafka import KafkaProducer

    with KafkaProducer(**ctx.kafka, acks="all") as producer:
        for e in events:
            producer.send(topic, key=e["origin"].encode(), value=json.dumps(e).encode())
        producer.flush(30)


def flights_topic(ctx: Context, events: list[dict], partitions: int = 3) -> str:
    """The grader's topic of flights (read-only for the student's code), filled with events.
    Kept forever: the records' own timestamps are recent, but retention is no worry either way."""
    topic = graders_topic(ctx, "flights", partitions, retention_ms="-1")
    send(ctx, topic, events)
    return topic


def reference_flights(topic: str):
    """Run in the student's kernel by lab9-q2: the topic's flights as a DataFrame, its rows
    parsed here in plain Python (not with the lab's Spark answer), so that q2 does not hang on
    parse()."""
    from cluster.clients import bootstrap_servers, connection, namespace
    from cluster.lab import Lab
    from cluster.spark import spark_session

    rows = []
    for record in Lab("lab9", bootstrap_servers(), namespace(), connection()).read(topic):
        e = json.loads(record.value)
        # aware (UTC): PySpark would read a naive datetime as the machine's local time
        rows.append(
            (e["id"], e["carrier"], e["origin"], e["dest"], e["tailnum"], e["dep_delay"], when(e).replace(tzinfo=UTC))
        )
    return spark_session().createDataFrame(rows, SCHEMA)


def reference_stream(topic: str):
    """Run in the student's kernel by lab9-q2: the topic as a stream (a streaming DataFrame, not
    started), parsed by the grader's code, so that the plan of hourly_delays on a stream can be read."""
    from pyspark.sql import functions as F

    from cluster.spark import kafka_options, spark_session

    raw = spark_session().readStream.format("kafka").options(**kafka_options(topic)).load()
    fields = F.from_json(F.col("value").cast("string"), SCHEMA)
    return raw.select(fields.alias("f")).select("f.*")


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))
