"""Lab 14, running Kafka, graded on a cluster of the grading's own (cluster/own.py; POLICY below
makes the pipeline start one), which the checks load, grow and restart while the student's code
runs (docs/ops-grading.md):

- lab14-q1 lagging_groups(bound): the groups whose lag (every partition they committed, every
  topic) is more than `bound` records, among groups the grader made with seeded offsets: some far
  behind over many partitions each a little, some behind on two topics, one exactly at the bound,
  one caught up, one with a member still running;
- lab14-q2-prediction: section 3's prediction (what a broker that has just joined leads and holds)
  made, in form.

In a self-check the same happens on the student's own cluster."""

from __future__ import annotations

from dataclasses import dataclass

from . import CheckFailed, Context, LabPolicy, check, expect, prediction, prediction_feedback, shown_in_kernel
from .own_cluster import cluster_of, retried, wait_until

# A three-broker cluster of the grading's own, as lab 7's (a fourth broker for section 3).
POLICY = LabPolicy(own_cluster=True, grading_cores=0.7, gradings_at_once=2)

WORDS = ("audit", "billing", "board", "crew", "delay", "fuel", "gate", "meals", "radar", "seats", "slots", "tower")


# --- lab14-q1 -------------------------------------------------------------------------------------
def fill(ctx: Context, topic: str, partitions: int, per_partition: list[int]) -> None:
    """A topic with exactly per_partition[p] records in partition p (the grader's, acks=all)."""
    from kafka import KafkaProducer
    from kafka.admin import NewTopic

    retried(ctx, lambda a: a.create_topics([NewTopic(topic, partitions, 3)]), f"creating {topic}")
    wait_until(
        lambda: len(retried(ctx, lambda a: a.describe_topics([topic])[0]["partitions"], "describing")) == partitions,
        f"{topic}'s partitions listed",
    )
    with KafkaProducer(**cluster_of(ctx).admin_connection(), acks="all", linger_ms=5) as producer:
        for p, n in enumerate(per_partition):
            for i in range(n):
                producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
        producer.flush(30)


def commit(ctx: Context, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """The group's committed offsets, set by the grader (the group has no member yet)."""
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    wanted = {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
    retried(ctx, lambda a: a.alter_group_offsets(group, wanted), f"committing {group}'s offsets")


@dataclass
class Behind:
    """One of the grader's groups: the case it stands for, its lag, its committed offsets
    ({(topic key, partition): offset})."""

    role: str
    lag: int
    offsets: dict[tuple[str, int], int]


# Each case as a message names it.
CASES = {
    "spread": "behind on every partition, on none by more than the bound",
    "two-topics": "behind on two topics, on neither alone by more than the bound",
    "at-bound": "exactly at the bound",
    "live": "with a member still running",
    "caught-up": "caught up",
    "just-under": "a few records short of the bound",
}
# Why a group was missed or named wrongly: each case rules out one wrong way of measuring.
CASE_HINTS = {
    "spread": "A group's lag is the sum over all its partitions: each of this one's is under the bound, "
    "together they are over it.",
    "two-topics": "A group may read several topics: add its lag on every topic it committed.",
    "at-bound": "Behind by more than the bound: a lag exactly at the bound is not an alert.",
    "live": "A group with a member still running has committed offsets too (list_groups() shows it as Stable).",
    "caught-up": "Lag counts from the group's committed offset, not from the start of the log.",
    "just-under": "Lag counts from the group's committed offset, not from the start of the log.",
}


def lag_plan(ctx: Context) -> tuple[int, dict[str, Behind], dict[str, list[int]]]:
    """(bound, the grader's groups, the two topics' records per partition): seeded, every case of
    CASE_HINTS once, so that each wrong way of measuring lag misses or names one group."""
    rng = ctx.rng
    bound = rng.randrange(40, 90)
    parts = 4
    # Partitions well above any lag, so committed offsets stay inside the logs.
    sizes = {
        "a": [rng.randrange(3 * bound, 4 * bound) for _ in range(parts)],
        "b": [rng.randrange(2 * bound, 3 * bound) for _ in range(2)],
    }

    def split(total: int, n: int, cap: int) -> list[int]:
        """total as n lags, each at most cap."""
        while True:
            cuts = sorted(rng.sample(range(1, total), n - 1)) if total > n else []
            out = [b - a for a, b in zip([0, *cuts], [*cuts, total])] if cuts else [total] + [0] * (n - 1)
            if max(out) <= cap:
                return out

    per_a = {
        "spread": split(bound + rng.randrange(10, bound), parts, bound - 1),  # no partition over the bound
        "at-bound": split(bound, parts, bound),
        "caught-up": [0] * parts,
        "just-under": split(bound - rng.randrange(1, 8), parts, bound),
        "live": split(bound + rng.randrange(5, bound), parts, bound),
    }
    on_a = rng.randrange(bound // 2 + 1, bound)  # behind on two topics, on neither alone over the bound
    on_b = bound + rng.randrange(1, bound // 2) - on_a
    per_a["two-topics"] = split(on_a, parts, bound)
    per_b = {"two-topics": split(on_b, 2, bound)}
    token = rng.randrange(16**4)
    groups = {}
    for role, name in zip(sorted(per_a), rng.sample(WORDS, len(per_a))):
        offsets = {("a", p): sizes["a"][p] - lag for p, lag in enumerate(per_a[role])}
        offsets.update({("b", p): sizes["b"][p] - lag for p, lag in enumerate(per_b.get(role, ()))})
        lag = sum(per_a[role]) + sum(per_b.get(role, ()))
        groups[ctx.group(f"alert-{name}-{token:04x}")] = Behind(role, lag, offsets)
    return bound, groups, sizes


def group_names(found) -> set[str] | None:
    """The student's answer as group names: a set, list, tuple, or a dict's keys ({group: lag})."""
    if isinstance(found, dict):
        found = list(found)
    if not isinstance(found, (list, tuple, set, frozenset)) or not all(isinstance(g, str) for g in found):
        return None
    return set(found)


def member_reading(ctx: Context, group: str, topics: list[str]) -> None:
    """One member in the group, joined and staying (it reads nothing past its first poll and
    commits nothing): the group is Stable while the student's alert runs."""
    import threading

    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        *topics,
        **cluster_of(ctx).admin_connection(),
        group_id=group,
        enable_auto_commit=False,
        max_poll_records=1,
        max_poll_interval_ms=300_000,
    )
    done, joined = threading.Event(), threading.Event()

    def stay():  # the consumer is this thread's alone (kafka-python's are not thread-safe)
        while not done.is_set() and not consumer.assignment():
            consumer.poll(timeout_ms=200)
        consumer.pause(*consumer.assignment())
        joined.set()
        while not done.wait(0.5):
            consumer.poll(timeout_ms=0)  # heartbeats go on in the client's own thread

    thread = threading.Thread(target=stay, daemon=True)
    thread.start()
    wait_until(joined.is_set, f"the grader's member joining {group}")

    def leave():
        done.set()
        thread.join(10)
        consumer.close()

    ctx.cleanup.append(leave)


@check("lab14-q1")
def lag_alert(ctx: Context) -> str:
    """lagging_groups(bound) names the groups more than `bound` records behind, over every partition and topic they committed"""
    bound, groups, sizes = lag_plan(ctx)
    token = ctx.rng.randrange(16**4)
    topics = {key: ctx.topic(f"alert-{key}-{token:04x}") for key in sizes}
    for key, per_partition in sizes.items():
        fill(ctx, topics[key], len(per_partition), per_partition)
    for group, g in groups.items():
        commit(ctx, group, {(topics[t], p): o for (t, p), o in g.offsets.items()})
    member_reading(ctx, next(name for name, g in groups.items() if g.role == "live"), [topics["a"]])
    behind = {name for name, g in groups.items() if g.lag > bound}
    found = ctx.sub.value(f"lagging_groups({bound})", timeout=60)
    got = group_names(found)
    expect(
        got is not None,
        f"lagging_groups({bound}) should give the names of the groups behind",
        expected="a set (or list) of group names, e.g. {'" + ctx.group("orders") + "'}",
        found=repr(found)[:300],
        hint="List the groups with admin.list_groups(); for each, list_group_offsets and the end offsets.",
    )
    assert got is not None
    order = list(CASES)  # the message and its hint start with the case most telling of a wrong metric
    missed = sorted(behind - got, key=lambda g: order.index(groups[g].role))
    wrongly = sorted((set(groups) - behind) & got, key=lambda g: order.index(groups[g].role))
    if missed or wrongly:
        # Which cases, never which names or lags: the truth is the grader's, a resubmission must not read it.
        said = [f"missed the group {CASES[groups[g].role]}" for g in missed]
        said += [f"named the group {CASES[groups[g].role]}" for g in wrongly]
        raise CheckFailed(
            f"lagging_groups({bound}) on the grader's {len(groups)} groups, {len(behind)} of them behind",
            expected=f"the {len(behind)} groups more than {bound} records behind",
            found="; ".join(said),
            hint=CASE_HINTS[groups[(missed or wrongly)[0]].role],
        )
    return f"{len(behind)} of {len(groups)} groups behind by more than {bound}, every one named"


# --- lab14-q2-prediction ----------------------------------------------------------------------------
# What section 3's demo shows of a broker that has just joined, on any machine: nothing moves by itself.
JOINED_TRUTH = {"leaders": 0, "replicas": 0}


@check("lab14-q2-prediction")
def joined_broker_prediction(ctx: Context) -> str:
    """a prediction of how many partitions a broker that has just joined leads and holds was written before the demo"""
    predicted = prediction(
        ctx,
        "predicted_broker4",
        lambda v: (
            isinstance(v, dict)
            and set(v) == set(JOINED_TRUTH)
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v.values())
        ),
        '{"leaders": a whole number, "replicas": a whole number}',
        "how many partitions broker 4 leads and how many it holds a replica of, right after it joins",
    )
    shown = shown_in_kernel(ctx, "joined_counts")
    return prediction_feedback(
        "predicted_broker4",
        predicted,
        shown if isinstance(shown, dict) else JOINED_TRUTH,
        "A new broker gets only what is made after it joins: existing partitions stay where the controller "
        "placed them until someone reassigns them.",
    )
