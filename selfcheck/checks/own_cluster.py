"""The grading's own three-broker cluster (cluster/own.py), for the labs whose checks stop and kill
brokers while the student's code runs (labs 7 and 15; their POLICY has own_cluster=True): the
cluster, its admin client asked again through a broker's death, and brokers stopped and started
with the waits that say the cluster has noticed."""

from __future__ import annotations

import time

from cluster.waiting import wait_for

from . import Context, expect

BROKERS = (1, 2, 3)
STATE_WAIT_S = 30  # for leaders and ISRs to settle after a broker stops, dies or returns
POLL_S = 0.2


def cluster_of(ctx: Context):
    expect(
        ctx.own is not None and ctx.own.cluster is not None,
        "this lab is checked on a cluster of its own",
        hint="Run the notebook's first cell: it starts your own cluster.",
    )
    return ctx.own.cluster


def admin(ctx: Context, client: str = ""):
    """The cluster's admin (a super user): the checks' view of the truth. One per check: a
    kafka-python admin client keeps asking the controller it first knew, and the checks kill those.
    client: another one of the same check's, for another thread (lab 14's control channel reads
    the cluster while the check's own thread does)."""
    key = f"own-admin-{ctx.label}{client}"
    if key not in ctx.scratch:
        ctx.scratch[key] = cluster_of(ctx).admin(request_timeout_ms=15_000)
        ctx.cleanup.append(lambda: ctx.scratch.pop(key).close() if key in ctx.scratch else None)
    return ctx.scratch[key]


def retried(ctx: Context, action, what: str, timeout: float = STATE_WAIT_S, client: str = ""):
    """action(admin), again with a new admin client while it fails (a broker the client knew
    has just died or come back); TopicAlreadyExists on a retried creation is success. client:
    as admin()'s."""
    from kafka.errors import TopicAlreadyExistsError

    deadline, tried = time.monotonic() + timeout, False
    while True:
        try:
            return action(admin(ctx, client))
        except TopicAlreadyExistsError:
            if tried:
                return None
            raise
        except Exception as e:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the grading's cluster: {what} failed for {timeout:.0f} s ({e!r})") from None
            old = ctx.scratch.pop(f"own-admin-{ctx.label}{client}", None)
            if old is not None:
                old.close()
            tried = True
            time.sleep(POLL_S * 2)


def wait_until(probe, what: str, timeout: float = STATE_WAIT_S):
    """probe() until it returns something true; a grader's problem (not the student's) if never."""
    # any error: a broker that just died or came back, ask again
    waited = wait_for(probe, timeout_s=timeout, every_s=POLL_S, retry_on=(Exception,))
    if not waited:
        raise RuntimeError(f"the grading's cluster: {what} did not happen within {timeout:.0f} s (last: {waited.last})")
    return waited.last


def log_records(ctx: Context, topic: str, within_s: float = 30) -> list[tuple[str, int]]:
    """(value, timestamp) of every record the topic holds, read as the cluster's admin from the
    start to the end offsets seen first (or for within_s at most), each poll bounded."""
    from kafka import KafkaConsumer, TopicPartition

    from .bounded_reads import bounded_poll

    with KafkaConsumer(enable_auto_commit=False, **cluster_of(ctx).admin_connection()) as consumer:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        stop_at = consumer.end_offsets(tps)
        out: list = []
        deadline = time.monotonic() + within_s
        while any(consumer.position(tp) < stop_at[tp] for tp in tps) and time.monotonic() < deadline:
            for records in bounded_poll(consumer, topic, timeout_ms=500).values():
                out.extend((r.value.decode(errors="replace"), r.timestamp) for r in records if r.value is not None)
        return out


def described(ctx: Context, topic: str) -> dict:
    """The topic as the cluster's metadata says: its partitions, each with its leader, replicas and
    in-sync replicas (kafka-python's describe_topics), asked again while a broker dies or comes back."""
    return retried(ctx, lambda a: a.describe_topics([topic])[0], f"describing {topic}")


def partitions(ctx: Context, topic: str) -> dict[int, tuple[int | None, frozenset]]:
    """partition -> (leader or None, in-sync replicas), as the cluster's metadata says."""
    desc = described(ctx, topic)
    return {
        p["partition_index"]: (p["leader_id"] if p["leader_id"] >= 0 else None, frozenset(p["isr_nodes"]))
        for p in desc["partitions"]
    }


def down(ctx: Context) -> set[int]:
    return {b for b in BROKERS if cluster_of(ctx).nodes[b].process() is None}


def all_up(ctx: Context) -> None:
    """Every broker running and listed (a check that stopped or killed one starts it again)."""
    for b in sorted(down(ctx)):
        cluster_of(ctx).start_broker(b)


def stop_one(ctx: Context, broker: int, kill: bool = False) -> None:
    """Stop (or kill) a broker and wait until the cluster has moved its leaderships and taken
    it out of every in-sync replica set."""
    from cluster.brokers import live_brokers

    (cluster_of(ctx).kill_broker if kill else cluster_of(ctx).stop_broker)(broker)
    wait_until(
        lambda: broker not in retried(ctx, live_brokers, "listing the live brokers"),
        f"broker {broker} leaving the live brokers",
    )
