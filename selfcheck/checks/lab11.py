"""Lab 11, schemas and evolution. Compatibility follows Avro's resolution rules (this module
ships in the student kit, so it does not decode: deciding by decoding is the exercise, and a
decoder here would answer lab11-q1 for anyone who imports it); tests/ checks the rules against
real decoding. Every schema and change is drawn from the seed, so no answer can be written down
in advance.

- lab11-q1 compatibility(old, new) on seeded schema changes of a seeded record type:
  "full", "backward" (new readers read old data), "forward" (old readers read new data), "none";
- lab11-q1-prediction the compatibility of two of section 2's changes, predicted before the demo
  (its form only);
- lab11-q2 a schema registry kept on a compacted topic: register refuses a change that is not
  backward compatible, ids survive a restart (they are on the topic: the grader adds one there
  itself, as another registry process would), values in the wire format (magic byte 0, the
  schema id as 4 bytes big-endian, the Avro body);
- lab11-q3-prediction whether a latest-only registry takes a removed field back with another type,
  and whether a consumer of that version reads the first version's data, predicted before the demo
  (its form only);
- lab11-q3 next_version(versions, change) under FULL_TRANSITIVE, on a seeded subject's history:
  the next schema with the change made so that every version reads it and it reads every version,
  or None when no such schema exists (a required field removed, an int widened, a removed field
  back with another type)."""

from __future__ import annotations

import copy
import io
import json

from . import (
    Context,
    RaisedInKernel,
    check,
    expect,
    expect_equal,
    predicted_booleans,
    prediction,
    prediction_feedback,
)
from .kafka_state import describe_topic, read_all, topic_configs

REGISTRY = "schemas"  # the student's registry topic: lab.topic("schemas")
ANSWERS = ("full", "backward", "forward", "none")


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


def as_bytes(value, what: str) -> bytes:
    expect(
        isinstance(value, (bytes, bytearray)),
        f"{what} should return bytes",
        expected="bytes",
        found=type(value).__name__,
        hint="Return the encoded value itself (buffer.getvalue(), SerializeToString()).",
    )
    return bytes(value)


# --- q1: compatibility ----------------------------------------------------------------------
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


@check("lab11-q1")
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


@check("lab11-q1-prediction")
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


# --- q2: a registry on a compacted topic ----------------------------------------------------
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


@check("lab11-q2")
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


# --- q3: a removed field comes back; the next version, decided ------------------------------
# The transitive demo: a latest-only (BACKWARD) registry takes `dest` back as an int, and a
# consumer of that version cannot read the flights version 1 wrote.
TRANSITIVE_TRUTH = {"registry takes version 4": True, "version 4 reads version 1's flights": False}


@check("lab11-q3-prediction")
def transitive_prediction(ctx: Context) -> str:
    """a prediction of what a latest-only registry does with a removed field back as another type was written before the demo"""
    predicted = predicted_booleans(
        ctx,
        "predicted_transitive",
        TRANSITIVE_TRUTH,
        "whether your registry takes version 4, and whether a consumer on version 4 reads version 1's flights",
    )
    return prediction_feedback(
        "predicted_transitive",
        predicted,
        TRANSITIVE_TRUTH,
        "Version 4 is compared with version 3 only, which has no dest: a default fills it, so the check passes; "
        "version 1's flights hold dest as text, which a reader of version 4 cannot read as an int.",
    )


PRIMITIVES = ("string", "int", "long", "double", "boolean")


def seeded_history(ctx: Context) -> tuple[list[dict], str, str]:
    """A subject's three versions, each fully compatible with every other: a seeded record (one
    field an int, one optional, ["null", "string"] with a default null, under a seeded name); then a
    field added with a default; then the optional field removed (its default fills it for older
    readers). Returns them, the added field's name and the removed one's."""
    v1 = seeded_record(ctx)
    v2 = changed(ctx, copy.deepcopy(v1), "add with default")
    (added,) = {f["name"] for f in v2["fields"]} - {f["name"] for f in v1["fields"]}
    v3 = changed(ctx, copy.deepcopy(v2), "remove with default")
    optional = f"{ctx.rng.choice(['note', 'memo', 'comment', 'info'])}_{ctx.rng.randrange(10, 99)}"
    for v in (v1, v2):
        next(f for f in v["fields"] if f["name"] == "remark")["name"] = optional
    return [v1, v2, v3], added, optional


WISHES = (
    "a new field",
    "a removed field back with another type",
    "a field without a default removed",
    "a field with a default removed",
    "an int widened",
)


def wish(ctx: Context, what: str, versions: list[dict], added: str, optional: str) -> tuple[dict, bool]:
    """The change `what` on this history, and whether FULL_TRANSITIVE takes some schema that makes
    it. The truths follow from Avro's rules (tests/ decodes them both ways on many seeds)."""
    rng, latest = ctx.rng, versions[-1]
    names = {f["name"] for v in versions for f in v["fields"]}
    fresh = next(
        n
        for n in (f"{rng.choice(['slot', 'leg', 'bay', 'wing', 'lane'])}_{rng.randrange(10, 99)}" for _ in iter(int, 1))
        if n not in names
    )
    wide = next(f["name"] for f in latest["fields"] if f["type"] == "int")
    required = [f["name"] for f in latest["fields"] if "default" not in f and f["name"] != wide]
    return {
        "a new field": ({"add": fresh, "type": rng.choice(PRIMITIVES)}, True),
        # it was ["null", "string"] until the latest version: no other type reads it or is read by it
        "a removed field back with another type": ({"add": optional, "type": rng.choice(PRIMITIVES[1:])}, False),
        "a field without a default removed": ({"remove": rng.choice(required)}, False),
        "a field with a default removed": ({"remove": added}, True),
        "an int widened": ({"widen": wide, "type": rng.choice(["long", "double"])}, False),
    }[what]


def plain_field(f) -> dict:
    """A field as resolution sees it (its doc and sort order aside)."""
    return {k: v for k, v in f.items() if k not in ("doc", "order")} if isinstance(f, dict) else f


def makes_the_change(new, latest: dict, change: dict) -> str | None:
    """What is wrong with `new` as the latest version with `change` made and nothing else (None:
    nothing). Only its shape: that FULL_TRANSITIVE then takes it follows from how the grader made
    the history (every version has the other fields as the latest has them)."""
    import fastavro

    if not isinstance(new, dict) or new.get("type") != "record" or not isinstance(new.get("fields"), list):
        return "it is not a record schema (a dict with type record and a list of fields)"
    try:
        fastavro.parse_schema(copy.deepcopy(new))
    except Exception as e:  # the student's schema: anything it raises says why it is no schema
        return f"fastavro does not take it as a schema: {str(e)[:160]}"
    if (new.get("name"), new.get("namespace")) != (latest["name"], latest.get("namespace")):
        return f"the record's name changed to {new.get('name')!r} (a reader matches records by name)"
    theirs = {f.get("name"): plain_field(f) for f in new["fields"] if isinstance(f, dict)}
    want = {f["name"]: plain_field(f) for f in latest["fields"]}
    if "remove" in change:
        want.pop(change["remove"])
    if "widen" in change:
        want[change["widen"]] = dict(want[change["widen"]], type=change["type"])
    if "add" in change:
        f = theirs.pop(change["add"], None)
        t = change["type"]
        if f is None:
            return f"it has no field {change['add']!r}"
        if f["type"] != t and not (isinstance(f["type"], list) and sorted(f["type"], key=str) == sorted(["null", t])):
            return f"its field {change['add']!r} is of type {f['type']!r}, not {t!r} (or a union of null and {t!r})"
        if "default" not in f:
            return f"its new field {change['add']!r} has no default: a reader of older data has nothing to fill it with"
        if set(f) - {"name", "type", "default"}:
            return f"its new field {change['add']!r} has more than a name, a type and a default: {sorted(set(f) - {'name', 'type', 'default'})}"
    if theirs != want:
        wrong = sorted((k for k in set(theirs) | set(want) if theirs.get(k) != want.get(k)), key=str)
        return f"its other fields are not the latest version's (with the change): {wrong} differ"
    return None


@check("lab11-q3")
def decides_next_version(ctx: Context) -> str:
    """next_version(versions, change) under FULL_TRANSITIVE: the change made so every version reads it and it reads every version, or None"""
    kinds = ctx.rng.sample(WISHES, len(WISHES))  # every kind, in a seeded order, each on a subject of its own
    for what in kinds:
        versions, added, optional = seeded_history(ctx)
        change, exists = wish(ctx, what, versions, added, optional)
        got = ctx.sub.value(f"next_version({versions!r}, {change!r})")
        about = (
            f"next_version(<versions 1-{len(versions)} of {versions[0]['name']}: the latest {shape(versions[-1])}, "
            f"{optional} (optional, a string) removed in version {len(versions)}>, {change!r}), {what}"
        )
        if not exists:
            expect(
                got is None,
                about,
                expected="None: no schema with this change reads every version's data and is read by every version",
                found="a schema" if isinstance(got, dict) else got,
                hint="FULL_TRANSITIVE compares the new version with every version, both ways.",
            )
            continue
        expect(
            got is not None,
            about,
            expected="a schema (such a version exists)",
            found=None,
            hint="Some changes can be made both ways with every version, if they are made with care.",
        )
        wrong = makes_the_change(got, versions[-1], change)
        expect(wrong is None, f"{about}: {wrong}", expected="the latest version with the change and nothing else")
    return f"{len(kinds)} changes to seeded subjects, 2 of them possible"
