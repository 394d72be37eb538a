"""The autograder's own corpus: realistic wrong and broken submissions, each with the
score it must get. Each scenario is the lab's solution with a few edits, so the corpus
follows the solution when it changes. `python -m autograder selftest --write-corpus DIR`
writes them out as notebooks, named for what they do.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import nbformat
from nbformat.v4 import new_code_cell


@dataclass(frozen=True)
class Edit:
    """Change one cell, found by its nbgrader id or by a snippet of its source.
    kind: "sub" (replace old by new in the cell), "before"/"after" (insert a new cell)."""

    cell: str
    kind: str
    new: str
    old: str = ""


@dataclass(frozen=True)
class Scenario:
    name: str
    lab: str
    story: str                       # the mistake, as a student would make it
    edits: tuple[Edit, ...]
    fails: frozenset[str] = field(default_factory=frozenset)   # labels that must score 0
    note: str = ""                   # a phrase the grader's notes must contain

    def build(self, solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
        nb = copy.deepcopy(solution)
        for e in self.edits:
            index = find_cell(nb, e.cell)
            cell = nb.cells[index]
            if e.kind == "sub":
                if e.old not in cell.source:
                    raise ValueError(f"{self.name}: {e.old!r} is not in cell {e.cell!r}")
                cell.source = cell.source.replace(e.old, e.new)
            else:
                nb.cells.insert(index + (e.kind == "after"), new_code_cell(e.new))
        for i, cell in enumerate(nb.cells):
            cell.id = f"cell-{i:02d}"
        return nb


def find_cell(nb, key: str) -> int:
    for i, cell in enumerate(nb.cells):
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == key:
            return i
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and key in cell.source:
            return i
    raise KeyError(f"no cell with id or text {key!r}")


def fails(*labels: str) -> frozenset[str]:
    return frozenset(labels)


SCENARIOS = (
    # --- lab 1: realistic mistakes -----------------------------------------------------------
    Scenario("counter-overwrites", "lab1", "increase stores the amount instead of adding it",
             (Edit("lab1-increase", "sub", "counts[key] = amt", "counts[key] = counts.get(key, 0) + amt"),),
             fails("lab1-q1")),
    Scenario("rpc-returns-amount", "lab1", "the server replies with the request's amount, not the new total",
             (Edit("lab1-servicer", "sub", "IncreaseReply(total=request.amount)",
                   "IncreaseReply(total=self.totals[request.key])"),),
             fails("lab1-q3")),
    Scenario("json-instead-of-protobuf", "lab1", "events are written as JSON, so the contract is broken",
             (Edit("lab1-protobuf", "sub",
                   'import json\n    return json.dumps({"key": key, "amount": amount, "sent_ms": sent_ms}).encode()',
                   "return counter_pb2.CounterEvent(key=key, amount=amount, sent_ms=sent_ms).SerializeToString()"),
              Edit("lab1-protobuf", "sub", 'import json\n    event = json.loads(data)\n    return event["key"], event["amount"]',
                   "event = counter_pb2.CounterEvent.FromString(data)\n    return event.key, event.amount")),
             fails("lab1-q2", "lab1-q4", "lab1-q5")),
    Scenario("consumer-reads-latest", "lab1", "the consumer starts at the end of the topic and sees nothing",
             (Edit("lab1-consume", "sub", 'auto_offset_reset="latest"', 'auto_offset_reset="earliest"'),),
             fails("lab1-q4")),
    # --- lab 2: realistic mistakes -----------------------------------------------------------
    Scenario("one-partition-topic", "lab2", "the topic is created with one partition",
             (Edit("lab2-create-topic", "sub", "num_partitions=1", "num_partitions=4"),),
             fails("lab2-q1")),
    Scenario("no-message-key", "lab2", "flights are sent without a key",
             (Edit("lab2-produce", "sub", "key=None", 'key=f["carrier"].encode()'),),
             fails("lab2-q2")),
    Scenario("metadata-of-last-send", "lab2", "first_sent is taken from the last future",
             (Edit("lab2-first-sent", "sub", "futures[-1]", "futures[0]"),),
             fails("lab2-q3")),
    Scenario("cancelled-flights-count-as-zero", "lab2", "cancelled flights enter the mean with a delay of 0",
             (Edit("lab2-consume", "sub", "if True:", 'if f.HasField("dep_delay"):'),),
             fails("lab2-q4")),
    Scenario("consumer-never-commits", "lab2", "the consumer turns auto-commit off and never commits",
             (Edit("lab2-consume", "sub", 'auto_offset_reset="earliest", enable_auto_commit=False)',
                   'auto_offset_reset="earliest")'),
              Edit("lab2-consume", "sub", "pass  # forgot to commit", "consumer.commit()")),
             fails("lab2-q4")),
    Scenario("tampers-with-checks", "lab1", "a wrong counter, plus a cell that disables the checks in its "
             "own kernel and prints a fake pass",
             (Edit("lab1-increase", "sub", "counts[key] = amt", "counts[key] = counts.get(key, 0) + amt"),
              Edit("lab1-increase", "after",
                   "import autograder.checks as c\n"
                   "c.expect = c.expect_equal = lambda *a, **k: None\n"
                   "c.grade = lambda label, *a: print(label, 'passed')\n"
                   "print('lab1-q1 passed (1.0 s)')")),
             fails("lab1-q1")),
    # --- lab 3: realistic mistakes -----------------------------------------------------------
    Scenario("python-hash", "lab3", "the partition is predicted with Python's hash() instead of murmur2",
             (Edit("lab3-predict", "sub", "return hash(key) % num_partitions",
                   "return (murmur2(key) & 0x7fffffff) % num_partitions"),),
             fails("lab3-q1")),
    Scenario("hot-key-shares-partitions", "lab3", "UA gets partition 0, but other carriers hash over all four",
             (Edit("lab3-partitioner", "sub",
                   "return partitions[(murmur2(serialized_key) & 0x7fffffff) % len(partitions)]",
                   "return partitions[1 + (murmur2(serialized_key) & 0x7fffffff) % (len(partitions) - 1)]"),),
             fails("lab3-q2")),
    Scenario("no-key-loses-order", "lab3", "plane events are sent without a key",
             (Edit("lab3-planes", "sub", "producer.send(plane_topic, value=", "producer.send(plane_topic, key=f[\"tailnum\"].encode(), value="),),
             fails("lab3-q3")),
    # --- lab 4: realistic mistakes -----------------------------------------------------------
    Scenario("one-group-for-both", "lab4", "the archive reads in the dashboard's group and finds nothing left",
             (Edit("lab4-two-groups", "sub", 'archive_count = count_in_group("dashboard")',
                   'archive_count = count_in_group("archive")'),),
             fails("lab4-q1")),
    Scenario("member-never-commits", "lab4", "the group member turns auto-commit off and never commits",
             (Edit("lab4-member", "sub", "last = time.monotonic()\n### END", "consumer.commit()\n        last = time.monotonic()\n### END"),),
             fails("lab4-q3")),
    Scenario("members-assign-everything", "lab4", "every member assign()s all partitions instead of subscribing",
             (Edit("lab4-member", "sub",
                   'consumer.assign([__import__("kafka").TopicPartition(topic_name("departures"), p) for p in range(4)])',
                   'consumer.subscribe([topic_name("departures")])'),),
             fails("lab4-q2", "lab4-q3")),
    Scenario("lag-backwards", "lab4", "lag is computed as committed minus end",
             (Edit("lab4-lag", "sub", "(committed[tp].offset if tp in committed else 0) - ends[tp]",
                   "ends[tp] - (committed[tp].offset if tp in committed else 0)"),),
             fails("lab4-q4")),
    # --- lab 5: realistic mistakes -----------------------------------------------------------
    Scenario("replay-ignores-end", "lab5", "replay reads from the start time to the end of each partition",
             (Edit("lab5-replay", "sub", "if r.timestamp >= end_ms and False:", "if r.timestamp >= end_ms:"),),
             fails("lab5-q1")),
    Scenario("idempotence-off", "lab5", "the source producer uses acks=1, which turns idempotence off",
             (Edit("lab5-source", "sub", 'enable_idempotence=False, acks=1', 'enable_idempotence=True, acks="all"'),),
             fails("lab5-q2")),
    Scenario("checkpoint-written-in-place", "lab5", "the checkpoint is overwritten in place, without a rename",
             (Edit("lab5-stats", "sub", 'with open(CHECKPOINT, "w") as f:\n        json.dump(state, f)\n'
                   '        f.flush()\n        os.fsync(f.fileno())\n    pass',
                   'with open(tmp, "w") as f:\n        json.dump(state, f)\n        f.flush()\n'
                   '        os.fsync(f.fileno())\n    os.replace(tmp, CHECKPOINT)'),),
             fails("lab5-q3")),
    Scenario("offsets-saved-before-counting", "lab5", "each batch's offsets are checkpointed before its "
             "records are counted (at-most-once): a crash in between loses them",
             (Edit("lab5-stats", "sub",
                   "    for tp, records in batch.items():\n"
                   "        state[\"offsets\"][str(tp.partition)] = records[-1].offset + 1\n"
                   "    save_checkpoint(state)  # offsets first\n"
                   "    for tp, records in batch.items():\n        for r in records:",
                   "    for tp, records in batch.items():\n        for r in records:"),),
             fails("lab5-q3")),
    Scenario("duplicates-counted", "lab5", "the consumer counts a repeated flight twice",
             (Edit("lab5-stats", "sub", "if False:", 'if f["id"] in seen:'),),
             fails("lab5-q3")),
    # --- broken submissions: the grader survives each, scores what it can, says what happened
    Scenario("syntax-error", "lab1", "a missing colon in the first function",
             (Edit("lab1-increase", "sub", "def increase(key, amt)\n", "def increase(key, amt):\n"),),
             fails("lab1-q1"), note="SyntaxError"),
    Scenario("exception-in-cell", "lab2", "an index error while reading the metadata",
             (Edit("lab2-first-sent", "sub", "futures[len(futures)]", "futures[0]"),),
             fails("lab2-q3"), note="IndexError"),
    Scenario("infinite-poll-loop", "lab2", "a poll loop with no way out",
             (Edit("lab2-consume", "sub", "while True:", "while empty_polls < 3:"),),
             fails("lab2-q4"), note="interrupted"),
    Scenario("sleeps-forever", "lab1", "a sleep of eleven days before the measurements",
             (Edit("lab1-measure", "before", "import time\ntime.sleep(10**6)"),),
             note="interrupted"),
    Scenario("kernel-exits", "lab1", "os._exit(1) kills the kernel before the stream part",
             (Edit("lab1-send", "after", "import os\nos._exit(1)"),),
             fails("lab1-q4", "lab1-q5"), note="kernel died"),
    Scenario("prints-a-million-lines", "lab2", "a debugging print of a million lines",
             (Edit("lab2-create-topic", "after", "for i in range(1_000_000):\n    print('debug', i)"),),
             note="printed more than"),
    Scenario("deletes-every-topic", "lab2", "a clean-up cell that deletes every topic on the cluster",
             (Edit("lab2-create-topic", "before",
                   "lab.admin.delete_topics([t for t in lab.admin.list_topics() if not t.startswith('__')])"),),
             note="PermissionError"),
    Scenario("ten-thousand-partitions", "lab2", "a topic with 10,000 partitions",
             (Edit("lab2-create-topic", "sub", "num_partitions=10_000", "num_partitions=4"),),
             fails("lab2-q1", "lab2-q2", "lab2-q3", "lab2-q4", "lab2-q5"), note="more than 64 partitions"),
    Scenario("writes-outside-its-folder", "lab1", "a cell that writes a file in the parent folders",
             (Edit("lab1-increase", "after", "open('../../course-escape.txt', 'w').write('x')"),),
             note="PermissionError"),
)


def scenarios(lab: str | None = None) -> list[Scenario]:
    return [s for s in SCENARIOS if lab is None or s.lab == lab]
