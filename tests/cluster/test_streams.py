"""A quixstreams app (cluster/streams.py) as a student runs it: as the namespace's own user, its
changelog and repartition topics inside the namespace, its state restored from the changelog in
another folder after a SIGKILL, each count written exactly once, and its state unreadable to
another namespace. Real brokers, real RocksDB, the app as a separate process."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from cluster import connection, namespace
from cluster.clients import bootstrap_servers
from cluster.lab import start_lab
from cluster.waiting import wait_for

# The app of the tests: words keyed by who said them, regrouped by the word (a repartition
# topic), counted per word in a store (its changelog topic), each new count sent to `counts`.
APP = """
import sys, time
from cluster.lab import start_lab

name, state_dir, words, counts, pause = sys.argv[1:6]
lab = start_lab("streams-test", clean=False)
# a killed app's partitions go to the next one once its session times out: streams_app's 6 s
app = lab.streams_app(name, state_dir=state_dir, processing_guarantee="exactly-once", commit_interval=0.2)
sdf = app.dataframe(app.topic(lab.topic(words), key_deserializer="str"))
sdf = sdf.group_by(lambda value: value["word"], name="word")


def count(value, state):
    time.sleep(float(pause))       # slow enough to be killed in the middle
    n = state.get("n", 0) + 1
    state.set("n", n)
    return {"word": value["word"], "n": n}


sdf.apply(count, stateful=True).to_topic(app.topic(lab.topic(counts), key_serializer="str"))
app.run(timeout=3)                 # stops once nothing has come for 3 s
print("stopped", flush=True)
"""

WORDS = ("kafka", "stream", "table", "state", "changelog")
TAG = uuid.uuid4().hex[:6]  # in the name of every topic this module makes, the apps' own included


@pytest.fixture(scope="module")
def words(cluster, tmp_path_factory):
    """A fresh topic of 600 words said by 40 speakers (3 partitions), what was said, and a
    folder with the app."""
    lab = start_lab("streams-test", clean=False)
    topic = lab.fresh_topic(f"words-{TAG}", 3)
    rng = random.Random(5)
    said = [(f"speaker-{rng.randrange(40)}", rng.choice(WORDS)) for _ in range(600)]
    with KafkaProducer(**connection(), acks="all") as producer:
        for who, word in said:
            producer.send(topic, key=who.encode(), value=json.dumps({"word": word}).encode())
        producer.flush(30)
    folder = tmp_path_factory.mktemp("streams")
    (folder / "app.py").write_text(APP)
    yield lab, topic, Counter(word for _, word in said), folder
    lab.delete_my_topics(containing=TAG)  # only this module's: other modules of this process share the namespace


@pytest.fixture(scope="module")
def counted(words):
    """The app run once over the words, to the end: (lab, its name, the counts topic, what was said)."""
    lab, topic, said, folder = words
    counts = lab.fresh_topic(f"counts-{TAG}-{uuid.uuid4().hex[:6]}", 3)
    app = start_app(folder, lab, "counter", "state", topic, counts, 0)
    out, _ = app.communicate(timeout=120)
    assert app.returncode == 0 and "stopped" in out, out[-3000:]
    return lab, topic, counts, said


def start_app(folder, lab, name: str, state: str, topic: str, counts: str, pause: float) -> subprocess.Popen:
    short = lambda t: t[len(lab.topic("")) :]
    return subprocess.Popen(
        [sys.executable, str(folder / "app.py"), name, str(folder / state), short(topic), short(counts), str(pause)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def committed_counts(topic: str) -> list[dict]:
    """Every count the app's committed transactions wrote, in partition order."""
    consumer = KafkaConsumer(**connection(), isolation_level="read_committed", enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        end = consumer.end_offsets(parts)
        found: list[dict] = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < end[tp] for tp in parts) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                found.extend(json.loads(r.value) for r in records)
        return found
    finally:
        consumer.close()


def test_an_apps_own_topics_are_inside_its_namespace(counted):
    lab, topic, counts, said = counted
    ns, words = namespace(), topic[len(namespace()) + 1 :]
    made = sorted(t for t in lab.my_topics() if "__counter--" in t and words in t)  # the app's own
    assert made == [
        f"{ns}.changelog__counter--repartition.{words}.word--default",
        f"{ns}.repartition__counter--{words}--word",
    ], made
    from kafka.admin import ConfigResource, ConfigResourceType

    changelog = next(t for t in made if ".changelog__" in t)
    configs = lab.admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, changelog)])
    assert configs["topic"][changelog]["cleanup.policy"]["value"] == "compact"
    last = {c["word"]: c["n"] for c in committed_counts(counts)}
    assert last == dict(said)


def test_an_app_killed_mid_stream_is_restored_elsewhere_and_counts_each_record_once(words):
    lab, topic, said, folder = words
    counts = lab.fresh_topic(f"counts-{TAG}-{uuid.uuid4().hex[:6]}", 3)
    first = start_app(folder, lab, "recovering", "laptop-a", topic, counts, 0.01)  # ~6 s for 600 words
    try:
        reached = wait_for(lambda: len(committed_counts(counts)), timeout_s=90, every_s=0.3, until=lambda n: n >= 100)
        assert reached, f"the app committed {reached.last} counts in 90 s"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    before = len(committed_counts(counts))
    assert before < sum(said.values()), "the app finished before it was killed: nothing to recover"

    # another folder: no RocksDB files, so the counts so far can only come from the changelog
    second = start_app(folder, lab, "recovering", "laptop-b", topic, counts, 0)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0 and "stopped" in out, out[-3000:]

    by_word: dict[str, list[int]] = {}
    for c in committed_counts(counts):
        by_word.setdefault(c["word"], []).append(c["n"])
    # exactly once: each word's counts are 1, 2, ... n, none repeated, none skipped, across the kill
    assert {w: ns == list(range(1, len(ns) + 1)) for w, ns in by_word.items()} == {w: True for w in said}
    assert {w: ns[-1] for w, ns in by_word.items()} == dict(said)


def test_another_namespace_cannot_read_an_apps_state(counted, cluster):
    lab = counted[0]
    changelog = next(t for t in lab.my_topics() if ".changelog__counter" in t)

    # the owner reads it: the state is there to be read
    assert len(lab.read(changelog)) > 0

    account = cluster.add_student(f"classmate-{uuid.uuid4().hex[:6]}")
    theirs = {"bootstrap_servers": bootstrap_servers(), **account.kafka_python()}
    from kafka import KafkaAdminClient

    with KafkaAdminClient(**theirs) as admin:
        assert changelog not in admin.list_topics()
        assert admin.describe_topics([changelog])[0]["error_code"] == 29  # topic authorization failed
    consumer = KafkaConsumer(**theirs)
    consumer.assign([TopicPartition(changelog, p) for p in range(3)])
    consumer.seek_to_beginning()
    read = []
    try:
        for _ in range(3):
            read += [r.value for batch in consumer.poll(timeout_ms=1_000).values() for r in batch]
    except Exception as e:  # refused outright, or nothing read: both keep the state secret
        assert "Authorization" in type(e).__name__, e
    finally:
        consumer.close()
    assert read == []


def test_a_topic_the_app_makes_has_three_replicas_as_the_brokers_make_them(cluster):
    lab = start_lab("streams-test", clean=False)
    name = lab.topic(f"made-{TAG}")
    lab.streams_app("maker", state_dir=tempfile.mkdtemp()).topic(name)  # a new output topic
    described = lab.admin.describe_topics([name])[0]
    # quixstreams' own default would be one replica: lost with its broker
    assert [len(p["replica_nodes"]) for p in described["partitions"]] == [3]
    lab.delete_topic(f"made-{TAG}")  # and wait until it is gone, so the module's cleanup does not see it
