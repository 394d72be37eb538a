"""Eight fixes for kafka-python 3.0.12, applied when `cluster` is imported: a race in group
membership, an admin client that keeps asking a controller that is gone, a consumer whose
poll() raises when a broker dies, a wait for new topics that asks one broker only, a
metadata refresh that fails when it picks a broker that is down, end offsets that leave
out a topic the client has not met yet, a list of groups that leaves out a broker's, and a
broker's settings asked of a broker the client has not met yet.

## 1. Group membership

What goes wrong without it: a consumer that subscribes and then polls with a short timeout
(`poll(timeout_ms=1)`, or 200 ms while a group of three forms) can end up a member of its group
that never sends a heartbeat and never gets its partitions. The steps:

1. it joins before it knows the topic's partitions (the usual case right after subscribing);
2. the metadata arrives, so it must join again, and it starts that join on its I/O thread;
3. `poll()`'s timeout expires while that join is on the wire, leaving the join unfinished;
4. as the group's leader it has meanwhile computed the new assignment, so its "must I join?"
   check (`ConsumerCoordinator.need_rejoin`) answers no, and no later poll collects the join's
   result: heartbeats stay off, the assignment is never applied, and after the session timeout
   the coordinator removes the member while the process waits for records forever.

The check answered from the assignment alone; the fix makes it also say yes while a join attempt
is still unfinished, which is what kafka-python's base coordinator already does in every other
path (its own flag stays set until the join's result has been collected). Measured on the
course's cluster: a fresh group polled with `timeout_ms=1` got its partitions 2 times in 8 before,
8 in 8 after (tests/cluster/test_kafka_python_fix.py runs that experiment).

## 2. The admin client's controller

`KafkaAdminClient` sends topic creations and configuration changes to the controller it first
heard of, and asks again only when that broker answers "not the controller". When that broker
has died or restarted, the client cannot reach it (`UnknownBrokerIdError`, a refused connection)
and never asks again: every later creation fails until the client is closed. Lab 7 kills
brokers; so does a class's broker that crashes during grading. The fix forgets the controller
and asks once more when it cannot be reached.

## 3. A consumer's poll() while a broker is down

When the broker that coordinates a consumer's group dies, the consumer looks for the new
coordinator; told "not available yet", it refreshes its metadata first, and that refresh may be
sent to the dead broker. The refused connection is a retriable error, which the lookup's own
loop would retry, but it escapes from the metadata wait instead and `poll()` raises
`KafkaConnectionError: 111 ECONNREFUSED`. A student's consumer loop dies although two brokers
still serve its group (seen in `make bench`'s class load run: many of 30 consumers, at one
broker's SIGKILL). The fix lets that poll return what it has, as a poll that found no
coordinator within its timeout does; the next poll looks again.

## 4. A new topic "ready" on one broker only

`KafkaAdminClient.wait_for_topics` (and `create_topics(..., wait_for_metadata=True)`) asks one
broker until the topic has a leader for every partition, then returns. The next request may go
to another broker, which has not applied the topic's metadata yet: `describe_topics` then lists
the topic with no partitions (seen once in CI, under load: a test described a three-partition
topic right after the wait and got none). A student's `fresh_topic`, then a description, would
see the same. The fix waits, within the same deadline, until every broker it can reach reports
the topic ready; a broker that cannot be reached is left out (it reads the cluster's metadata
when it comes back, before it serves anyone).

## 5. A metadata refresh sent to a broker that is down

A client refreshes its metadata from one broker, the least loaded it knows; a broker that has
just died is not known to be down until a connection to it fails. That failure fails the refresh
and everything waiting on it: `consumer.partitions_for_topic(t)` or `consumer.topics()` raise
`KafkaConnectionError: 111 ECONNREFUSED` while two brokers serve the topic (a fresh consumer, one
broker of three down: 5 times in 20 here; lab 7 and a class's broker crash meet it). The fix
sends the same request to the next broker the client can reach (the failed one is in backoff by
then) and fails the refresh only when none answers, as the Java client does.

## 6. End offsets of a topic the client has not met yet

`consumer.end_offsets(partitions)` (and `beginning_offsets`) asks each partition's leader. A
partition whose topic is not yet in the client's metadata has no known leader: kafka-python asks
for the metadata, but leaves the partition out of both the answer and the partitions to ask
again, unless no partition at all had a known leader. So a list that mixes a topic the consumer
knows with one it does not raises `KeyError: TopicPartition(...)` inside kafka-python (lab 14's
lag alert meets it: one consumer asks for the end offsets of every topic a group committed). The
fix puts such partitions among those asked again once the metadata has come.

## 7. A list of groups without the groups of a broker that was away

`admin.list_groups()` asks every broker the client's metadata lists, and each answers with the
groups it coordinates. The client does not refresh that list first: an admin client that
refreshed its metadata while a broker was down (any call does) keeps asking only the others once
the broker is back, and the groups that broker coordinates are silently missing (10 of 12 here,
after broker 2 was stopped and started; lab 14's lag alert after its metrics demo). The Java
client and `kafka-consumer-groups.sh --list` ask for fresh metadata first; the fix does the same.

## 8. A broker's settings, asked of a broker the client has not met yet

A broker's own settings (a replication throttle's rate, say) are read and changed by asking that
broker. An admin client made before the broker joined the cluster does not know its address, and
kafka-python raises `UnknownBrokerIdError: 4` without looking again (lab 14: broker 4 added after
the notebook's admin client was made, then its throttle set with `alter_configs`). The Java client
refreshes its metadata first; the fix does the same when a broker resource names a broker the
client does not know.

Only the pinned version is patched: a new kafka-python is checked again before its pin moves.
Each fault is written up for kafka-python's maintainers, with a reproduction, in
`kafka_python_upstream.md` beside this file; the module logs once (INFO, logger
`cluster.kafka_python_fix`) that the patches are active.
"""

from __future__ import annotations

import logging

import kafka
from kafka.coordinator.consumer import ConsumerCoordinator

PATCHED_VERSION = "3.0.12"


def _mark(patched) -> None:
    """Tag a replacement as the course's, so apply() twice patches once."""
    patched.course_fix = True


def apply() -> bool:
    """Patch ConsumerCoordinator.need_rejoin once; True if the installed kafka-python is patched."""
    if kafka.__version__ != PATCHED_VERSION:
        return False
    original = ConsumerCoordinator.need_rejoin
    if getattr(original, "course_fix", False):
        return True

    def need_rejoin(self) -> bool:
        # an unfinished join attempt: only join_group_async collects it (and turns heartbeats on)
        if getattr(self, "_join_task", None) is not None and self._subscription.partitions_auto_assigned():
            return True
        return original(self)

    _mark(need_rejoin)
    need_rejoin.__doc__ = original.__doc__
    ConsumerCoordinator.need_rejoin = need_rejoin
    _patch_admin_controller()
    _patch_coordinator_lookup()
    _patch_wait_for_topics()
    _patch_metadata_refresh()
    _patch_list_offsets()
    _patch_list_groups()
    _patch_broker_configs()
    logging.getLogger(__name__).info(
        "kafka-python %s patched by the course (the group join race, the admin "
        "client's controller, poll() at a coordinator's death, a new topic ready on every "
        "broker, a metadata refresh at a dead broker, end offsets of a new topic, the groups of a broker that was away, a new broker's settings): see "
        "cluster/kafka_python_upstream.md",
        PATCHED_VERSION,
    )
    return True


def _patch_admin_controller() -> None:
    from kafka import errors
    from kafka.admin.client import KafkaAdminClient

    original = KafkaAdminClient._send_request_to_controller
    unreachable = (errors.UnknownBrokerIdError, errors.KafkaConnectionError, errors.NodeNotReadyError)

    async def send_request_to_controller(self, request, *args, **kwargs):
        try:
            return await original(self, request, *args, **kwargs)
        except unreachable:  # the controller we knew is gone: ask who it is now, once
            self._controller_id = None
            return await original(self, request, *args, **kwargs)

    _mark(send_request_to_controller)
    KafkaAdminClient._send_request_to_controller = send_request_to_controller


def _patch_coordinator_lookup() -> None:
    from kafka import errors
    from kafka.coordinator.base import BaseCoordinator

    original = BaseCoordinator.ensure_coordinator_ready_async

    async def ensure_coordinator_ready_async(self, timeout_ms=None):
        try:
            return await original(self, timeout_ms)
        except errors.RetriableError:  # a metadata refresh sent to the broker that died: not ready yet
            await self._manager._net.sleep(self.config["retry_backoff_ms"] / 1000)
            return False

    _mark(ensure_coordinator_ready_async)
    BaseCoordinator.ensure_coordinator_ready_async = ensure_coordinator_ready_async


def ask(client, request, node_id: int | None = None):
    """Send one request (a kafka.protocol message) to broker `node_id`, or to the least loaded
    one, and return its response. kafka-python 3.0.12 has no public call for a message it has no
    method for (quotas) or for asking one broker by id; this is the one place the course uses
    its private connection manager for that."""
    return client._manager.run(client._manager.send, request, node_id)


def topics_on_broker(admin, node_id: int, names: list[str]) -> dict[str, dict]:
    """What broker `node_id` itself says of topics `names` (a metadata request sent to it alone):
    {name: the topic's metadata dict, with "partitions"}."""
    from kafka.protocol.metadata import MetadataRequest

    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=False
    )
    return {t["name"]: t for t in ask(admin, request, node_id).to_dict()["topics"]}


def _patch_wait_for_topics() -> None:
    from kafka import errors
    from kafka.admin.client import KafkaAdminClient

    from .waiting import wait_for

    original = KafkaAdminClient.wait_for_topics
    unreachable = (
        errors.UnknownBrokerIdError,
        errors.KafkaConnectionError,
        errors.NodeNotReadyError,
        errors.RequestTimedOutError,
    )

    def wait_for_topics(self, topic_names, timeout_ms=10000):
        if not topic_names:
            return
        names = list(topic_names)
        original(self, names, timeout_ms)  # ready on one broker

        def pending_on(node_id: int) -> dict:
            try:
                seen = topics_on_broker(self, node_id, names)
            except unreachable:  # down or restarting: it catches up before it serves again
                return {}
            return {n: why for n in names if (why := self._topic_not_ready_reason(seen.get(n)))}

        for broker in self._manager.cluster.brokers():
            waited = wait_for(
                lambda b=broker.node_id: pending_on(b),
                timeout_s=timeout_ms / 1000,
                until=lambda pending: not pending,
                every_s=0.05,
            )
            if not waited:
                raise errors.KafkaTimeoutError(
                    f"Topics not ready on broker {broker.node_id} after {timeout_ms}ms: {waited.last}"
                )

    _mark(wait_for_topics)
    wait_for_topics.__doc__ = original.__doc__
    KafkaAdminClient.wait_for_topics = wait_for_topics


def _patch_metadata_refresh() -> None:
    from kafka import errors
    from kafka.cluster import ClusterMetadata

    original = ClusterMetadata._do_refresh_metadata
    unreachable = (errors.KafkaConnectionError, errors.NodeNotReadyError, errors.UnknownBrokerIdError)

    async def _do_refresh_metadata(self, node_id):
        if node_id is not None:  # the caller chose the broker: its answer, or its failure
            return await original(self, node_id)
        tried: set = set()
        while (node := self._manager.least_loaded_node()) is not None and node not in tried:
            tried.add(node)
            self._manager.reset_backoff("metadata")
            try:
                response = await self._manager.send(self.metadata_request(), node)
            except unreachable:  # down or restarting: in backoff now, so the next pick is another
                continue
            except Exception as exc:
                self.failed_update(exc)
                raise
            self.update_metadata(response)
            return
        # no broker left to try: kafka-python's own path (it fails the refresh, or backs off)
        return await original(self, None)

    _mark(_do_refresh_metadata)
    ClusterMetadata._do_refresh_metadata = _do_refresh_metadata


def _patch_list_offsets() -> None:
    from kafka.consumer.fetcher import Fetcher

    original = Fetcher._send_list_offsets_requests

    async def _send_list_offsets_requests(self, timestamps):
        # kafka-python drops these silently (it has asked for their metadata): ask them again
        unknown = {tp for tp in timestamps if self._manager.cluster.leader_for_partition(tp) in (None, -1)}
        offsets, retry = await original(self, timestamps)
        return offsets, set(retry) | (unknown - set(offsets))

    _mark(_send_list_offsets_requests)
    Fetcher._send_list_offsets_requests = _send_list_offsets_requests


def _patch_list_groups() -> None:
    from kafka.admin._groups import GroupAdminMixin

    original = GroupAdminMixin._async_list_groups

    async def _async_list_groups(self, broker_ids=None, states_filter=None, types_filter=None):
        if broker_ids is None:  # every broker: as the cluster lists them now, not as last seen
            await self._manager.wait_for(self._manager.cluster.request_update(), self.config["request_timeout_ms"])
        return await original(self, broker_ids, states_filter, types_filter)

    _mark(_async_list_groups)
    GroupAdminMixin._async_list_groups = _async_list_groups


def _patch_broker_configs() -> None:
    from kafka.admin._configs import ConfigAdminMixin, ConfigResourceType

    async def known(self, config_resources) -> None:
        """Refresh the metadata once if a broker resource names a broker the client does not know."""
        named = {
            int(r.name)
            for r in config_resources
            if r.resource_type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER)
            and str(r.name).isdigit()
        }
        if any(self._manager.cluster.broker_metadata(b) is None for b in named):
            await self._manager.wait_for(self._manager.cluster.request_update(), self.config["request_timeout_ms"])

    for name in ("_async_describe_configs", "_async_alter_configs"):
        original = getattr(ConfigAdminMixin, name)

        async def patched(self, config_resources, *args, _original=original, **kwargs):
            await known(self, config_resources)
            return await _original(self, config_resources, *args, **kwargs)

        _mark(patched)
        setattr(ConfigAdminMixin, name, patched)


APPLIED = apply()
