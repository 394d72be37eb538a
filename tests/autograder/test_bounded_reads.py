"""Every topic the grader reads is read with a bound on decompressed bytes (issue 26, part 4).

kafka-python decompresses a whole record batch before any cap of the reader's applies, so a
record of zeros that compresses to tens of KB could take the grader's process to gigabytes.
selfcheck/checks/bounded_reads.py bounds each batch while the checks poll. Here, against the
test cluster: compression bombs the brokers accept are a clear CheckFailed with the grader's
memory staying small; a batch over a (lowered) bound fails on each codec and in each place the
checks read; ordinary compressed topics still read exactly; and the kafka-python names the
module replaces are still where kafka-python decompresses."""

from __future__ import annotations

import gc
import json
import random
import re
import resource
import subprocess
import sys
import threading
import types
import uuid
from pathlib import Path

import psutil
import pytest

from selfcheck.checks import CheckFailed, Context, bounded_reads
from selfcheck.checks.bounded_reads import PATCHED, BatchTooLarge, decompression_bound
from selfcheck.checks.kafka_state import read_all

CODECS = ("gzip", "snappy", "lz4", "zstd")
BOMB_BYTES = 300 * 10**6  # zeros in one record: zstd and gzip make it tens to hundreds of KB
GROWTH_LIMIT = 300 * 10**6  # the grader's process may grow by less than this reading a bomb


@pytest.fixture
def ctx(cluster):
    """A grading's context on the test cluster, as the course's admin, in a namespace of its own."""
    c = Context("lab1", "lab1-q1", None, f"bounded-{uuid.uuid4().hex[:8]}", cluster.admin_connection())
    yield c
    try:
        c.admin.delete_topics([t for t in c.admin.list_topics() if t.startswith(c.topic(""))])
    except Exception:
        pass
    c.close()


def new_topic(ctx: Context, name: str, partitions: int = 1, **configs: str) -> str:
    topic = ctx.topic(name)
    ctx.admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": 3, "configs": configs}})
    ctx.admin.wait_for_topics([topic])
    return topic


def produce(ctx: Context, topic: str, codec: str, records, **settings) -> list[tuple]:
    """Send (key, value) pairs compressed with `codec`; [(partition, offset, key, value)] as acknowledged."""
    from kafka import KafkaProducer

    with KafkaProducer(**ctx.kafka, compression_type=codec, acks="all", **settings) as producer:
        futures = [(producer.send(topic, key=k, value=v), k, v) for k, v in records]
        producer.flush(60)
        return [(m.partition, m.offset, k, v) for f, k, v in futures for m in [f.get(timeout=60)]]


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


BOMB = """
import json, sys
from kafka import KafkaProducer
conn, topic, codec, size = json.loads(sys.stdin.read())
p = KafkaProducer(**conn, compression_type=codec, acks="all", max_request_size=size + 2**20,
                  request_timeout_ms=120_000)
m = p.send(topic, value=bytes(size)).get(timeout=120)
p.close()
print(m.offset)
"""


@pytest.mark.parametrize("codec", ["zstd", "gzip"])
def test_a_compression_bomb_is_a_clear_failure_and_the_grader_stays_small(ctx, codec):
    topic = new_topic(ctx, f"bomb-{codec}")
    # Made in a process of its own: making it takes the maker's memory, which the grader's must not count.
    made = subprocess.run(
        [sys.executable, "-c", BOMB],
        input=json.dumps([ctx.kafka, topic, codec, BOMB_BYTES]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0 and made.stdout.strip() == "0", made.stderr[-2000:]  # the brokers took it

    gc.collect()
    before = psutil.Process().memory_info().rss
    with pytest.raises(CheckFailed) as failed:
        read_all(ctx, f"bomb-{codec}")
    # The process's peak since it started is at least what it reached reading; from what it held
    # just before, that is an upper bound on how much the read took.
    growth = peak_rss() - before
    print(
        f"\n{codec} bomb of {BOMB_BYTES:,} bytes: RSS before {before / 2**20:.0f} MiB, "
        f"peak after {peak_rss() / 2**20:.0f} MiB, growth at most {growth / 2**20:.0f} MiB"
    )
    assert growth < GROWTH_LIMIT, f"reading the bomb took the grader up by {growth:,} bytes"
    e = failed.value
    assert e.what == f"the record batches of {topic} decompress to more than 64 MiB at a time", e.what
    assert "compressed bytes" in e.found and "Send records of a few kB" in e.hint


@pytest.mark.parametrize("codec", CODECS)
def test_ordinary_compressed_topics_are_read_exactly(ctx, codec):
    topic = new_topic(ctx, f"plain-{codec}", partitions=3)
    rng = random.Random(codec)
    text = b"".join(b"flight %d from %s; " % (i, rng.choice([b"ORD", b"SFO", b"JFK"])) for i in range(20_000))
    records = []
    for i in range(3000):  # compressible and random values, empty ones, none at all; keys or not
        size = rng.choice([0, 10, 200, 5000, 60_000])
        key = b"k%d" % (i % 40) if i % 3 else None
        value = rng.choice([text[:size], rng.randbytes(size), None if key else b""])
        records.append((key, value))
    records.append((b"big", text * 3))  # one record of ~1.5 MB, well under the bound
    sent = produce(ctx, topic, codec, records, linger_ms=20, batch_size=256 * 1024, max_request_size=4 * 2**20)
    got = read_all(ctx, f"plain-{codec}")
    assert sorted((r.partition, r.offset, r.key, r.value) for r in got) == sorted(sent)


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_over_the_bound_fails_where_the_checks_read_and_nowhere_else(ctx, codec, monkeypatch):
    """With the bound lowered to 1 MiB, a 2 MiB batch stands for a bomb on every codec: read_all, lab 1's
    probe consumer and lab 7's log reader each fail with the clear message; a plain consumer of the
    same process, outside the checks' reads, still reads it whole."""
    from kafka import KafkaConsumer, TopicPartition

    from selfcheck.checks.lab1 import Bench
    from selfcheck.checks.lab7 import log_values

    monkeypatch.setattr(bounded_reads, "MAX_BATCH_BYTES", 2**20)
    topic = new_topic(ctx, f"over-{codec}")
    value = b"0123456789" * (2 * 2**20 // 10)
    produce(ctx, topic, codec, [(b"over", value)], max_request_size=4 * 2**20)
    message = f"the record batches of {topic} decompress to more than 1 MiB at a time"

    with pytest.raises(CheckFailed) as failed:
        read_all(ctx, f"over-{codec}")
    assert failed.value.what == message

    ctx.own = types.SimpleNamespace(cluster=types.SimpleNamespace(admin_connection=lambda: ctx.kafka))
    with pytest.raises(CheckFailed) as failed:
        log_values(ctx, topic)
    assert failed.value.what == message

    bench = Bench(ctx, port=1)  # its RPC channel is never used here
    try:
        produce(ctx, bench.topic, codec, [(b"over", value)], max_request_size=4 * 2**20)
        with pytest.raises(CheckFailed) as failed:
            bench.trip()
        assert failed.value.what == f"the record batches of {bench.topic} decompress to more than 1 MiB at a time"
    finally:
        bench.close()

    with KafkaConsumer(**ctx.kafka, enable_auto_commit=False) as plain:
        tp = TopicPartition(topic, 0)
        plain.assign([tp])
        plain.seek_to_beginning(tp)
        got = []
        for _ in range(40):
            got += [r.value for batch in plain.poll(timeout_ms=500).values() for r in batch]
            if got:
                break
        assert got == [value]


# --- the bounded decoders themselves, and the names they replace ----------------------------------------


def encoders():
    import kafka.codec

    return {
        "gzip": kafka.codec.gzip_encode,
        "snappy": kafka.codec.snappy_encode,
        "lz4": kafka.codec.lz4_encode,
        "zstd": kafka.codec.zstd_encode,
    }


def test_many_batches_of_one_poll_share_the_bound(ctx):
    """Twelve batches of 200 KB each (one record a batch, sent one by one), none past a bound of
    1 MiB alone, 2.4 MB together: a poll that decompresses them all fails (found by a reviewer: 20
    batches of 60 MiB took the grader to 1.4 GB when each batch had a bound of its own)."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(bounded_reads, "MAX_BATCH_BYTES", 2**20)
    try:
        topic = new_topic(ctx, "many-batches")
        for i in range(12):
            produce(ctx, topic, "zstd", [(b"k%d" % i, b"%09d" % i * (200_000 // 9))], linger_ms=0)
        with pytest.raises(CheckFailed) as failed:
            read_all(ctx, "many-batches")
        assert failed.value.what == f"the record batches of {topic} decompress to more than 1 MiB at a time"
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("codec", CODECS)
def test_the_bounded_decoders_give_what_kafka_codec_gives_up_to_the_bound(codec):
    import kafka.codec
    from kafka.record import default_records

    limit = 2**20
    data = random.Random(0).randbytes(100_000) + bytes(limit - 100_000)  # exactly the bound
    packed = encoders()[codec](data)
    with decompression_bound(limit):
        decode = getattr(default_records, f"{codec}_decode")  # bounded from the first decompression_bound on
        assert bytes(decode(packed)) == getattr(kafka.codec, f"{codec}_decode")(packed) == data
        with pytest.raises(BatchTooLarge):  # the budget is spent: one byte more fails
            decode(encoders()[codec](b"x"))
    with decompression_bound(limit), pytest.raises(BatchTooLarge):
        decode(encoders()[codec](data + b"x"))
    if codec == "snappy":  # a raw block, without kafka's (xerial) framing
        raw = kafka.codec.snappy_encode(data, xerial_compatible=False)
        with decompression_bound(limit):
            assert bytes(decode(raw)) == data
        with decompression_bound(limit), pytest.raises(BatchTooLarge):
            decode(kafka.codec.snappy_encode(data + b"x", xerial_compatible=False))


def test_the_bound_holds_only_where_it_is_set():
    from kafka.record import default_records

    big = encoders()["zstd"](bytes(3 * 2**20))
    with decompression_bound(2**20):
        with pytest.raises(BatchTooLarge):
            default_records.zstd_decode(big)
        elsewhere = []  # another thread of the process (another consumer): kafka.codec's own decoding
        t = threading.Thread(target=lambda: elsewhere.append(len(default_records.zstd_decode(big))))
        t.start()
        t.join()
        assert elsewhere == [3 * 2**20]
    assert len(default_records.zstd_decode(big)) == 3 * 2**20


def test_the_names_replaced_are_where_kafka_python_decompresses():
    """Fails when a new kafka-python decompresses elsewhere or under other names: then
    bounded_reads.PATCHED (and its decoders) must follow."""
    import kafka
    import kafka.codec
    from kafka.record import default_records, legacy_records

    with decompression_bound():  # installed: each replaced name wraps kafka.codec's own
        pass
    for module_name, names in PATCHED.items():
        module = sys.modules[module_name]
        for name in names:
            assert getattr(module, name).__wrapped__ is getattr(kafka.codec, name), f"{module_name}.{name}"
    decoders = {"gzip_decode", "snappy_decode", "lz4_decode", "zstd_decode", "lz4_decode_old_kafka"}
    calls = lambda f: decoders & set(f.__code__.co_names)
    assert calls(default_records.DefaultRecordBatch._maybe_uncompress) == set(PATCHED["kafka.record.default_records"])
    assert calls(legacy_records.LegacyRecordBatch._decompress) == {
        *PATCHED["kafka.record.legacy_records"],
        "lz4_decode_old_kafka",
    }
    # lz4_decode_old_kafka (magic-0 batches) is left as it is: without xxhash it cannot decompress at all.
    assert kafka.codec.xxhash is None
    # No other file of kafka-python calls a decoder (a new record format, a decode in the fetcher).
    root = Path(kafka.__file__).parent
    callers = {
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if re.search(r"\b(gzip|snappy|lz4f?|zstd)_decode\w*\(", p.read_text())
    }
    assert callers == {"codec.py", "record/default_records.py", "record/legacy_records.py"}, callers


def test_polls_within_a_whole_reads_bound_add_up():
    """A poll's bound is reset at every poll; the whole read's (read_all's) is not: a reviewer's
    polls of 500 records each stayed under 64 MiB each and took the grader to 2.16 GB together."""
    from kafka.record import default_records

    with decompression_bound(2**20):  # no outer bound
        pass
    mib = encoders()["zstd"](bytes(2**20))
    with decompression_bound(3 * 2**20):
        for _ in range(3):
            with decompression_bound(2 * 2**20):  # each poll alone stays under its bound
                default_records.zstd_decode(mib)
        with decompression_bound(2 * 2**20), pytest.raises(BatchTooLarge) as failed:
            default_records.zstd_decode(mib)  # the fourth MiB passes the read's 3 MiB
    assert failed.value.limit == 3 * 2**20


def test_a_records_headers_count_against_what_a_read_may_hold(ctx, monkeypatch):
    """Empty values with 50 KB headers (a reviewer's flood: 24,000 of them, zstd-compressed to a
    few kB, took the grader past 800 MB while only keys and values were counted)."""
    from kafka import KafkaProducer

    from selfcheck.checks import kafka_state

    monkeypatch.setattr(kafka_state, "MAX_READ_BYTES", 2**20)
    topic = new_topic(ctx, "headers")
    with KafkaProducer(**ctx.kafka, acks="all") as producer:
        for _ in range(40):  # 2 MB of headers, no value, not compressed (the next test compresses)
            producer.send(topic, key=b"B6", value=b"", headers=[("pad", bytes(50_000))])
        producer.flush(60)
    with pytest.raises(CheckFailed) as failed:
        read_all(ctx, "headers")
    assert failed.value.what == f"{topic} holds more than 1 MiB"


def test_a_whole_read_decompresses_no_more_than_it_may_hold(ctx, monkeypatch):
    """The same flood compressed: each poll's batches stay under a poll's bound, the read's do not."""
    from kafka import KafkaProducer

    from selfcheck.checks import kafka_state

    monkeypatch.setattr(kafka_state, "MAX_READ_BYTES", 2**20)
    topic = new_topic(ctx, "headers-zstd")
    with KafkaProducer(**ctx.kafka, compression_type="zstd", acks="all", linger_ms=0) as producer:
        for _ in range(40):
            producer.send(topic, key=b"B6", value=b"", headers=[("pad", bytes(50_000))]).get(timeout=30)
    with pytest.raises(CheckFailed) as failed:
        read_all(ctx, "headers-zstd")
    assert failed.value.what == f"the record batches of {topic} decompress to more than 1 MiB in all"
