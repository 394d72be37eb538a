"""The grader's reads of a student's topic, with a bound on the bytes a record batch decompresses to.

kafka-python decompresses a whole record batch in one call before any record reaches the
caller: DefaultRecordBatch._maybe_uncompress (and, for the old message formats,
LegacyRecordBatch._decompress) calls the names gzip_decode, snappy_decode, lz4_decode and
zstd_decode that kafka.record.default_records and kafka.record.legacy_records imported from
kafka.codec. A caller's cap on what it keeps applies only afterwards: one record of 600 MB of
zeros, zstd-compressed to tens of KB, took the grader to 1.85 GB.

So this module puts, once, in those two modules' namespaces, decoders that stop as soon as a
batch's output passes a bound (gzip and zstd read their stream a chunk at a time, lz4 its
frame with max_length, snappy adds up the lengths its blocks declare before decompressing).
They bound only inside `decompression_bound()` (a context variable: the thread that polls is
the thread that decompresses); anywhere else, and in every other consumer of the process,
they call kafka.codec's own functions. `bounded_poll` is what the checks call.
tests/autograder/test_bounded_reads.py fails if kafka-python moves these names.

Not bounded: legacy_records.lz4_decode_old_kafka, for magic-0 batches, which Kafka 4 brokers
no longer accept; it cannot decompress without xxhash, which the course
does not install (the test checks that too).
"""

from __future__ import annotations

import contextlib
import gzip
import importlib
import io
import struct
import threading
from contextvars import ContextVar

from . import CheckFailed

# A lab's batches decompress to kilobytes, a few MB at most (the brokers refuse an uncompressed
# request over 16 MB). 64 MiB is far above that, and small enough that kafka-python's copies of
# one such batch (its output, a bytearray of it, the records' values) stay a few hundred MB, well
# under the grader's 1 GB.
MAX_BATCH_BYTES = 64 * 2**20
CHUNK_BYTES = 2**20  # gzip and zstd are read this much at a time, lz4 decompressed this much

# The names each module imported from kafka.codec and decompresses batches with.
PATCHED = {
    "kafka.record.default_records": ("gzip_decode", "snappy_decode", "lz4_decode", "zstd_decode"),
    "kafka.record.legacy_records": ("gzip_decode", "snappy_decode", "lz4_decode"),
}

# [the bound, what is left of it]: one budget for every batch decompressed within one
# decompression_bound() (one poll), so many batches of a poll cannot add up past it either.
_budget: ContextVar[list[int] | None] = ContextVar("decompression_budget", default=None)
_installed = False
_install_lock = threading.Lock()


class BatchTooLarge(Exception):
    """A record batch decompresses to more than what is left of the bound in force."""

    def __init__(self, limit: int, compressed: int):
        super().__init__(f"a record batch of {compressed:,} bytes decompresses to more than {limit:,} bytes")
        self.limit, self.compressed = limit, compressed


class _Exceeded(Exception):
    """A decoder's output passed the bound (BatchTooLarge says of which batch)."""


def bounded_poll(consumer, topic: str, timeout_ms: int, **kwargs) -> dict:
    """consumer.poll(...) decompressing at most MAX_BATCH_BYTES in all (one batch or many: a poll
    may hold hundreds); more is a CheckFailed naming the topic."""
    try:
        with decompression_bound():
            return consumer.poll(timeout_ms=timeout_ms, **kwargs)
    except BatchTooLarge as e:
        bound = f"{e.limit / 2**20:g} MiB"
        when = "at a time" if e.limit == MAX_BATCH_BYTES else "in all"  # a poll's bound, or a whole read's
        raise CheckFailed(
            f"the record batches of {topic} decompress to more than {bound} {when}",
            expected=f"at most {bound} once decompressed",
            found=f"{e.compressed:,} compressed bytes that decompress to more than {bound}",
            hint="Send records of a few kB; a lab's topics hold a few megabytes. Compression does "
            "not change that: the grader reads each batch as it is once decompressed.",
        ) from None


@contextlib.contextmanager
def decompression_bound(limit: int | None = None):
    """Within: the record batches kafka-python decompresses in this thread (or task) may add up
    to `limit` bytes (MAX_BATCH_BYTES unless given); the one that passes it raises BatchTooLarge.
    Nested in another bound (a whole read's, around each poll's), what is decompressed counts
    against both: polls of a few hundred records each cannot add up past the outer one."""
    _install()
    limit = limit or MAX_BATCH_BYTES
    outer = _budget.get()
    if outer is None or limit <= outer[1]:
        budget = [limit, limit]
    else:  # the outer bound is the nearer one: a batch that passes it is told that bound
        budget = [outer[0], outer[1]]
    start = budget[1]
    token = _budget.set(budget)
    try:
        yield
    finally:
        _budget.reset(token)
        if outer is not None:
            outer[1] -= start - budget[1]


def _install() -> None:
    global _installed
    with _install_lock:
        if _installed:
            return
        import kafka.codec

        modules = {name: importlib.import_module(name) for name in PATCHED}
        moved = [
            f"{m}.{n}"
            for m, names in PATCHED.items()
            for n in names
            if getattr(modules[m], n, None) is not getattr(kafka.codec, n, object())
        ]
        if moved:  # the test says so first; nothing is half-patched
            raise RuntimeError(f"{', '.join(moved)}: not kafka.codec's; bounded_reads.py needs updating")
        for module_name, names in PATCHED.items():
            for name in names:
                setattr(modules[module_name], name, _gated(getattr(modules[module_name], name), _BOUNDED[name]))
        _installed = True


def _gated(original, bounded):
    def decode(payload):
        budget = _budget.get()
        if budget is None:
            return original(payload)
        try:
            out = bounded(payload, budget[1])
        except _Exceeded:
            raise BatchTooLarge(budget[0], len(payload)) from None
        budget[1] -= len(out)
        return out

    decode.__name__ = decode.__qualname__ = f"bounded_{original.__name__}"
    decode.__wrapped__ = original
    return decode


def _read_up_to(stream, limit: int) -> bytearray:
    out = bytearray()
    while chunk := stream.read(CHUNK_BYTES):
        out += chunk
        if len(out) > limit:
            raise _Exceeded
    return out


def _gzip(payload, limit: int) -> bytearray:
    with gzip.GzipFile(fileobj=io.BytesIO(payload), mode="rb") as f:  # as kafka.codec.gzip_decode
        return _read_up_to(f, limit)


def _zstd(payload, limit: int) -> bytearray:
    import zstandard

    # As kafka.codec.zstd_decode, which reads the stream whole.
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(payload), read_across_frames=True) as f:
        return _read_up_to(f, limit)


def _lz4(payload, limit: int) -> bytearray:
    import lz4.frame

    # One frame, as lz4.frame.decompress reads (it ignores what follows the frame, too).
    d = lz4.frame.LZ4FrameDecompressor()
    out = bytearray(d.decompress(payload, max_length=CHUNK_BYTES))
    while not d.eof and not d.needs_input:
        if len(out) > limit:
            raise _Exceeded
        out += d.decompress(b"", max_length=CHUNK_BYTES)
    if len(out) > limit:
        raise _Exceeded
    if not d.eof:
        raise RuntimeError("lz4 frame incomplete")
    return out


def _snappy(payload, limit: int) -> bytes:
    import snappy

    from kafka.codec import _detect_xerial_stream

    # Raw snappy declares each block's length up front and the decoder makes exactly that many
    # bytes (or fails), so the lengths are added up before anything is decompressed.
    if not _detect_xerial_stream(payload):  # one raw block
        blocks = [payload]
    else:  # kafka.codec.snappy_decode's xerial framing: a 16-byte header, then (length, block)...
        blocks, pos = [], 16
        while pos < len(payload):
            (size,) = struct.unpack_from("!i", payload, pos)
            blocks.append(payload[pos + 4 : pos + 4 + size])
            pos += 4 + size
    total = 0
    for block in blocks:
        total += _snappy_length(block)
        if total > limit:
            raise _Exceeded
    return b"".join(snappy.decompress(block) for block in blocks)


def _snappy_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block begins with (a little-endian varint)."""
    n = 0
    for i, byte in enumerate(block[:5]):
        n |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return n
    raise ValueError("a snappy block without a valid length")


_BOUNDED = {"gzip_decode": _gzip, "snappy_decode": _snappy, "lz4_decode": _lz4, "zstd_decode": _zstd}
