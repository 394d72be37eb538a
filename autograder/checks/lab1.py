"""Lab 1, RPC vs streaming: the checks of its five graded parts."""

from __future__ import annotations

import json
from collections import Counter

from .. import protos
from . import CheckFailed, Context, check, expect, expect_equal
from .kafka_state import read_all

PROTO = "counter.proto"
EVENTS_TOPIC = "counter-events"
UPDATES = 300            # the notebook streams the first 300 flights of January 1st
RPC_TIMEOUT_S = 5


def messages():
    return protos.messages("lab1", PROTO)


def expected_updates() -> Counter:
    """Miles flown per carrier over the flights the notebook sends: the truth for lab1-q4."""
    from cluster.lab import load_flights

    totals = Counter()
    for f in load_flights(day=1)[:UPDATES]:
        totals[f["carrier"]] += f["distance"]
    return totals


def rpc(port: int, method: str, request):
    """Call the student's gRPC server from the grader, with the grader's own messages."""
    import grpc

    reply_type = {"Increase": "IncreaseReply", "Get": "GetReply"}[method]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(f"/counter.Counter/{method}",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=messages()[reply_type].FromString)
        try:
            return call(request, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as e:
            raise CheckFailed(f"calling Counter.{method} on your server (port {port}) failed: "
                              f"{e.code().name}: {e.details()}",
                              hint="Run the cells that define CounterServicer and start the server; "
                                   "an exception inside a servicer method shows up here as UNKNOWN.") from None


@check("lab1-q1")
def local_counter(ctx: Context) -> None:
    """increase(key, amt) adds amt to the key's count and returns the new count"""
    key = f"check-{ctx.rng.randrange(10**6)}"
    total = 0
    for _ in range(3):
        amt = ctx.rng.randrange(1, 1000)
        total += amt
        got = ctx.sub.value(f"increase({key!r}, {amt})")
        expect_equal(got, total, f"increase({key!r}, {amt}) after earlier calls on the same key",
                     hint="Add amt to the count kept for key (a missing key starts at 0) and return the new count.")
    expect_equal(ctx.sub.value(f"counts.get({key!r})"), total, f"counts[{key!r}] after the calls",
                 hint="Keep the counts in the dict called counts.")


@check("lab1-q2")
def protobuf_round_trip(ctx: Context) -> None:
    """encode_event and decode_event turn a CounterEvent into protobuf bytes and back"""
    Event = messages()["CounterEvent"]
    for _ in range(3):
        key = ctx.rng.choice(["UA", "DL", "B6", "EV", "AA"]) + "-" + str(ctx.rng.randrange(100))
        amount = ctx.rng.randrange(-10**6, 10**9)
        sent_ms = 1357000000000 + ctx.rng.randrange(10**8)
        data = ctx.sub.value(f"encode_event({key!r}, {amount}, {sent_ms})")
        expect(isinstance(data, bytes), f"encode_event({key!r}, {amount}, {sent_ms}) should return bytes",
               expected="bytes", found=type(data).__name__, hint="Return event.SerializeToString().")
        try:
            event = Event.FromString(data)
        except Exception:
            raise CheckFailed("encode_event's bytes are not a protobuf CounterEvent", found=data[:60],
                              hint="Build a counter_pb2.CounterEvent and call SerializeToString(); "
                                   "json.dumps gives JSON, not protobuf.") from None
        expect_equal((event.key, event.amount, event.sent_ms), (key, amount, sent_ms),
                     "the fields of the CounterEvent your encode_event wrote")
        ours = Event(key=key, amount=amount, sent_ms=sent_ms).SerializeToString()
        got = ctx.sub.value(f"decode_event({ours!r})")
        expect_equal(tuple(got) if isinstance(got, (list, tuple)) else got, (key, amount),
                     "decode_event(bytes of a CounterEvent) should return (key, amount)",
                     hint="Parse with counter_pb2.CounterEvent.FromString(data).")


@check("lab1-q3", pause_kernel=False)   # calls the server running in the kernel
def grpc_service(ctx: Context) -> None:
    """the Counter gRPC service answers Increase and Get correctly"""
    M = messages()
    port = ctx.sub.value("server_port")
    expect(isinstance(port, int) and port > 0, "server_port should be the port your server listens on",
           expected="a port number", found=port)
    key = f"rpc-check-{ctx.rng.randrange(10**6)}"
    total = rpc(port, "Get", M["GetRequest"](key=key)).total  # earlier runs may have counted already
    for _ in range(3):
        amt = ctx.rng.randrange(1, 500)
        total += amt
        reply = rpc(port, "Increase", M["IncreaseRequest"](key=key, amount=amt))
        expect_equal(reply.total, total, f"IncreaseReply.total after Increase({key!r}, {amt})",
                     hint="Increase must add to the stored count and reply with the new total, not the amount.")
    expect_equal(rpc(port, "Get", M["GetRequest"](key=key)).total, total, f"GetReply.total for {key!r}")
    # The notebook's own client must reach the same server.
    got = ctx.sub.value(f"rpc_increase({key!r}, 1)")
    expect_equal(got, total + 1, f"rpc_increase({key!r}, 1) through your client stub",
                 hint="rpc_increase should call stub.Increase and return reply.total.")


@check("lab1-q4", pause_kernel=False)
def stream_matches_rpc(ctx: Context) -> None:
    """the events on the topic add up to the same counts as the RPC server and stream_counts"""
    Event = messages()["CounterEvent"]
    truth = expected_updates()
    records = read_all(ctx, EVENTS_TOPIC)
    expect_equal(len(records), UPDATES, f"number of events on {ctx.topic(EVENTS_TOPIC)}",
                 hint="Send one event per update and call producer.flush() before consuming.")
    from_topic = Counter()
    for r in records:
        try:
            e = Event.FromString(r.value)
        except Exception:
            raise CheckFailed("an event on the topic is not a protobuf CounterEvent", found=r.value[:60],
                              hint="send_increase should send encode_event(...) bytes.") from None
        expect_equal(r.key, e.key.encode(), f"the key of the event at partition {r.partition} offset {r.offset}",
                     hint="Use the counter key, encoded as bytes, as the message key.")
        from_topic[e.key] += e.amount
    expect_equal(dict(from_topic), dict(truth), "miles per carrier summed from the topic")
    stream_counts = ctx.sub.value("dict(stream_counts)")
    expect_equal(stream_counts, dict(truth), "stream_counts (what your consumer computed)",
                 hint="Read from the earliest offset (auto_offset_reset='earliest') until no more messages arrive.")
    port = ctx.sub.value("server_port")
    M = messages()
    rpc_counts = {k: rpc(port, "Get", M["GetRequest"](key=k)).total for k in truth}
    expect_equal(rpc_counts, dict(truth), "the RPC server's counts for the carriers")


@check("lab1-q5")
def measurements(ctx: Context) -> None:
    """latencies are measured, and the JSON and protobuf sizes are exact"""
    sample = ctx.sub.value("sample")
    expect(isinstance(sample, dict) and set(sample) == {"key", "amount", "sent_ms"},
           "sample should be the dict given in the notebook", found=sample)
    expect_equal(ctx.sub.value("json_bytes"), len(json.dumps(sample).encode()),
                 "json_bytes: the size of json.dumps(sample) in bytes", hint="len(json.dumps(sample).encode())")
    proto = messages()["CounterEvent"](**sample).SerializeToString()
    expect_equal(ctx.sub.value("proto_bytes"), len(proto), "proto_bytes: the size of the protobuf encoding",
                 hint="len(encode_event(**sample))")
    for name in ("rpc_latency_ms", "send_latency_ms"):
        v = ctx.sub.value(name)
        expect(isinstance(v, (int, float)) and 0 < v < 1000, f"{name} should be a median latency in ms",
               expected="a number between 0 and 1000", found=v,
               hint="Time each call with time.perf_counter() and take statistics.median, in milliseconds.")
