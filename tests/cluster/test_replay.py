"""Lab 9's replay: a day's events sent as they happened, faster, on the live cluster."""

from __future__ import annotations

import json

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from cluster import connection
from cluster.lab import Replay, departures


def test_a_replay_sends_every_event_in_order_and_none_before_its_moment(admin, topic):
    events = departures(day=1)[:40]  # the day's first flights: about an hour of event time
    admin.create_topics([NewTopic(topic, 1, 3)])
    admin.wait_for_topics([topic])
    producer = KafkaProducer(**connection(), acks="all")
    replay = Replay(list(reversed(events)), speedup=3600)  # given in any order, sent in event-time order
    assert replay.send(producer, topic) == len(events)
    producer.close()

    consumer = KafkaConsumer(**connection(), enable_auto_commit=False, consumer_timeout_ms=5000)
    part = TopicPartition(topic, 0)
    consumer.assign([part])
    consumer.seek_to_beginning(part)
    records = [r for r in consumer][: len(events) + 1]
    consumer.close()

    sent = [json.loads(r.value) for r in records]
    assert sent == replay.events and sorted(sent, key=lambda e: e["id"]) == sorted(events, key=lambda e: e["id"])
    assert [e["dep_time"] for e in sent] == sorted(e["dep_time"] for e in events)
    assert [r.key.decode() for r in records] == [json.loads(r.value)["origin"] for r in records]
    for r in records:  # the record's timestamp (ms) is when it was sent: never before its moment
        due = replay.happened(replay.event_time(json.loads(r.value)))
        assert r.timestamp / 1000 >= due - 0.002, (r.value, r.timestamp / 1000 - due)
    span = replay.event_time(events[-1]) - replay.event_time(events[0])
    assert span > 1800 and records[-1].timestamp / 1000 - replay.start >= span / 3600 - 0.002
