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

import threading
import time
from dataclasses import dataclass

from cluster.waiting import wait_for

from . import CheckFailed, Context, LabPolicy, check, expect, prediction, prediction_feedback, shown_in_kernel
from .own_cluster import cluster_of, log_records, retried, wait_until

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


# --- lab14-q2 -------------------------------------------------------------------------------------
BROKERS_AFTER = (1, 2, 3, 4)
MIN_INSYNC = 2  # the course's min.insync.replicas (cluster/settings.py's TEACHING_DEFAULTS)
BULK_BYTES = 6 * 2**20  # on the topic that must move: seconds under a throttle of a few MB/s
REBALANCE_TIMEOUT_S = 240
WATCH_EVERY_S = 0.05
THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLED_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def made_on_broker_1(ctx: Context, topic: str, partitions: int) -> None:
    """A topic of three replicas on brokers 1-3, broker 1 first (so leader) of every partition: the
    cluster before it grew, as a careless start left it."""
    from kafka.admin import NewTopic

    assignments = {p: [1, *ctx.rng.sample((2, 3), 2)] for p in range(partitions)}
    retried(
        ctx, lambda a: a.create_topics([NewTopic(topic, -1, -1, replica_assignments=assignments)]), f"creating {topic}"
    )
    wait_until(
        lambda: all(
            p["leader_id"] == 1
            for p in retried(ctx, lambda a: a.describe_topics([topic])[0]["partitions"], "describing")
        ),
        f"{topic}'s leaders elected",
    )


def config_values(found: dict) -> dict[str, dict[str, str | None]]:
    """kafka-python's describe_configs answer as {resource name: {key: value}}."""
    out: dict[str, dict[str, str | None]] = {}
    for by_name in found.values():
        for name, configs in by_name.items():
            out[str(name)] = {k: (v.get("value") if isinstance(v, dict) else v) for k, v in configs.items()}
    return out


class Background:
    """A loop of the grader's on a thread of its own for the length of a `with` block: started on
    entering, asked to end (`_done`) and joined on leaving, then `close` frees what it held."""

    def __init__(self):
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join(10)
        self.close()


class Watch(Background):
    """What the brokers show while the student's rebalance runs, sampled every WATCH_EVERY_S by the
    grader's own admin client: whether a reassignment was in progress, whether a throttle was set
    (on the brokers' rates and the topics' throttled replicas) while it was, and the fewest in-sync
    replicas any partition had."""

    def __init__(self, ctx: Context, topics: list[str]):
        super().__init__()
        self.ctx, self.topics = ctx, topics
        self.moving = self.throttled_while_moving = self.throttle_seen = False
        self.fewest_in_sync: tuple[int, str] = (99, "")
        self.samples = 0
        self.errors: list[str] = []

    def throttle(self, admin) -> dict[str, dict[str, str | None]]:
        from kafka.admin import ConfigResource, ConfigResourceType

        resources = [ConfigResource(ConfigResourceType.BROKER, str(b)) for b in BROKERS_AFTER]
        resources += [ConfigResource(ConfigResourceType.TOPIC, t) for t in self.topics]
        found = config_values(admin.describe_configs(resources))
        keys = (*THROTTLE_RATES, *THROTTLED_REPLICAS)
        return {name: {k: v for k, v in c.items() if k in keys and v} for name, c in found.items()}

    def _run(self):
        a = admin_of(self.ctx)
        while not self._done.wait(WATCH_EVERY_S):
            try:
                moving = bool(a.list_partition_reassignments())
                set_now = self.throttle(a)
                rates = any(k in c for c in set_now.values() for k in THROTTLE_RATES)
                replicas = any(k in c for c in set_now.values() for k in THROTTLED_REPLICAS)
                for t in a.describe_topics(self.topics):
                    for p in t["partitions"]:
                        self.fewest_in_sync = min(
                            self.fewest_in_sync, (len(p["isr_nodes"]), f"{t['name']} partition {p['partition_index']}")
                        )
            except Exception as e:  # a broker busy or changing leaders: the next sample
                self.errors.append(repr(e)[:200])
                continue
            self.samples += 1
            self.moving |= moving
            self.throttle_seen |= rates and replicas
            self.throttled_while_moving |= moving and rates and replicas

    @property
    def throttled(self) -> bool:
        """A throttle on the brokers and the topics while partitions moved; or, where the moves were
        too quick for any sample to catch one in progress, at some sample during the rebalance
        (kafka-reassign-partitions.sh sets it before the moves and --verify lifts it after)."""
        return self.throttled_while_moving or (not self.moving and self.throttle_seen)


def admin_of(ctx: Context):
    """A second admin client of the grader's, for the watcher's thread (clients are not shared across threads)."""
    key = "lab14-watch-admin"
    if key not in ctx.scratch:
        ctx.scratch[key] = cluster_of(ctx).admin(request_timeout_ms=15_000)
        ctx.cleanup.append(lambda: ctx.scratch.pop(key).close())
    return ctx.scratch[key]


class LiveProducer(Background):
    """The grader's producer (acks=all, idempotent) writing numbered records to `topic` while the
    student's rebalance runs; what the brokers acknowledged and what failed, from its own futures."""

    def __init__(self, ctx: Context, topic: str, per_second: float = 100, size: int = 0):
        from kafka import KafkaProducer

        import random

        self.topic, self.pause, self.size = topic, 1 / per_second, size
        # each value carries a nonce of the grader's: a record lost cannot be written back by
        # whoever could write to the topic (on the grading's own cluster the student's login may
        # change ACLs), since nobody but the grader knows what it held
        self.nonces = random.Random(ctx.rng.getrandbits(64))
        self.producer = KafkaProducer(
            **cluster_of(ctx).admin_connection(),
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            retries=2**31 - 1,
            delivery_timeout_ms=120_000,
            request_timeout_ms=20_000,
        )
        self.acked: set[str] = set()
        self.failed: list[str] = []
        self.sent = 0
        super().__init__()

    def _run(self):
        while not self._done.wait(self.pause):
            value = f"live-{self.sent}-{self.nonces.getrandbits(32):08x}".ljust(self.size, ".")
            self.sent += 1
            future = self.producer.send(self.topic, value=value.encode())
            future.add_callback(lambda _, v=value: self.acked.add(v))
            future.add_errback(lambda e, v=value: self.failed.append(f"{v}: {e!r}"[:200]))

    def close(self):
        self.producer.flush(60)
        self.producer.close(10)


def values_in(ctx: Context, topic: str) -> set[str]:
    """Every value the topic holds, read by the grader from the start to the end offsets."""
    return {value for value, _ in log_records(ctx, topic, within_s=60)}


def spread(counts: dict[int, int], total: int) -> bool:
    """Even over the four brokers: each holds the floor or the ceiling of total / 4."""
    low, high = total // 4, -(-total // 4)
    return all(low <= counts.get(b, 0) <= high for b in BROKERS_AFTER)


@check("lab14-q2")
def rebalance_onto_four(ctx: Context) -> str:
    """rebalance(topics, brokers) spreads the grader's topics evenly over four brokers, throttled, while the grader's producer writes"""
    from kafka import KafkaProducer

    ctx.own.add_broker()  # the fourth broker, empty (already there in a self-check after the demo)
    ctx.own.allow_operations()  # the grading's login may move partitions on the grading's own cluster
    token = ctx.rng.randrange(16**4)
    live, bulk = ctx.topic(f"moving-live-{token:04x}"), ctx.topic(f"moving-bulk-{token:04x}")
    n_live, n_bulk = ctx.rng.choice((5, 6, 7)), ctx.rng.choice((2, 3))
    made_on_broker_1(ctx, live, n_live)
    made_on_broker_1(ctx, bulk, n_bulk)
    with KafkaProducer(**cluster_of(ctx).admin_connection(), acks="all", linger_ms=20, batch_size=256 * 1024) as p:
        filler = ctx.rng.randbytes(1024)
        for i in range(BULK_BYTES // 1024):
            p.send(bulk, value=filler, partition=i % n_bulk)
        p.flush(60)
    topics = [live, bulk]
    started = time.monotonic()
    with LiveProducer(ctx, live) as producer, Watch(ctx, topics) as watch:
        time.sleep(1)  # the producer writing before anything moves
        ctx.sub.value(f"rebalance({topics!r}, {list(BROKERS_AFTER)!r})", timeout=REBALANCE_TIMEOUT_S)
        took = time.monotonic() - started
        still = bool(retried(ctx, lambda a: a.list_partition_reassignments(), "listing reassignments"))
        time.sleep(1)  # and after
    expect(
        not still,
        "rebalance() returned while partitions were still moving",
        hint="Wait until kafka-reassign-partitions.sh --verify says every reassignment is complete (it also removes the throttle).",
    )
    expect(
        watch.samples > 0,
        "the grader could not watch the cluster while rebalance() ran",
        found="; ".join(watch.errors[:3]),
    )
    placed = {t["name"]: t["partitions"] for t in retried(ctx, lambda a: a.describe_topics(topics), "describing")}
    replicas: dict[int, int] = {}
    leaders: dict[int, int] = {}
    for t, parts in placed.items():
        for p in parts:
            expect(
                len(p["replica_nodes"]) == 3,
                f"{t} partition {p['partition_index']} should keep its three replicas",
                expected=3,
                found=p["replica_nodes"],
                hint="A reassignment plan lists every replica of a partition, not only the new one.",
            )
            for b in p["replica_nodes"]:
                replicas[b] = replicas.get(b, 0) + 1
            leaders[p["leader_id"]] = leaders.get(p["leader_id"], 0) + 1
    n = n_live + n_bulk
    show = lambda c: ", ".join(f"broker {b}: {c.get(b, 0)}" for b in BROKERS_AFTER)
    expect(
        spread(replicas, 3 * n),
        f"the {3 * n} replicas of the grader's {n} partitions should be spread evenly over brokers 1-4",
        expected=f"{3 * n // 4} or {-(-3 * n // 4)} each",
        found=show(replicas),
        hint="Plan the new replica lists yourself (or with --generate) so that each broker gets a quarter of them.",
    )
    expect(
        spread(leaders, n),
        f"the leaders of the grader's {n} partitions should be spread evenly over brokers 1-4",
        expected=f"{n // 4} or {-(-n // 4)} each",
        found=show(leaders),
        hint="A partition keeps its leader while that broker stays a replica: order each replica list so the first (preferred) leaders are spread, then run a preferred leader election.",
    )
    expect(
        watch.throttled,
        "the data moved without a replication throttle",
        expected="leader/follower.replication.throttled.rate on the brokers and the throttled replicas on the topics, while partitions moved",
        found="no throttle seen in any sample while a reassignment was in progress",
        hint="Pass --throttle to kafka-reassign-partitions.sh --execute: moving data at full speed starves the clients of the brokers' network and disks.",
    )
    left = {name: c for name, c in watch.throttle(admin_of(ctx)).items() if c}
    expect(
        not left,
        "the throttle should be removed once the partitions have moved",
        found=left,
        hint="kafka-reassign-partitions.sh --verify removes it when it reports every reassignment complete.",
    )
    fewest, where = watch.fewest_in_sync
    expect(
        fewest >= MIN_INSYNC,
        f"{where} fell to {fewest} in-sync replica(s) while it moved, below min.insync.replicas={MIN_INSYNC}",
        hint="Move a partition by adding its new replicas before removing old ones (one reassignment per partition does that); never cut a partition to fewer replicas.",
    )
    expect(
        not producer.failed,
        f"the grader's producer (acks=all) failed {len(producer.failed)} of {producer.sent} writes while the partitions moved",
        found="; ".join(producer.failed[:3]),
    )
    lost = producer.acked - values_in(ctx, live)
    expect(
        not lost,
        f"{len(lost)} of {len(producer.acked)} records the brokers acknowledged are not in {live}",
        hint="A reassignment never loses acknowledged records; was a replica list cut short or a broker stopped?",
    )
    return f"{n} partitions over brokers 1-4 in {took:.0f} s, throttled, {len(producer.acked)} records written meanwhile, none lost"


# --- lab14-q3 -------------------------------------------------------------------------------------
RESTART_TIMEOUT_S = 420  # four brokers, each stopped, started and caught up: about 60 s here
LONGEST_GAP_S = 20
# The grader's topic during the restart: 50 KB a second written, a megabyte more while each broker
# is down, and that broker's fetches held until 3 s after the grader answers its start (CatchUp):
# a broker back from a restart is out of sync for seconds (as on a busy cluster), not for the
# fraction of a second a quiet laptop's would be, however long its start took. A script that does
# not wait for the in-sync replicas meets partitions still under-replicated at its next stop.
RESTART_WRITES = (50, 1000)  # records a second, bytes each
WHILE_DOWN_BYTES = 2**20  # written while each broker is down: seconds of catching up under the throttle
DRAIN_S = 30  # after the restart, for the grader's consumer to read what was acknowledged


class LiveConsumer(Background):
    """The grader's consumer, in a group of its own, reading `topic` on a thread of its own: every
    value read and when, so the longest wait between two reads says whether it was stuck."""

    def __init__(self, ctx: Context, topic: str, group: str):
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            topic,
            **cluster_of(ctx).admin_connection(),
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=True,
            request_timeout_ms=20_000,
        )
        self.read: set[str] = set()
        self.read_at: list[float] = []
        super().__init__()

    def _run(self):
        while not self._done.is_set():
            try:
                batches = self.consumer.poll(timeout_ms=500)
            except Exception:  # a broker leaving under it: kafka-python asks again on the next poll
                time.sleep(0.5)
                continue
            got = [r.value.decode(errors="replace") for records in batches.values() for r in records if r.value]
            if got:
                self.read.update(got)
                self.read_at.append(time.monotonic())

    def longest_gap(self, since: float, until: float) -> float:
        """The longest time in [since, until] with no read."""
        times = [since, *(t for t in self.read_at if since < t < until), until]
        return max(b - a for a, b in zip(times, times[1:]))

    def close(self):
        self.consumer.close()


class CatchUp:
    """What makes a restarted broker's catching up take seconds after the grader answers its start,
    however long the start took: just before a broker stops, the grader holds every leader's
    sending to replicas out of sync (leader.replication.throttled.rate, for every replica of the
    grader's topic) to a trickle; while the broker is down the grader writes WHILE_DOWN_BYTES more;
    HOLD_S after it is back the trickle is lifted and it catches up at once. A leader throttles
    only replicas out of sync, so the grader's writes go on at their pace meanwhile. Undone at the
    end (a self-check runs on the student's own cluster)."""

    TRICKLE = 1000  # bytes a second: one fetch's worth, then nothing until HOLD_S after the start
    HOLD_S = 3.0

    def __init__(self, ctx: Context, topic: str):
        self.ctx, self.topic = ctx, topic
        self._timers: list[threading.Timer] = []
        self._configs([topic_throttle(topic, "*")])

        def undo():
            for timer in self._timers:
                timer.cancel()
            self._configs([topic_throttle(topic, ("DELETE", None))])
            self._rates(("DELETE", None))

        ctx.cleanup.append(undo)

    def _configs(self, resources) -> None:
        if resources:
            retried(
                self.ctx,
                lambda a: a.alter_configs(resources, raise_on_unknown=False),  # kafka-python lacks the throttles' names
                "setting the grader's replication throttle",
            )

    def _rates(self, value) -> None:
        """Every running broker's leader throttle (a broker's own settings are changed on it)."""
        nodes = cluster_of(self.ctx).nodes
        self._configs([broker_throttle(b, value) for b in sorted(nodes) if nodes[b].process() is not None])

    def before_stop(self, broker: int) -> None:
        for timer in self._timers:  # a lift still pending is for the broker before: this hold is the one now
            timer.cancel()
        self._rates(str(self.TRICKLE))

    def while_down(self, broker: int) -> None:
        from kafka import KafkaProducer

        with KafkaProducer(**cluster_of(self.ctx).admin_connection(), acks="all", linger_ms=20, retries=10) as producer:
            filler = b"." * 1000
            for _ in range(WHILE_DOWN_BYTES // len(filler)):
                producer.send(self.topic, value=filler)
            producer.flush(60)

    def when_back(self, broker: int) -> None:
        lift = threading.Timer(self.HOLD_S, self._rates, (("DELETE", None),))
        lift.daemon = True
        lift.start()
        self._timers.append(lift)


def topic_throttle(topic: str, value):
    """The topic's replicas throttled by their leaders ("*": all of them) or not (("DELETE", None))."""
    from kafka.admin import ConfigResource, ConfigResourceType

    return ConfigResource(ConfigResourceType.TOPIC, topic, configs={"leader.replication.throttled.replicas": value})


def broker_throttle(broker: int, value):
    """A broker's rate, as a leader, to throttled replicas out of sync (bytes a second), or ("DELETE", None)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    return ConfigResource(ConfigResourceType.BROKER, str(broker), configs={"leader.replication.throttled.rate": value})


@check("lab14-q3")
def rolling_restart(ctx: Context) -> str:
    """rolling_restart.py restarts every broker cleanly, one at a time, while the grader's producer and consumer work: nothing acknowledged lost, no consumer stuck"""
    from .broker_control import Channel, rolling_restart_fault
    from .own_cluster import all_up
    from .scripts import ended_early, wait

    all_up(ctx)
    token = ctx.rng.randrange(16**4)
    topic = ctx.topic(f"restarted-{token:04x}")
    fill(ctx, topic, ctx.rng.choice((4, 5, 6)), [])
    catch_up = CatchUp(ctx, topic)
    started = time.monotonic()
    per_second, size = RESTART_WRITES
    with LiveConsumer(ctx, topic, f"{topic}-reader") as consumer:
        with LiveProducer(ctx, topic, per_second=per_second, size=size) as producer:
            time.sleep(2)  # both working before the first broker goes
            with Channel(
                ctx, before_stop=catch_up.before_stop, while_down=catch_up.while_down, when_back=catch_up.when_back
            ) as channel:
                run = channel.start(ctx, "rolling_restart.py", tag="restart")
                code = wait(run, RESTART_TIMEOUT_S)
            ended = time.monotonic()
            time.sleep(2)
        drained = wait_for(lambda: producer.acked <= consumer.read, timeout_s=DRAIN_S, every_s=0.5)
    fault = rolling_restart_fault(channel.records, channel.brokers, channel.down_at_end)
    if fault and not [r for r in channel.records if r.verb in ("stop", "kill", "start")] and code != 0:
        raise ended_early(
            run, "before it asked for any broker to stop", hint="Run it yourself first: python rolling_restart.py"
        )
    expect(
        fault is None,
        "rolling_restart.py's restart, as the grader did and recorded it: " + (fault or ""),
        hint="Stop a broker with brokers.stop(b), start it with brokers.start(b), then wait until no partition is "
        "under-replicated (every broker's kafka_under_replicated_partitions 0, or the admin client's ISRs whole) "
        "before the next.",
    )
    expect(
        not producer.failed,
        f"the grader's producer (acks=all) failed {len(producer.failed)} of {producer.sent} writes during the restart",
        found="; ".join(producer.failed[:3]),
        hint="With one broker down at a time and min.insync.replicas=2, every write should succeed after its retries.",
    )
    in_topic = values_in(ctx, topic)
    lost = producer.acked - in_topic
    expect(not lost, f"{len(lost)} of {len(producer.acked)} records the brokers acknowledged are not in {topic}")
    expect(
        bool(drained),
        f"the grader's consumer had not read {len(producer.acked - consumer.read)} of the acknowledged records "
        f"{DRAIN_S} s after the restart",
        hint="Every broker should be back and every partition led when the script ends.",
    )
    gap = consumer.longest_gap(started + 2, ended)
    expect(
        gap <= LONGEST_GAP_S,
        f"the grader's consumer read nothing for {gap:.0f} s while the producer wrote",
        expected=f"at most {LONGEST_GAP_S} s without a record",
        hint="A clean stop hands leaderships over in a moment; a consumer waits long only when a broker is killed "
        "or several are down.",
    )
    restarts = sum(r.verb == "start" and r.done for r in channel.records)
    return f"{restarts} brokers restarted one at a time, {len(producer.acked)} records written meanwhile, none lost, the consumer never waited more than {gap:.1f} s"
