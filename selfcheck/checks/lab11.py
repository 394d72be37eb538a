"""Lab 11, schemas and evolution. The grader holds its own copy of the contract (labs/lab11's
flight.avsc and flight_event.proto), decodes what the student's code encodes and encodes what
it must decode, on made-up flights drawn from the seed (so no answer can be written down in
advance). Compatibility follows Avro's resolution rules (this module ships in the student kit,
so it does not decode: that is the exercise); tests/ checks the rules against real decoding.

- lab11-q1 to_json / to_avro / from_avro / to_protobuf on seeded flights, and the day's sizes
  as Avro and protobuf (exact: both encodings are deterministic);
- lab11-q2 compatibility(old, new) on seeded schema changes of a seeded record type:
  "full", "backward" (new readers read old data), "forward" (old readers read new data), "none";
- lab11-q2-prediction the compatibility of two of section 2's changes, predicted before the demo
  (its form only);
- lab11-q3 a schema registry kept on a compacted topic: register refuses a change that is not
  backward compatible, ids survive a restart (they are on the topic: the grader adds one there
  itself, as another registry process would), values in the wire format (magic byte 0, the
  schema id as 4 bytes big-endian, the Avro body);
- lab11-q4 source_config and sink_config, run by a Connect worker of the grader's, restarted once;
- lab11-q4-prediction the records on the topic after the restart, predicted before the demo (its
  form only)."""

from __future__ import annotations

import copy
import io
import json
import re
import string
import time
from functools import cache

from cluster.safe_files import make_dirs, read_text, write_text
from cluster.waiting import wait_for

from . import (
    CheckFailed,
    Context,
    LabPolicy,
    RaisedInKernel,
    check,
    expect,
    expect_equal,
    prediction,
    prediction_feedback,
)
from .kafka_state import describe_topic, read_all, topic_configs

FLIGHTS = 12  # seeded flights per check
REGISTRY = "schemas"  # the student's registry topic: lab.topic("schemas")
ANSWERS = ("full", "backward", "forward", "none")
# A Kafka Connect worker (a JVM) started in lab11-q4, twice: about a core while it runs.
POLICY = LabPolicy(grading_cores=1.0)


@cache
def flight_schema() -> dict:
    from cluster.settings import ROOT

    return json.loads((ROOT / "labs" / "lab11" / "flight.avsc").read_text())  # grader-only: the course's own contract


def avro_bytes(schema: dict, record: dict) -> bytes:
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(copy.deepcopy(schema)), record)
    return out.getvalue()


def avro_record(data: bytes, writer: dict, reader: dict | None = None) -> dict:
    import fastavro

    return fastavro.schemaless_reader(
        io.BytesIO(data),
        fastavro.parse_schema(copy.deepcopy(writer)),  # type: ignore[return-value]
        None if reader is None else fastavro.parse_schema(copy.deepcopy(reader)),
    )


def proto_class():
    from selfcheck.protos import messages

    return messages("lab11", "flight_event.proto")["FlightEvent"]


def proto_bytes(flight: dict) -> bytes:
    return proto_class()(**{k: v for k, v in flight.items() if v is not None}).SerializeToString()


def made_up_flights(ctx: Context, n: int = FLIGHTS) -> list[dict]:
    """Flights no dataset holds: seeded carriers, planes (some unknown), delays (some early,
    some hours late), airports and times."""
    rng = ctx.rng
    letters = string.ascii_uppercase
    # Kinds go by seeded position, not by chance draws, so every batch of three or more holds an
    # unknown plane and every kind of delay whatever the seed (a 30 % draw left all twelve
    # planes known about once in seventy seeds, and a check for unknown planes passed blind).
    unknown = set(rng.sample(range(n), max(1, n // 3))) if n > 1 else set()
    delays = ([(-30, 0), (0, 60), (300, 1400)] * n)[:n]
    rng.shuffle(delays)
    flights = []
    for i in range(n):
        carrier = rng.choice(letters) + rng.choice(letters + string.digits)
        origin, dest = (rng.choice(letters) + rng.choice(letters) + rng.choice(letters) for _ in range(2))
        day, hour, minute = rng.randrange(1, 29), rng.randrange(24), rng.randrange(60)
        flights.append(
            {
                "id": f"2013-02-{day:02d} {carrier}{rng.randrange(1, 9999)} {origin}",
                "carrier": carrier,
                "origin": origin,
                "dest": dest,
                "tailnum": None if i in unknown else f"N{rng.randrange(100, 999)}{rng.choice(letters)}",
                "dep_delay": rng.randrange(*delays[i]),
                "dep_time": f"2013-02-{day:02d}T{hour:02d}:{minute:02d}:00Z",
            }
        )
    return flights


EXPECTED_BYTES = {
    "to_json": "the flight as JSON text",
    "to_avro": "one Avro record's values, no header",
    "to_protobuf": "a serialized FlightEvent",
}


def as_bytes(value, what: str) -> bytes:
    expect(
        isinstance(value, (bytes, bytearray)),
        f"{what} should return bytes",
        expected="bytes",
        found=type(value).__name__,
        hint="Return the encoded value itself (buffer.getvalue(), SerializeToString()).",
    )
    return bytes(value)


# --- q1: one event, three encodings --------------------------------------------------------
@check("lab11-q1")
def three_encodings(ctx: Context) -> None:
    """to_json, to_avro, from_avro and to_protobuf keep every field of made-up flights; sizes_of sums them"""
    schema, flights = flight_schema(), made_up_flights(ctx)
    for name, decode in (
        ("to_json", json.loads),
        ("to_avro", lambda b: avro_record(b, schema)),
        ("to_protobuf", proto_dict),
    ):
        encoded = ctx.sub.value(f"[{name}(f) for f in {flights!r}]")
        expect(
            isinstance(encoded, list) and len(encoded) == len(flights),
            f"{name}(flight) for {len(flights)} flights",
            expected=f"{len(flights)} values",
            found=str(encoded)[:120],
        )
        for f, value in zip(flights, encoded):
            data = as_bytes(value, f"{name}(flight)")
            try:
                back = decode(data)
            except Exception as e:  # anything undecodable is the student's encoding
                raise CheckFailed(
                    f"the grader could not decode {name}({f['id']!r}) with the course's contract ({type(e).__name__})",
                    expected=EXPECTED_BYTES[name],
                    found=data[:40],
                    hint={
                        "to_json": "Encode the dict with json.dumps(...).encode().",
                        "to_avro": "Write one record without a container header: "
                        "fastavro.schemaless_writer with the parsed flight.avsc.",
                        "to_protobuf": "Fill a FlightEvent from flight_event.proto and SerializeToString().",
                    }[name],
                ) from None
            expect_equal(
                back,
                f,
                f"{name}({f['id']!r}) decoded by the grader",
                hint="Every field must survive, None included (tailnum is optional in both schemas).",
            )
    bodies = [avro_bytes(schema, f) for f in flights]
    got = ctx.sub.value(f"[from_avro(b) for b in {bodies!r}]")
    # The bodies hold the grader's flights, the answer: the first wrong one is named by its place,
    # with the fields that differ and the notebook's values for them.
    listed = isinstance(got, list)
    first = next((i for i, f in enumerate(flights) if not listed or i >= len(got) or got[i] != f), None)
    if first is None:  # every body's record right, and more besides
        said, found = f"{len(got) - len(flights)} records more than it was given bodies", got[len(flights) :][:2]
    else:
        mine = got[first] if listed and first < len(got) else None
        fields = sorted(k for k in flights[first] if not isinstance(mine, dict) or mine.get(k) != flights[first][k])
        said = f"the record of body {first} has {fields} wrong or missing"
        found = {k: mine.get(k) for k in fields} if isinstance(mine, dict) else mine if listed else got
    expect(
        got == flights,
        f"from_avro(...) of the grader's {len(flights)} Avro bodies: {said}",
        expected="each body's record, every field as it was written (None included)",
        found=found,
        hint="Read one record with fastavro.schemaless_reader and the parsed flight.avsc.",
    )
    # sizes of flights of the grader's own (a copy of the day's sizes tells nothing)
    truth = {
        "avro": sum(len(avro_bytes(schema, f)) for f in flights),
        "protobuf": sum(len(proto_bytes(f)) for f in flights),
    }
    sizes = ctx.sub.value(f"sizes_of({flights!r})")
    expect(
        isinstance(sizes, dict) and {"json", "avro", "protobuf"} <= set(sizes),
        "sizes_of(flights) should return a dict with the keys json, avro and protobuf",
        found=str(sizes)[:120],
    )
    for k in ("avro", "protobuf"):
        number = isinstance(sizes[k], int) and not isinstance(sizes[k], bool)
        expect(  # the flights are not in the message, so neither is their size: which way it is off
            sizes[k] == truth[k],
            f"sizes_of(<{len(flights)} flights of the grader's>)[{k!r}]: their bytes as {k}"
            + (f" ({'more' if sizes[k] > truth[k] else 'fewer'} than their encodings take)" if number else ""),
            expected=f"the sum of len(...) of each flight's {k} encoding",
            found=sizes[k],
            hint="Sum len(...) of every given flight's encoding.",
        )
    own_json = ctx.sub.value(f"sum(len(to_json(f)) for f in {flights!r})")
    expect_equal(sizes["json"], own_json, "sizes_of(...)['json']: the flights' bytes through your to_json")


def proto_dict(data: bytes) -> dict:
    msg = proto_class().FromString(data)
    return {
        "id": msg.id,
        "carrier": msg.carrier,
        "origin": msg.origin,
        "dest": msg.dest,
        "tailnum": msg.tailnum if msg.HasField("tailnum") else None,
        "dep_delay": msg.dep_delay,
        "dep_time": msg.dep_time,
    }


# --- q2: compatibility ----------------------------------------------------------------------
# What Avro's schema resolution allows a reader of data written with another type (the spec's
# promotions). The truths below follow from the spec; tests/ checks every one against fastavro,
# decoding both ways, on many seeds.
PROMOTES = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
# (new reads old, old reads new) for the changes that keep every type
BY_KIND = {
    "add with default": (True, True),
    "add without default": (False, True),
    "remove with default": (True, True),
    "remove without default": (True, False),
    "rename": (False, False),
    "rename with alias": (True, False),
}
WORD = {(True, True): "full", (True, False): "backward", (False, True): "forward", (False, False): "none"}


def reads(written: str, reader: str) -> bool:
    return written == reader or reader in PROMOTES.get(written, ())


def truth(kind: str, old: dict, new: dict) -> str:
    """The compatibility of a change of this kind from `old` to `new`, by Avro's rules."""
    if kind in BY_KIND:
        return WORD[BY_KIND[kind]]
    ((was, now),) = [(f["type"], g["type"]) for f, g in zip(old["fields"], new["fields"]) if f["type"] != g["type"]]
    return WORD[(reads(was, now), reads(now, was))]


def seeded_record(ctx: Context) -> dict:
    """A record type of the seed's: names no text fixed, five fields of several types."""
    rng = ctx.rng
    words = ["gate", "stand", "crew", "fuel", "seats", "cargo", "meal", "pilot", "runway", "tow", "deice", "bags"]
    names = rng.sample(words, 5)
    types = [rng.choice(["string", "int", "long", "double", "boolean"]) for _ in names]
    types[0] = "int"  # one int, for the promotion
    fields: list[dict] = [{"name": n, "type": t} for n, t in zip(names, types)]
    fields.append({"name": "remark", "type": ["null", "string"], "default": None})
    return {
        "type": "record",
        "name": rng.choice(["Turnaround", "Stopover", "Boarding"]),
        "namespace": "ops",
        "fields": fields,
    }


def changed(ctx: Context, old: dict, kind: str) -> dict:
    """`old` with one change of the kind; new names from the seed."""
    rng, new = ctx.rng, copy.deepcopy(old)
    fields = new["fields"]
    taken = {f["name"] for f in fields}
    fresh = next(
        name
        for name in (
            f"{rng.choice(['extra', 'note', 'leg', 'zone', 'slot'])}_{rng.randrange(10, 99)}" for _ in iter(int, 1)
        )
        if name not in taken
    )
    plain = [f for f in fields if f["name"] != "remark"]
    if kind == "add with default":
        fields.insert(rng.randrange(len(fields) + 1), {"name": fresh, "type": "string", "default": ""})
    elif kind == "add without default":
        fields.insert(rng.randrange(len(fields) + 1), {"name": fresh, "type": "long"})
    elif kind == "remove with default":
        fields.remove(next(f for f in fields if f["name"] == "remark"))
    elif kind == "remove without default":
        fields.remove(rng.choice(plain))
    elif kind == "promote int to long":
        next(f for f in fields if f["type"] == "int")["type"] = "long"
    elif kind == "narrow long to int":
        fields.append({"name": fresh, "type": "long", "default": 0})
        old["fields"] = copy.deepcopy(fields)  # the old schema has the long field too
        fields[-1]["type"] = "int"
    elif kind == "rename":
        rng.choice(plain)["name"] = fresh
    elif kind == "rename with alias":
        f = rng.choice(plain)
        f["aliases"], f["name"] = [f["name"]], fresh
    elif kind == "change a type":
        f = next((f for f in plain if f["type"] == "string"), None) or plain[-1]
        f["type"] = "int" if f["type"] != "int" else "string"
    return new


KINDS = (
    "add with default",
    "add without default",
    "remove with default",
    "remove without default",
    "promote int to long",
    "narrow long to int",
    "rename",
    "rename with alias",
    "change a type",
)


def shape(schema: dict) -> dict:
    """A schema's fields as the messages show them: {"gate": "string = ''", "crew": "int", ...}."""
    return {
        f["name"] + (f" (alias of {', '.join(f['aliases'])})" if f.get("aliases") else ""): (
            f["type"] if isinstance(f["type"], str) else "|".join(f["type"])
        )
        + (f" = {f['default']!r}" if "default" in f else "")
        for f in schema["fields"]
    }


@check("lab11-q2")
def judges_compatibility(ctx: Context) -> str:
    """compatibility(old, new) says full, backward, forward or none, as decoding both ways finds"""
    kinds = ctx.rng.sample(KINDS, len(KINDS))  # every kind, in a seeded order
    for kind in kinds:
        old = seeded_record(ctx)
        new = changed(ctx, old, kind)
        want = truth(kind, old, new)
        got = ctx.sub.value(f"compatibility({old!r}, {new!r})")
        if isinstance(got, str):
            got = got.strip().lower()
        expect(got in ANSWERS, f"compatibility(old, new) should be one of {', '.join(ANSWERS)}", found=got)
        expect_equal(
            got,
            want,
            f"compatibility of a change ({kind}) to {old['name']}: old fields {shape(old)}, new {shape(new)}",
            hint="Backward: the NEW schema reads data written with the OLD one. Forward: the OLD schema "
            "reads NEW data. Write a record with one schema and read it with the other, both ways; "
            "a field the reader has and the data lacks needs a default.",
        )
    return f"{len(kinds)} changes to seeded record types, one of each kind"


# The two changes the notebook asks to predict, as Avro's rules (and the demo's decoding) judge them.
CHANGES_TRUTH = {"gate without a default": "forward", "int to long": "backward"}


@check("lab11-q2-prediction")
def compatibility_prediction(ctx: Context) -> str:
    """a prediction of the compatibility of two of section 2's changes was written before the demo"""
    predicted = prediction(
        ctx,
        "predicted_compatibility",
        lambda v: (
            isinstance(v, dict)
            and set(v) == set(CHANGES_TRUTH)
            and all(isinstance(x, str) and x.strip().lower() in ANSWERS for x in v.values())
        ),
        '{"gate without a default": "full", "backward", "forward" or "none", "int to long": ...}',
        "your compatibility for two of section 2's changes to the flight schema",
    )
    return prediction_feedback(
        "predicted_compatibility",
        {k: predicted[k].strip().lower() for k in CHANGES_TRUTH},
        CHANGES_TRUTH,
        "A new field without a default cannot be filled in when a new reader reads old data (old readers skip "
        "it), and an old reader cannot fit a long into an int (a new one reads an old int as a long).",
    )


# --- q3: a registry on a compacted topic ----------------------------------------------------
def raised(ctx: Context, expr: str) -> str | None:
    """The error the student's code raised for `expr` ("ValueError"), or None if it returned.
    Read here, from the kernel's own reply: no helper in the kernel says whether it raised."""
    try:
        ctx.sub.value(expr)
    except RaisedInKernel as e:
        return e.ename
    return None


def attempt(ctx: Context, expr: str) -> dict:
    """{"value": the value of expr}, or {"error": "KeyError: 12"} if the student's code raised."""
    try:
        return {"value": ctx.sub.value(expr)}
    except RaisedInKernel as e:
        return {"error": f"{e.ename}: {e.evalue}"[:200]}


def registered(ctx: Context) -> dict[int, dict]:
    """id -> schema, as the registry topic holds them (the newest record per key)."""
    latest = {}
    for r in read_all(ctx, REGISTRY):
        latest[r.key] = r.value
    found = {}
    for value in latest.values():
        try:
            entry = json.loads(value)
            found[int(entry["id"])] = (
                entry["schema"] if isinstance(entry["schema"], dict) else json.loads(entry["schema"])
            )
        except Exception:  # records of another shape are the student's own business
            continue
    return found


@check("lab11-q3")
def registry_on_a_topic(ctx: Context) -> None:
    """register keeps schemas on a compacted topic, refuses what old data breaks; the wire format"""
    from kafka import KafkaProducer

    describe_topic(ctx, REGISTRY, hint='Create lab.topic("schemas") in the registry\'s cell.')
    policy = topic_configs(ctx, REGISTRY).get("cleanup.policy")
    expect_equal(
        policy,
        "compact",
        f"cleanup.policy of {ctx.topic(REGISTRY)}",
        hint="A registry keeps every version forever: a compacted topic (cleanup.policy=compact) "
        "never drops the newest record of a key.",
    )
    subject = f"grader-{ctx.rng.randrange(10**6)}"
    # Versions other registry processes stored before, with ids nobody could know in advance: so
    # no id (nor a wire header printed by an earlier run) can be written down.
    with KafkaProducer(**ctx.kafka) as producer:
        for _ in range(ctx.rng.randrange(1, 5)):  # however a registry numbers them, ids vary
            earlier = ctx.rng.randrange(100, 1000)
            producer.send(
                ctx.topic(REGISTRY),
                key=f"earlier-{earlier}/1".encode(),
                value=json.dumps(
                    {
                        "subject": f"earlier-{earlier}",
                        "version": 1,
                        "id": earlier,
                        "schema": changed(ctx, seeded_record(ctx), "add with default"),
                    }
                ).encode(),
            ).get(timeout=30)
    v1 = seeded_record(ctx)
    v2 = changed(ctx, copy.deepcopy(v1), "add with default")
    bad = changed(ctx, copy.deepcopy(v2), "add without default")
    first = ctx.sub.value(f"register({subject!r}, {v1!r})")
    again = ctx.sub.value(f"register({subject!r}, {v1!r})")
    expect(isinstance(first, int), f"register({subject!r}, schema) should return the schema's id (an int)", found=first)
    expect_equal(
        again,
        first,
        "register() of the same schema a second time",
        hint="A schema already registered under the subject keeps its id.",
    )
    second = ctx.sub.value(f"register({subject!r}, {v2!r})")
    expect(
        isinstance(second, int) and second != first,
        "register() of a new version (a field added with a default) gives a new id",
        found=second,
    )
    error = raised(ctx, f"register({subject!r}, {bad!r})")
    expect(
        error is not None,
        "register() of a version that cannot read the old data (a field added without a default) should raise",
        expected="ValueError",
        found="accepted",
        hint="Before a new version is stored, check that it can read data written with the subject's latest "
        "version (backward), and raise ValueError if not.",
    )
    on_topic = registered(ctx)
    expect(
        first in on_topic and second in on_topic,
        f"the ids {first} and {second} on {ctx.topic(REGISTRY)}",
        expected="records whose value is JSON with the keys id and schema",
        found=sorted(on_topic)[:10],
        hint="Each version is one record: key subject/version, value JSON {subject, version, id, schema}.",
    )
    expect(
        bad not in on_topic.values(),
        "the refused version must not be on the topic",
        found="it is there",
        hint="Check compatibility before you write the version to the topic.",
    )
    # Another registry process registers a schema: ids live on the topic, not in one process.
    other = max(on_topic) + 1 + ctx.rng.randrange(1000, 9000)
    theirs = changed(ctx, seeded_record(ctx), "add with default")
    with KafkaProducer(**ctx.kafka) as producer:
        producer.send(
            ctx.topic(REGISTRY),
            key=f"other-{other}/1".encode(),
            value=json.dumps({"subject": f"other-{other}", "version": 1, "id": other, "schema": theirs}).encode(),
        ).get(timeout=30)
    got = attempt(ctx, f"schema_by_id({other})")
    expect(  # the schema is the grader's, on the topic: the notebook's answer is shown, not it
        got == {"value": theirs},
        f"schema_by_id({other}), a schema another registry process put on the topic",
        expected="the schema stored with that id on the topic",
        found=got.get("value", got) if isinstance(got, dict) else got,
        hint="Look ids up on the topic (read it to its end offsets), not in a dict of this process.",
    )
    # the wire format, both ways
    record = {f["name"]: v for f, v in zip(v2["fields"], sample_values(ctx, v2))}
    data = as_bytes(ctx.sub.value(f"encode({subject!r}, {record!r})"), f"encode({subject!r}, record)")
    expect(len(data) > 5 and data[0] == 0, "encode(): the first byte is the magic byte 0", found=data[:8])
    sid = int.from_bytes(data[1:5], "big")
    expect_equal(sid, second, "encode(): bytes 1-4 are the id of the subject's latest schema, big-endian")
    expect_equal(avro_record(data[5:], v2), record, "encode(): the rest is the Avro body, read with that schema")
    old_part = {k: record[k] for k in (f["name"] for f in v1["fields"])}
    wire = b"\x00" + first.to_bytes(4, "big") + avro_bytes(v1, old_part)
    back = ctx.sub.value(f"decode({wire!r})")
    fields = sorted(k for k in old_part if not isinstance(back, dict) or back.get(k) != old_part[k])
    expect(  # the record is the grader's: the fields that differ, with the notebook's values
        back == old_part,
        f"decode() of a value written with schema {first} (the wire format)"
        + (f": fields {fields} wrong or missing" if fields else ": fields the record does not have"),
        expected="the record the body holds, read with the schema its id names",
        found={k: back.get(k) for k in fields} if isinstance(back, dict) and fields else back,
        hint="Read the id from bytes 1-4, fetch that schema, read the body with it.",
    )


def sample_values(ctx: Context, schema: dict) -> list:
    rng, out = ctx.rng, []
    for f in schema["fields"]:
        t = f["type"]
        out.append(
            {
                "string": f"s{rng.randrange(1000)}",
                "int": rng.randrange(-1000, 1000),
                "long": rng.randrange(-(10**12), 10**12),
                "double": rng.randrange(1000) / 8,
                "boolean": rng.random() < 0.5,
            }.get(t)
            if isinstance(t, str)
            else None
        )
    return out


# --- q4: Kafka Connect ----------------------------------------------------------------------
SOURCE_CLASS = "org.apache.kafka.connect.file.FileStreamSourceConnector"
SINK_CLASS = "org.apache.kafka.connect.file.FileStreamSinkConnector"
# Connect also takes a connector's simple class name, or that name without "Connector"
ALIASES = {
    cls: {cls, cls.rsplit(".", 1)[1], cls.rsplit(".", 1)[1].removesuffix("Connector")}
    for cls in (SOURCE_CLASS, SINK_CLASS)
}
# What a FileStream connector's settings may hold: the grader runs the worker itself, so a
# connector may only read and write the files the grader names, with the stock classes.
ALLOWED = {
    "name",
    "connector.class",
    "tasks.max",
    "file",
    "topic",
    "topics",
    "batch.size",
    "key.converter",
    "value.converter",
    "consumer.override.group.id",
    "consumer.override.auto.offset.reset",
}
CONVERTERS = {"org.apache.kafka.connect.storage.StringConverter"}
# What the other allowed settings' values may be (the worker reads them as Java properties: a
# value is a value, never a way to a setting of its own).
VALUES = {
    "name": r"[\w.-]{1,100}",
    "tasks.max": r"[1-9]\d?",
    "batch.size": r"[1-9]\d{0,6}",
    "consumer.override.auto.offset.reset": r"earliest|latest|none",
    "consumer.override.group.id": r"[\w.-]{1,249}",
}
FIRST_LINES, MORE_LINES, SINK_RECORDS = 30, 12, 20
CONNECT_WAIT_S = 60


def connector_config(ctx: Context, expr: str, cls: str, file: str, topic_key: str, topic: str) -> dict:
    config = ctx.sub.value(expr)
    expect(isinstance(config, dict), f"{expr} should return a dict of connector settings", found=type(config).__name__)
    config = {str(k): str(v) for k, v in config.items()}
    expect(
        config.get("connector.class") in ALIASES[cls],
        f"connector.class of {expr}",
        expected=cls,
        found=config.get("connector.class"),
        hint="The FileStream connectors ship with Kafka: use their class names.",
    )
    expect_equal(config.get("file"), file, f"the file of {expr}", hint="Use the path you were given.")
    expect_equal(config.get(topic_key), topic, f"{topic_key} of {expr}", hint="Use the topic you were given.")
    extra = sorted(set(config) - ALLOWED)
    expect(
        not extra, f"{expr} has settings a FileStream connector does not need", expected=sorted(ALLOWED), found=extra
    )
    for key in ("key.converter", "value.converter"):
        expect(
            config.get(key, next(iter(CONVERTERS))) in CONVERTERS,
            f"{key} of {expr}",
            expected="org.apache.kafka.connect.storage.StringConverter",
            found=config.get(key),
        )
    for key, pattern in VALUES.items():
        expect(
            key not in config or re.fullmatch(pattern, config[key]) is not None,
            f"{key} of {expr}",
            expected=f"a value like {pattern}",
            found=config.get(key),
        )
    return config


def lines_of(ctx: Context, topic: str) -> list[str]:
    return [r.value.decode(errors="replace") for r in sorted(read_all(ctx, topic), key=lambda r: r.offset)]


def worker_did(what: str, ready, worker, hint: str) -> None:
    """Wait until ready() (the Connect worker did `what`); the student's problem if it never does."""
    if not wait_for(ready, timeout_s=CONNECT_WAIT_S, every_s=0.5):
        raise CheckFailed(f"{what} within {CONNECT_WAIT_S} s", found=worker.log_tail(2), hint=hint)


def file_lines(folder, name: str) -> list[str]:
    """The lines of a file the worker wrote, read without following links, at most 1 MB."""
    try:
        text = read_text(folder, name, limit=2**20)
    except OSError as e:
        raise CheckFailed(f"the sink's file could not be read: {e}") from None
    return (text or "").splitlines()


# The kernel stays frozen for the whole check (the default): from the first setting it returns
# to the last line the grader reads, nothing of the student's runs but the worker, and the
# worker runs only the stock FileStream classes with allowed settings. It runs in the grading's
# sandbox, in a folder of the grader's (ctx.private_dir) that only the worker's own sandbox can
# write, and its REST API answers only the grader (private_rest).
@check("lab11-q4")
def connect_moves_files(ctx: Context) -> str:
    """source_config and sink_config: a file into a topic (resumed after a restart, no line twice), a topic into a file"""
    from kafka import KafkaProducer

    from cluster.accounts import Account
    from cluster.errors import ClusterError
    from cluster.kafka_connect import ConnectWorker

    from .kafka_state import graders_topic, short_name

    # In a self-check there is no sandbox and no private folder: the student's own folder.
    base = ctx.private_dir or ctx.workdir
    folder = base / f"grader-connect-{ctx.rng.randrange(10**6)}"
    csv, out = folder / "flights.csv", folder / "out.txt"
    flights = made_up_flights(ctx, FIRST_LINES + MORE_LINES)
    lines = [",".join(str(f[k]) for k in ("id", "carrier", "origin", "dest", "dep_delay")) for f in flights]
    into = graders_topic(ctx, "connect-in", 1, protect=False)  # the source connector writes it
    outof = graders_topic(ctx, "connect-out", 1)
    source = connector_config(
        ctx, f"source_config('grader-source', {str(csv)!r}, {into!r})", SOURCE_CLASS, str(csv), "topic", into
    )
    sink = connector_config(
        ctx, f"sink_config('grader-sink', {outof!r}, {str(out)!r})", SINK_CLASS, str(out), "topics", outof
    )
    # Made only now, after the last value read from the kernel: the student's code had the path, never the folder.
    make_dirs(base, folder.name)
    write_text(folder, csv.name, "\n".join(lines[:FIRST_LINES]) + "\n", mode=0o644)
    sent = [f"{f['id']} left {f['dep_time']}" for f in made_up_flights(ctx, SINK_RECORDS)]
    with KafkaProducer(**ctx.kafka) as producer:
        for v in sent:
            producer.send(outof, v.encode())
        producer.flush()
    env = ctx.env or {}
    login = Account(env["KAFKA_USERNAME"], env["KAFKA_PASSWORD"]) if env.get("KAFKA_USERNAME") else None
    launch = None
    if ctx.sandbox is not None:  # grading: the worker in the sandbox, as the grading's Kafka user
        sandbox = ctx.sandbox.with_writable(folder)
        launch = lambda argv, **kw: sandbox.popen(argv, dict(env), **kw)
    hint_sink = (
        "A sink connector's consumer group is connect-<name> unless you set consumer.override.group.id: "
        "the brokers let you use only groups in your namespace (lab.group(...))."
    )

    def worker():
        return ConnectWorker(
            folder / "worker", [source, sink], login=login, launch=launch, private_rest=ctx.sandbox is not None
        )

    try:
        with worker() as running:
            worker_did(
                f"the first {FIRST_LINES} lines of the file on the topic",
                lambda: len(lines_of(ctx, short_name(into))) >= FIRST_LINES,
                running,
                "",
            )
            worker_did(
                f"{SINK_RECORDS} records of the topic in the sink's file",
                lambda: len(file_lines(folder, out.name)) >= SINK_RECORDS,
                running,
                hint_sink,
            )
        # the file grows while the worker is down
        write_text(folder, csv.name, "\n".join(lines[FIRST_LINES:]) + "\n", mode=0o644, append=True)
        with worker() as running:
            worker_did(
                f"all {len(lines)} lines on the topic after the restart",
                lambda: len(lines_of(ctx, short_name(into))) >= len(lines),
                running,
                "",
            )
            time.sleep(2)  # a source that started the file over would add lines now
    except ClusterError as e:
        raise CheckFailed(
            f"the Connect worker could not run your connectors: {str(e)[:600]}",
            hint=hint_sink if "uthoriz" in str(e) else "Read the message: a setting or a topic is wrong.",
        ) from None
    # The lines and records are the grader's: how many are right, and what the connectors wrote.
    on_topic = lines_of(ctx, short_name(into))
    expect(
        on_topic == lines,
        f"the topic after a restart with more lines in the file: {len(on_topic)} records, "
        f"{sum(a == b for a, b in zip(on_topic, lines))} of the file's {len(lines)} lines in place",
        expected="each line of the file once, in order",
        found=f"{len(on_topic)} records, {len(set(on_topic))} of them distinct",
        hint="Each line once, in order: the worker keeps the source's position in its offsets file.",
    )
    written = file_lines(folder, out.name)
    expect(
        written == sent,
        f"the sink's file: {len(written)} lines, {sum(a == b for a, b in zip(written, sent))} of the topic's "
        f"{len(sent)} records in place",
        expected="each record of the topic once, a line each, in order",
        found=f"{len(written)} lines, {len(set(written))} of them distinct",
    )
    return f"{len(lines)} lines, each once after a restart; {len(sent)} records into the sink's file, in order"


@check("lab11-q4-prediction")
def restart_prediction(ctx: Context) -> str:
    """a prediction of the records on the topic after the Connect worker's restart was written before the demo"""
    predicted = prediction(
        ctx,
        "predicted_records",
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer() and v >= 0,
        "a whole number, e.g. 100",
        "how many records csv_topic holds after 10 lines are appended and the worker restarts with its folder",
    )
    from cluster.lab import departures

    return prediction_feedback(
        "predicted_records",
        int(predicted),
        len(departures(day=1)) + 10,  # what the notebook's restart demo shows, on any machine
        "The worker keeps the source's position (a byte offset) in its offsets file and goes on from there: "
        "only the appended lines are sent.",
    )
