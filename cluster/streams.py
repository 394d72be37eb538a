"""Stream processing the Kafka Streams way, in Python: a quixstreams Application that stays inside
your namespace.

quixstreams (pinned in pyproject.toml) runs Kafka Streams' model on Kafka itself: a dataframe of
a topic's records, state per key in RocksDB on local disk, each store backed by a compacted
*changelog* topic, `group_by` through a *repartition* topic, windows, stream-table joins, and
exactly-once processing with Kafka transactions. The course chose it over faust-streaming for
its upkeep (monthly releases), its joins, and because its internal topics can be named inside a
namespace (below); it talks to Kafka through librdkafka (confluent-kafka).

On its own, quixstreams names those internal topics `changelog__<group>--<topic>--<store>` and
`repartition__...`, and gives an exactly-once producer a random transactional id: names outside
"<namespace>.", which the brokers refuse to a student's login. streams_app() puts all three
inside your namespace, so the brokers' rules (your ACLs, your partition budget, the topic
settings you may use) hold for the app's own topics too, and nobody else can read its state:

    app = lab.streams_app("counter")              # consumer group "<namespace>.counter"
    words = app.topic(lab.topic("words"), key_deserializer="str")
    sdf = app.dataframe(words)                    # ...; app.run()
    # its store's changelog: "<namespace>.changelog__counter--words--default"
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .clients import in_namespace, librdkafka_connection, namespace, qualify
from .settings import TEACHING_DEFAULTS

if TYPE_CHECKING:
    from quixstreams import Application

# Settings of streams_app() that differ from quixstreams' own defaults, and why:
DEFAULTS: dict[str, Any] = {
    # a new group starts from the topic's first record, as Kafka Streams' apps do (quixstreams: "latest")
    "auto_offset_reset": "earliest",
    # quixstreams logs every start, assignment and recovery at INFO: a notebook shows warnings only
    "loglevel": "WARNING",
}
# Settings of its consumer: a copy of the app that died (killed, its laptop shut) keeps its
# partitions until its session times out; 6 s (the brokers' least) instead of librdkafka's 45 s,
# so a copy started again takes over in seconds. A student's consumer_extra_config adds to these.
CONSUMER_DEFAULTS: dict[str, Any] = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1500}


def _quixstreams():
    # authlib (a dependency of confluent-kafka's schema registry client, which quixstreams
    # imports) warns about its own httpx module on import: nothing a student can act on.
    # authlib turns its own warnings on ("always") when imported: recorded here, and dropped.
    with warnings.catch_warnings(record=True):
        import quixstreams
        from quixstreams.kafka.configuration import ConnectionConfig
        from quixstreams.models.topics import TopicAdmin, TopicManager
    return quixstreams, ConnectionConfig, TopicAdmin, TopicManager


def topic_manager_class():
    """quixstreams' TopicManager, naming its internal topics inside a namespace."""
    _, _, _, TopicManager = _quixstreams()

    class NamespacedTopicManager(TopicManager):
        """Internal topics named "<namespace>.changelog__<app>--<topic>--<store>" (and
        "<namespace>.repartition__..."): quixstreams' own name, with the namespace taken off the
        app's and the topic's names inside it and put once in front."""

        # A topic it makes for the app's output (app.topic("...") of a new name): as the brokers'
        # defaults make one (quixstreams' own: one replica, which a broker's death loses)
        default_replication_factor = int(TEACHING_DEFAULTS["default.replication.factor"])
        default_num_partitions = int(TEACHING_DEFAULTS["num.partitions"])

        def __init__(self, namespace: str, **kwargs):
            super().__init__(**kwargs)
            self.namespace = namespace

        def _internal_name(self, topic_type, topic_name, suffix):
            # quixstreams' one hook for these names (its Quix Cloud manager overrides it too, to
            # keep a workspace's prefix out of them); checked by tests/cluster/test_streams.py
            prefix = qualify(self.namespace, "")
            if topic_name is not None and in_namespace(self.namespace, topic_name):
                topic_name = topic_name[len(prefix) :]
            return prefix + super()._internal_name(topic_type, topic_name, suffix)

    return NamespacedTopicManager


def streams_app(
    name: str, state_dir: str | Path = "state", connection: dict | None = None, **settings: Any
) -> Application:
    """A quixstreams Application that reads and writes as you, in your namespace: its consumer
    group is "<namespace>.<name>", its changelog and repartition topics are named inside your
    namespace, and with processing_guarantee="exactly-once" its transactional id is too.
    state_dir: the folder of its RocksDB stores (one per app name inside it). connection: another
    cluster's librdkafka settings (cluster.own.librdkafka_connection(): a cluster of your own);
    by default the course's. settings are Application's own (processing_guarantee,
    commit_interval, auto_offset_reset, ...)."""
    quixstreams, ConnectionConfig, TopicAdmin, _ = _quixstreams()
    for own in ("broker_address", "consumer_group", "topic_manager", "quix_sdk_token"):
        if own in settings:
            raise ValueError(f"streams_app() sets {own} itself (your login and namespace); leave it out")
    ns = namespace()
    login = ConnectionConfig.from_librdkafka_dict(connection or librdkafka_connection())
    producer_config = dict(settings.pop("producer_extra_config", None) or {})
    consumer_config = {**CONSUMER_DEFAULTS, **(settings.pop("consumer_extra_config", None) or {})}
    if settings.get("processing_guarantee") == "exactly-once":
        # One id per app: a copy started again (after a crash, in another folder) fences the old
        # one and aborts its unfinished transaction at once. With a new id per start (quixstreams'
        # default) that transaction stays open until it times out, and every read_committed
        # reader of the app's topics, the new copy included, waits at it: a minute, by default.
        # A second copy running beside the first (scaling out) needs an id of its own:
        # producer_extra_config={"transactional.id": lab.transactional_id("counter-2")}.
        producer_config.setdefault("transactional.id", qualify(ns, name))
    manager = topic_manager_class()(
        ns,
        topic_admin=TopicAdmin(
            broker_address=login, extra_config={k: v for k, v in producer_config.items() if k != "transactional.id"}
        ),
        consumer_group=name,
        timeout=settings.get("request_timeout", 30),
        create_timeout=settings.get("topic_create_timeout", 60),
        auto_create_topics=settings.get("auto_create_topics", True),
    )
    return quixstreams.Application(
        broker_address=login,
        consumer_group=qualify(ns, name),
        state_dir=str(state_dir),
        producer_extra_config=producer_config,
        consumer_extra_config=consumer_config,
        topic_manager=manager,
        **{**DEFAULTS, **settings},
    )
