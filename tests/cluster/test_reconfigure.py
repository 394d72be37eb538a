"""Dynamic broker settings, the way an instructor (or lab 6's compaction lessons) changes them:
every broker stays up. A per-broker `message.max.bytes` once took two brokers down at once
(the log cleaner restarted with a second 128 MB dedupe buffer in a 256 MB heap)."""

from __future__ import annotations

import time

from kafka.admin import ConfigResource, ConfigResourceType

from cluster.brokers import live_brokers

OBSERVE_S = 10  # how long every broker must stay up after the changes
CHANGES = {  # each restarts the log cleaner or reconfigures the broker live
    "message.max.bytes": "2000000",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": str(24 * 2**20),
    "log.cleaner.io.max.bytes.per.second": "1.0E7",  # a double: Kafka shows it so
    "log.cleaner.backoff.ms": "5000",
}


def on_every_broker(configs: dict) -> list[ConfigResource]:
    return [ConfigResource(ConfigResourceType.BROKER, str(b), configs=configs) for b in (1, 2, 3)]


def test_changing_dynamic_broker_settings_keeps_every_broker_up(cluster, admin):
    jvms = {n.id: n.pid for n in cluster.nodes.values()}
    try:
        for key, value in CHANGES.items():  # one at a time, as an instructor would
            admin.alter_configs(on_every_broker({key: value}))
        # The cleaners restart on their own threads: give a broken one time to die.
        deadline = time.monotonic() + OBSERVE_S
        while time.monotonic() < deadline:
            assert all(n.process() for n in cluster.nodes.values()), "a broker died after a dynamic change"
            time.sleep(0.5)
        assert live_brokers(admin) == {1, 2, 3}
        assert {n.id: n.pid for n in cluster.nodes.values()} == jvms  # the same JVMs, not restarts
        found = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")])["broker"]["1"]
        assert {k: found[k]["value"] for k in CHANGES} == CHANGES
    finally:  # back to the static settings: delete the dynamic ones
        admin.alter_configs(on_every_broker({key: ("DELETE", None) for key in CHANGES}))
    cluster.wait_ready()
