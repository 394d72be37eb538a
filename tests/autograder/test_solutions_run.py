"""Every solution notebook runs from top to bottom without an error, demo cells included
(the grader skips those, so only this test sees them), as a student would run it, with every
set-up cell run twice in a row (a student re-runs them); and each demo prints the lesson its text
claims."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from layers import capstone, heavy
from proven import record_solution_run, solution_run_inputs, solution_run_proven
from autograder.pipeline import RELEASE, SOLUTIONS, course_labs

# labs 9 and 10 run Spark for minutes, lab 12 stream apps, and lab 11 stays beside them (tests/layers.py):
# the `heavy` layer (make test-heavy)
LABS = [
    pytest.param(lab, marks=[pytest.mark.heavy, *([pytest.mark.capstone] if capstone(lab) else [])])
    if heavy(lab)
    else lab
    for lab in course_labs()
]


def fuller_batches(text: str) -> bool:
    """Lab 8: waiting 20 ms with 128 KiB batches makes requests clearly fuller than the defaults
    (measured 417 against 147 records a request on a busy CI machine, ~3x; quiet, more)."""
    rows = dict(re.findall(r"^(defaults|\{'linger_ms': 20, 'batch_size': 131072\}) +[\d,]+ +([\d,]+) ", text, re.M))
    per_request = {k: float(v.replace(",", "")) for k, v in rows.items()}
    return (
        len(per_request) == 2
        and per_request["{'linger_ms': 20, 'batch_size': 131072}"] >= 1.5 * per_request["defaults"]
    )


def java_tail_is_queueing(text: str) -> bool:
    """Lab 8: the Java perf test flat out with its defaults has a p99 of seconds (records queue in
    its buffer, as the text explains), and 1 MiB batches empty that queue into a shorter tail."""
    p99 = dict(
        re.findall(r"^(Java, defaults|Java, 1 MiB batches, linger 20) +[\d,]+ records/s +p99 (\d+) ms", text, re.M)
    )
    return (
        len(p99) == 2
        and int(p99["Java, defaults"]) >= 1000
        and int(p99["Java, 1 MiB batches, linger 20"]) < int(p99["Java, defaults"])
    )


def a_stop_costs_less_than_a_kill(text: str) -> bool:
    """Lab 14: a clean stop hands leaderships over first (the producer's slowest write a fraction of
    a second, measured 0.16-0.23 s); a kill waits out the session timeout (3 s here; 6-13 s seen)."""
    found = re.search(r"slowest write after the stop: ([\d.]+) s; after the kill: ([\d.]+) s", text)
    return bool(found) and float(found[2]) >= 2.5 and float(found[1]) <= float(found[2]) / 3


def cli_lag_is_lags(text: str) -> bool:
    """kafka-consumer-groups.sh --describe gives each partition the lag that lab 4's lag() gives."""
    import ast

    rows = re.findall(r"^\S+\.slow +\S+\.lag-demo +(\d+) +(\d+) +(\d+) +(\d+) ", text, re.M)
    ours = re.search(r"^lag\(\): (\{.*\})$", text, re.M)
    return (
        bool(rows and ours)
        and {int(p): int(lag) for p, _, _, lag in rows} == ast.literal_eval(ours.group(1))
        and all(int(end) - int(cur) == int(lag) for _, cur, end, lag in rows)
    )


def spark_says_nothing_to_ignore(text: str) -> bool:
    """Labs 9 and 10: their cells show no Spark warning a student cannot act on (cluster/spark-log4j2.properties
    keeps those out; the notebook names the one line Java itself prints)."""
    return not re.search(r"^\d\d:\d\d:\d\d (WARN|ERROR) ", text, re.M)


def avro_smaller(text: str) -> bool:
    """Lab 9: from_avro gives parse()'s rows, and the Avro values are smaller than the JSON ones."""
    m = re.search(r"Avro rows equal to parse\(raw\)'s: True \| bytes per value: JSON (\d+), Avro (\d+)", text)
    return bool(m) and int(m[2]) < int(m[1])


def real_time_is_faster(text: str) -> bool:
    """Lab 10: the alerts query's median latency in real-time mode is a tenth of micro-batch's or
    less. Measured on this kit's 2 cores (p50 real-time / micro-batch, ms): 4/346, 6/489, 6/523,
    6/542, 4/778, 4/1491 beside other helpers' work (load 2-19), 5/2190 with two CPU burners on
    top (load 12-18): a ratio of 80 to 440, and it grows with load (micro-batches queue, a
    long-running task does not)."""
    p50 = dict(re.findall(r"^(micro-batch|real-time) +\d+ +(\d+) ms ", text, re.M))
    return len(p50) == 2 and 10 * int(p50["real-time"]) <= int(p50["micro-batch"])


def table_is_latest(text: str) -> bool:
    """Lab 12: the table's value of the busiest plane is the last destination of its stream."""
    m = re.search(r"^(\S+) in the stream: (.+)\n\1 in the table: +(\S+)$", text, re.M)
    return bool(m) and m[2].split(" -> ")[-1] == m[3]


def changelog_is_small(text: str) -> bool:
    """Lab 12: the changelog holds far fewer records than there were flights (changes at commits,
    one record per changed key)."""
    flights = re.search(r"as a stream: (\d+) events", text)
    changelog = re.search(r"the changelog: (\d+) records", text)
    return bool(flights and changelog) and 5 * int(changelog[1]) < int(flights[1])


def open_transaction_unseen(text: str) -> bool:
    """Lab 12: killed mid-stream, laptop-a had written counts that read_committed does not show, and
    its open transaction holds read_committed readers back."""
    m = re.search(
        r"laptop-a killed while flights still came: True; (\d+) counts committed, (\d+) written; its open "
        r"transaction holds read_committed readers back on [1-3] of 3 partitions",
        text,
    )
    return bool(m) and 0 < int(m[1]) < int(m[2])


def regrouped_hours_drop_late(text: str) -> bool:
    """Lab 12: a window after group_by drops many flights as late (the repartition topic is out of
    time order), where the topic keyed by airport counted every closed hour right."""
    m = re.search(
        r"through group_by: (\d+) airport-hours closed, (\d+) of them equal to the data's; (\d+) of their "
        r"(\d+) flights counted",
        text,
    )
    return bool(m) and int(m[3]) < 0.9 * int(m[4]) and int(m[2]) < int(m[1])


# What the demos must print, every run: the lesson, not just "something" (a pattern, or a
# function of the printed text for a lesson that compares two figures).
LESSONS = {
    "lab1": [
        r"send\(\) < RPC round trip < end to end: True",  # enqueueing is not delivering
        r"measured order: \['kafka batched', 'rpc', 'kafka one by one'\]",
        r"RPC call:   UNAVAILABLE",  # the server is gone, the call fails
        r"Kafka send: stored at offset \d+",  # the send still lands
    ],
    "lab3": [
        r"all predictions right: True",
        r"busiest: partition 0 with 52% of the messages",  # the hot key's partition
        r"busiest partition of routed_topic: (1\d|2\d|30)% of the messages",  # spread by plane
        r"its flights in order: True \| other planes' events in between: True",
    ],
    "lab2": [
        # kafka-topics.sh beside the admin client: the same topic, its settings, its partitions
        r"\$ kafka-topics\.sh --describe --topic (\S+)\nTopic: \1\tTopicId: \S+\tPartitionCount: 4\t"
        r"ReplicationFactor: 3\tConfigs: \S*retention\.ms=604800000",
        r"\tTopic: \S+\tPartition: 3\tLeader: \d\tReplicas: \d,\d,\d\tIsr: \d,\d,\d",
    ],
    "lab4": [
        cli_lag_is_lags,
        r"a left cleanly:  after\s+[0-2]\.\d s \{'[bc]': \[[\d, ]+\], '[bc]': \[[\d, ]+\]\}",  # close() leaves at once
        r"b crashed:\s+after\s+([5-9]|1\d)\.\d s \{'c': \[0, 1, 2, 3\]\}",  # after the 6 s session timeout
        r"Offset:0\tDelivery:5\tone job\n",  # a released record comes back, counted, up to the limit
        r"consumer group: 2 of 6 members received records",  # one member per partition
        r"share group: 6 of 6 members received records",  # records to whoever asks
        r"w0: killed as it sent its third result\n",  # the grader's crash, run as run_script runs it
        # what the killed worker held (a job from each partition's leader, at most) is done by
        # another, delivered twice, and once only (CI saw two: jobs 102 and 111)
        r"12 results for 12 jobs; delivered more than once: \[\{'job': 1\d\d, 'total': \d+, 'worker': 'w[123]', "
        r"'delivery': 2\}(, \{'job': 1\d\d, 'total': \d+, 'worker': 'w[123]', 'delivery': 2\})?\]",
    ],
    "lab6": [
        r"base offset  +0: +1,0\d\d,\d{3} bytes of records",  # 1 MiB segments, named by base offset
        r"segments left: \[(\d+), \d+\] \| \(log start, end\): \{0: \(\1, 8420\)\}",  # a whole segment went
        r"auto_offset_reset='earliest': committed 100, reads first offset [1-9]\d{3}\n",  # it skips to the log start
        r"auto_offset_reset='latest': committed 100, reads first nothing: it waits at the end, offset 8420",
        r"\bweek: records kept +0, \(log start, end\) offsets = \(842, 842\)",  # 2013 times, a week's retention
        r"append-time: records kept 842",
        r"forever: records kept 842",
        r"week-plus-now: records kept +1, \(log start, end\) offsets = \(842, 843\)",
        r"after: +\[\(4, 'B', None\), \(5, 'A', '3'\), \(6, 'D', '1'\), \(7, 'C', '2'\), \(8, 'A', '4'\)\]",
        r"retired planes left in it: \[\]",
        # kafka-configs.sh: the topic's own settings, one changed
        r"--add-config retention\.ms=86400000\nCompleted updating config for topic \S+\.\n"
        r"\$ kafka-configs\.sh --describe [^\n]+\nDynamic configs for topic \S+ are:\n  retention\.ms=86400000 ",
    ],
    "lab7": [
        r"broker 3 among every partition's replicas: True \| among any partition's in-sync replicas: False "
        r"\| you predicted: \{'replicas': True, 'in_sync': False\}",  # the list is fixed, the ISR is who is up
        r"predicted_broker3: right, the demo showed the same",  # lab7-q1-prediction's feedback
        r"killed broker \d: partition 0 had a new leader, broker \d, after ([2-9]|1\d)\.\d s",  # the 3 s session timeout
        r"stopped broker \d cleanly: partition 1 had a new leader, broker \d, after [0-4]\.\d s",  # handed over first
        r"killed the active controller \d: controller \d took over after \d+\.\d s",
        # no quorum: the broker killed last is never fenced
        r"killed controller (\d) too; 5 s later broker \d, the last one up, still lists these brokers as alive: "
        r"\[[\d, ]*\1[\d, ]*\]",
        r"2 replicas in sync, min.insync.replicas=2:  acks='all' -> acknowledged,  acks=1 -> acknowledged",
        r"2 replicas in sync, min.insync.replicas=3:  acks='all' -> NotEnoughReplicasError,  acks=1 -> acknowledged",
        r"fragile  acks=1   min.insync.replicas=1: acknowledged 100, the topic holds 50, lost 50 acknowledged",
        r"careful  acks=all min.insync.replicas=2: acknowledged 50, the topic holds 50, lost 0 acknowledged",
        r"the acks=1 run kept 50 of its 100 acknowledged records; you predicted 50",
        r"predicted_kept: right, the demo showed the same",  # lab7-q3-prediction's feedback
    ],
    "lab8": [
        r"asynchronous: [\d,]+ records/s = ([2-9]\d|\d{3,})x the synchronous loop",  # not waiting: 20x or more
        fuller_batches,  # lingering fills requests
        r"gzip +[\d,]+ +(1\d|[5-9])% ",
        r"zstd +[\d,]+ +(1\d|[5-9])% ",  # JSON shrinks to ~1/8
        r"snappy +[\d,]+ +[1-3]\d% ",
        r"lz4 +[\d,]+ +[1-3]\d% ",
        r"gzip, one record a batch +[\d,]+ +[5-9]\d% ",  # batches of one barely shrink
        r"\[0\.\d, 5\.\d, 60\.\d\] s",  # ages from timestamps
        r"linger_ms=100: p50 +([4-9]\d|1\d\d)\.\d ms",  # a lone record waits
        r"fetch_max_wait_ms=300: p50 +([1-3]\d\d)\.\d ms",
        r"acks=0 sent [01]\.\d\dx as fast as acks='all'",  # acks changes little here
        java_tail_is_queueing,
        r"Java, 1 MiB batches +[\d,]+ records/s +yours is 0\.\d\d of it",  # the clients' ceiling
        r"librdkafka +[\d,]+ records/s +yours is 0\.\d\d of it",
        r"10000-byte records: +[\d,]+ records/s = +[1-9]\d+\.\d MB/s",  # more bytes per second
        r"lab8-q1 passed",
        r"lab8-q2 passed",
        r"lab8-q3 passed",
        r"lab8-q4 passed",
        r"deleted \d+ topics, (\d+) partitions \(each on 3 brokers\)",  # the cluster's space back
    ],
    "lab9": [
        r" \|-- value: binary ",  # Kafka's values are bytes
        # a schema guessed from one value keeps the time as text, which a stream's watermark refuses
        r"Spark's guess from one value: STRUCT<carrier: STRING, dep_delay: BIGINT, dep_time: STRING, ",
        r"the stream refuses a watermark on its dep_time: \[EVENT_TIME_IS_NOT_ON_TIMESTAMP_TYPE\]",
        # no watermark, no end to any window: append mode refuses the aggregation
        r"append mode refused it: \[STREAMING_OUTPUT_MODE\.UNSUPPORTED_OPERATION\] .*without watermark",
        r"micro-batch 1: +\d+ records, watermark 2013-",  # the watermark moves with the events read
        r"tumbling windows hold 838 flights; sliding windows hold 3352 = 4 x 838",  # each flight in 4 windows
        r"hours written: 55 of 56 \| every one equal to the nightly job's: True",  # the last hour still open
        r"late flight in a closed hour counted: False \| late flight in the open hour counted: True "
        r"\| you predicted: \{'closed': False, 'open': True\}",
        r"predicted_counted: right, the demo showed the same",  # lab9-q3-prediction's feedback
        r"hours written once each: True",
        # the aggregation drops the closed hour's flight itself, before any sink
        r"second run: rows the aggregation dropped as too late for its state \(numRowsDroppedByWatermark\): 1\n",
        spark_says_nothing_to_ignore,
        r"Spark UI: http://[\d.]+:40\d\d\n",  # from the first cell
        r"waves per airport: \{'EWR': \d+, 'JFK': \d+, 'LGA': \d+\}; from 10 to \d{3} minutes long",  # sessions
        r"\|1 +\|10\.0 +\|",  # a wave of one departure lasts the gap
        r"not run: set TRY_STANDALONE = True",
        r"run 1: exit 0 \| hours in my-hourly: (\d+) ?\nrun 2: exit 0 \| hours in my-hourly: \1 ?\n",  # nothing more
        r"hours written: \d+ \| once each: True",
        avro_smaller,
        r"lab9-q1 passed",
        r"lab9-q2 passed",
        r"lab9-q3 passed",
    ],
    "lab10": [
        spark_says_nothing_to_ignore,
        r"Spark UI: http://[\d.]+:40\d\d\n",  # from the first cell
        r"(\d+) EV flights \| joined on the code alone: (\d+) rows, 2 per flight \| with_airline: \1 rows "
        r"\| you predicted 2 per flight",  # a renamed airline's flights meet both names
        # each version of the name on the flights of its own time: the old one before 17:00 UTC, the new one after
        r"\|ExpressJet Airlines Inc\.\|\d+ +\|[^|]+\|2013-01-01 1[0-6]:\d\d:00\|\n"
        r"\|ExpressJet \(renamed\) +\|\d+ +\|2013-01-01 (1[7-9]|2\d):\d\d:00\|",
        r"predicted_rows: right, the demo showed the same",  # lab10-q1-prediction's feedback
        r"lab10-q1 passed",
        r"(\d+) alerts for \1 flights two hours late or more",  # the Kafka sink
        r"810 of 838 flights met their hour's report; 28 left out",  # an inner join of two streams
        r"rows kept in the join's state at the end: \d\d? with watermarks, (\d+) without \(every flight "
        r"and report so far: \1\)",  # bounded vs unbounded state
        r"lab10-q2 passed",
        r"lab10-q3 passed",
        r"micro-batch 2 written twice; table rows: 56 \| equal to the batch job's: True",  # an idempotent upsert
        r"default trigger: 191 flights replayed; median [0-4]\.\d\d s",  # fresh within 5 s
        r"processingTime 1 s: 191 flights replayed; median [0-4]\.\d\d s",
        r"micro-batch \d+: +\d+ rows in, +\d+ ms, watermark \S+, rows in the join's state \d+",  # the UI's numbers
        r"micro-batch +163 +\d+ ms +\d+ ms\nreal-time +163 +\d+ ms +\d+ ms",  # every alert, both ways
        real_time_is_faster,
    ],
    "lab11": [
        r"after: the consumer crashes: unsupported operand",  # JSON: nothing checked
        r"'gate': 'unknown'\}",  # old data read with a newer schema: the reader's default
        # the first flight three ways: names in JSON, values with their lengths in Avro, tags in protobuf
        r"json +\d+ bytes  b'\{\"id\": \"2013-01-01 UA1545 EWR\", \"carrier\": ",
        r"avro +\d+ bytes  b'\*2013-01-01 UA1545 EWR\\x04UA\\x06EWR",
        r"protobuf +\d+ bytes  b'\\n\\x152013-01-01 UA1545 EWR\\x12\\x02UA\\x1a\\x03EWR",
        r"json +128,454 +100% ",
        r"avro +52,408 +41% ",
        r"protobuf +61,129 +48% ",  # values only, then numbers
        r"427 of 838 flights left early; their dep_delay as protobuf int32 takes 10 bytes",  # varints and negatives
        r"sint32: 57,318; Avro: 52,408",
        r"sint32 closes 44% of the gap to Avro",  # the rest is tags
        r"add gate with a default +full\n",
        r"add gate without a default +forward\n",
        r"remove tailnum \(it has a default\) +full\n",
        r"remove dest \(no default\) +backward\n",
        r"dep_delay int to long +backward\n",
        r"rename dep_delay to delay_min +none\n",
        r"the same, with an alias +backward\n",
        r"dep_delay int to string +none\n",
        r"you predicted: \{'gate without a default': 'forward', 'int to long': 'backward'\}",
        r"predicted_compatibility: right, the demo showed the same",  # lab11-q1-prediction's feedback
        r"lab11-q1-prediction passed",
        r"lab11-q1 passed",
        r"read without an error; dep_delay is '' - the delay of 2 is gone",  # protobuf: silent loss
        r"version 1: 1 \| again: 1\n",
        r"version 2 \(a gate, with a default\): 2\n",
        r"refused: flights-value: this version cannot read data written with version 2",
        r"wire format: b'\\x00\\x00\\x00\\x00\\x02' then \d+ bytes of Avro",
        r"lab11-q2 passed",
        # the schema out of band, a fingerprint, a registry's id, the schema in every message
        r"bare body, schema out of band +62\.5 bytes a flight, +0\.0 of them not the flight\n"
        r"single-object \(fingerprint\) +72\.5 bytes a flight, +10\.0 of them not the flight\n"
        r"registry wire format \(id\) +67\.5 bytes a flight, +5\.0 of them not the flight\n"
        r"container file per message +7\d\d\.\d bytes a flight, +6\d\d\.\d of them not the flight\n"
        r"the single-object header: b'\\xc3\\x01",
        # latest-only checks pass each step; version 4 cannot read version 1's data
        r"version 3 \(dest removed\): taken, id \d+\nversion 4 \(dest back, an int with a default\): taken, id \d+\n"
        r"  version 4 against version 1: none\n  version 4 against version 2: none\n  version 4 against version 3: full\n",
        r"decode\(\), with the writer's schema: IAH\na consumer on version 4 reads it: SchemaResolutionError - "
        r"Schema mismatch: string is not int",
        r"predicted_transitive: right, the demo showed the same",  # lab11-q3-prediction's feedback
        r"lab11-q3-prediction passed",
        # FULL_TRANSITIVE: with a default a field comes; one with a default goes; the rest cannot be done
        r"versions 1 and 2:\n"
        r"  \{\"add\": \"arr_delay\", \"type\": \"int\"\} +changed or added: \{'arr_delay': 'int'\}, removed: \[\]\n"
        r"  \{\"remove\": \"tailnum\"\} +changed or added: \{\}, removed: \['tailnum'\]\n"
        r"  \{\"remove\": \"carrier\"\} +no such version\n"
        r"  \{\"widen\": \"dep_delay\", \"type\": \"long\"\} +no such version\n"
        r"versions 1 to 4:\n"
        r"  \{\"add\": \"dest\", \"type\": \"string\"\} +no such version\n"
        r"  \{\"add\": \"arr_delay\", \"type\": \"int\"\} +no such version",
        r"lab11-q3 passed",
    ],
    "lab12": [
        r"as a stream: 935 events; as a table: 709 rows, one per plane",  # one topic, two readings
        table_is_latest,  # the table keeps a plane's last flight
        r"its changelog's cleanup.policy: compact",
        changelog_is_small,  # changes written at commits, one record per changed key
        r"its latest counts equal the flights per carrier: True",  # the state is in the cluster too
        open_transaction_unseen,  # killed mid-transaction: written, not committed
        # the same transactional id: laptop-a's transaction aborted as laptop-b starts, not after its 60 s timeout
        r"laptop-a's transaction ended ([0-9]|[1-3]\d|4[0-4]) s after laptop-b started with the same transactional id "
        r"\(\S+\.carrier-counts\)",
        r"every carrier's last count is exact: True",  # killed, started elsewhere
        r"each count once \(1, 2, 3, \.\.\.\): True",  # exactly once
        r"lab12-q1 passed",
        r"joined as they are: 16 of 60 flights found their plane \(50 planes are in the table\) \| you predicted: 20",
        r"both sides repartitioned: 50 of 60 flights found their plane",  # co-partitioned by group_by
        r"predicted_joined: you predicted 20, the demo showed 16",  # lab12-q2-prediction's feedback
        r"lab12-q2-prediction passed",
        r"lab12-q2 passed",
        r"airport-hours closed, each count equal to the data's: True",  # event time, in order per key
        regrouped_hours_drop_late,  # after group_by: the repartition topic's order, many late
        r"lab12-q3 passed",
        # the demo's two late reports: the hour's last departure up to 10 minutes late, one after 14:20
        r"13:58 reported after 14:07\n13:20 reported after 14:25\n",
        # each grace: when the hour was written, what it counted and dropped
        r"grace  0 min: 13:00 written when JFK's reports had reached 14:03, 27 of its 29 departures; "
        r"dropped as late: 13:58, 13:20\n",
        r"grace 10 min: 13:00 written when JFK's reports had reached 14:13, 28 of its 29 departures; "
        r"dropped as late: 13:20\n",
        r"grace 20 min: 13:00 written when JFK's reports had reached 14:25, 28 of its 29 departures; "
        r"dropped as late: 13:20\n",
        r"grace 30 min: 13:00 written when JFK's reports had reached 14:34, 29 of its 29 departures; "
        r"dropped as late: none",
        # section 2's count on Spark (transformWithStateInPandas): the state carried across micro-batches
        r"Spark: 4 micro-batches of 299, 298, 299, 39 flights",
        r"its state: checkpoint-counts/state/0/, a store per partition 0, 1, 2, 3; in each, a version per "
        r"micro-batch: 1\.zip 2\.zip 3\.zip 4\.zip",
        r"the two engines' counts equal, carrier by carrier \(14 carriers\): True",  # quixstreams' and Spark's
    ],
    "lab14": [
        # a broker's own page, after 200 records on a topic of three partitions
        r"\d+ lines; a few of them:\n  kafka_broker_bytes_in_total [1-9][\d.]*\n",
        r"brokers that answered: \[1, 2, 3\]",
        # a broker stopped: it answers no scrape, its followers' partitions under-replicated, none refusing writes
        r"while broker 2 was away: broker 2 answered [01] of \d+ scrapes, at most [1-9]\d* partitions "
        r"under-replicated, at most 0 under min\.insync\.replicas",
        # kafka-consumer-groups.sh: the group that read 100 of 300 is behind by the other 200
        r"\S+\.audit +\S+\.orders +\d +\d+ +\d+ +\d+ ",
        r"\{'[^']*\.audit'\}",  # lagging_groups(100): the group 200 behind, not the one caught up
        r"lab14-q1 passed",
        r"broker 4: \{'leaders': 0, 'replicas': 0\}",  # a new broker holds nothing until partitions move
        r"predicted_broker4: right, the demo showed the same",
        r"The inter-broker throttle limit was set to 250000 B/s",
        r"moved in \d+ s; broker 4 copied [5-7]\.\d MB",  # one new replica of each 2 MB partition
        r"Successfully completed leader election \(PREFERRED\) for partitions",
        r"partition 0: leader  4   replicas \[4, 1, 2\]",  # the preferred leader, once elected
        r"lab14-q2-prediction passed",
        r"lab14-q2 passed",
        # a clean stop hands leaderships over first; a kill waits out the session timeout
        a_stop_costs_less_than_a_kill,
        r"broker 1 restarted\nbroker 2 restarted\nbroker 3 restarted\nbroker 4 restarted\n"
        r"every broker restarted, every partition in sync",
        r"lab14-q3 passed",
    ],
    "lab15": [
        # the rehearsal: the first hours on the board, each equal to the data; then every hour of
        # the data on the board with its counts (the closing departures close the last one too)
        r"\w{3} \S+:00  board: (\d+) left, (\d+) delayed   data: \1 left, \2 delayed\n"
        r"\w{3} \S+:00  board: (\d+) left, (\d+) delayed   data: \3 left, \4 delayed\n",
        r"\n(\d+) airport-hours in the data, \1 on the board, \1 of them with the data's counts \(\d+ s\)\n",
        r"lab15-q1 passed",
        r"lab15-q2 passed",
        r"lab15-q3 passed",
        r"lab15-q4 passed",
        r"lab15-q5 passed",
        r"lab15-q6 passed",
        r"lab15-q7 passed",
    ],
    "lab13": [
        r"PostgreSQL 1[4-9][.\d]* .*\| wal_level = logical",
        # logical decoding: two updates in one transaction, whole rows, one BEGIN ... COMMIT
        r"BEGIN (\d+)\n\S+ \1 table public\.flight_status: UPDATE: id\[integer\]:1 .*status\[text\]:'boarding'.*\n"
        r"\S+ \1 table public\.flight_status: UPDATE: id\[integer\]:2 .*status\[text\]:'boarding'.*\n\S+ \1 COMMIT \1\n",
        # get confirms: the slot's position moves to the last COMMIT read, and a peek finds nothing
        r"8 changes read and confirmed; the last one, COMMIT \d+ at (\S+)\nthe slot has confirmed up to \1\npeek again: \[\]",
        r"source  io\.debezium\.connector\.postgresql\.PostgresConnector 3\.6\.1\.Final",
        r"\"snapshot_completed\":true",
        r"the database's password is in the configs topic: True",
        r"lab13-q1 passed",
        r"842 records; ops: \['r'\] \| source\.snapshot: \{'first': 1, 'true': 840, 'last': 1\}",
        # default replica identity: an update without its old row, a delete with the key only, a tombstone
        r"key \{'id': 1\}  op=u .*\n    before=None\n",
        r"key \{'id': 3\}  op=d .*\n    before=\{'id': 3, 'flight': '', .*'status': ''",
        r"key \{'id': 3\}  TOMBSTONE \(value null\)",
        # REPLICA IDENTITY FULL: the old row whole
        r"key \{'id': 2\}  op=u .*\n    before=\{'id': 2, 'flight': 'UA1714', .*'status': 'scheduled'",
        r"key \{'id': 4\}  op=d .*\n    before=\{'id': 4, 'flight': 'B6725'",
        r"slot lab13: confirmed_flush_lsn \d+/[0-9A-F]+ = \d+",
        r"\(1, None, 'departed'\),\n \(3, '', None\),",  # the changes made before FULL, as the text says
        r"lab13-q2 passed",
        # the task moved to the other worker; the ten changes came, each once
        r"killed worker \d \(127\.0\.0\.1:(\d+)\), which ran the task\n(?:.*\n)*? *[\d.]+ s  task: "
        r"\[\('RUNNING', '127\.0\.0\.1:(?!\1)\d+'\)\]\n",
        r"10 new records; ids: \[10, 11, 12, 13, 14, 15, 16, 17, 18, 19\]\nlost: 0 \| duplicated: 0",
        r"\(predicted_task, predicted_lost, predicted_duplicated\): right, the demo showed the same",
        r"lab13-q3-prediction passed",
        r"PostgreSQL: 841 rows \| sink: 841 rows \| rows that differ: \[\]\nthe group's committed offset: (\d+) \| the "
        r"topic's end offset: \1\n",
        r"the group's committed offset: \d+ -> \d+\nPostgreSQL: 841 rows \| sink: 841 rows \| rows that differ: \[\]\n"
        r"  sink: \{'id': 5, .*'flight': 'AA5'.*\n  sink: \{'id': 900, .*'status': 'cancelled'\}",
        # a crash before the first offset commit: the first poll's rows kept, no offset, then replayed harmlessly
        r"cdc_sink\.py: exit code -9 after \d+ s\nafter the crash: rows in crash\.db: 500 \| the group's committed offset: None",
        r"PostgreSQL: 841 rows \| crash\.db: 841 rows \| rows that differ: \[\]",
        r"lab13-q3 passed",
        # a column added: no event of its own; the next change carries it, null where never set
        r"key \{'id': 6\}  op=u .*\n    before=\{'id': 6, .*'gate': None\}\n    after =\{'id': 6, .*'gate': 'B23'\}",
        r"the sink's columns: \[.*'gate'\]\n  sink: \{'id': 6, .*'gate': 'B23'\}\n  sink: \{'id': 7, .*'status': 'boarding', "
        r"'gate': None\}\nPostgreSQL: 841 rows \| sink: 841 rows \| rows that differ: \[\]",
        r"lab13-q4 passed",
    ],
    "lab5": [
        r"commit before processing: killed after record 130 \(exit -9\); 10 lost \(130-139\), 0 processed twice\n",
        r"commit after processing: killed after record 130 \(exit -9\); 0 lost, 10 processed twice \(120-129\)",
        r"copies on the topic: \{'plain': 2, 'idempotent': 1\}",
        r"read_uncommitted: \[\(0, 'aborted 0'\), \(1, 'aborted 1'\), \(2, 'aborted 2'\), \(4, 'committed 0'\), "
        r"\(5, 'committed 1'\)\]",
        r"read_committed: \[\(4, 'committed 0'\), \(5, 'committed 1'\)\]",
        r"(\d+) alerts in the log, (\d+) committed for \2 flights; \2 flights left an hour late",
    ],
}


def is_setup(cell) -> bool:
    """A cell of the course's that prepares state: the lab's set-up, or one that makes topics or groups."""
    meta = cell.metadata.get("nbgrader", {})
    return (
        cell.cell_type == "code"
        and "grade_id" in meta
        and not meta.get("grade")
        and (
            meta["grade_id"].endswith("-setup")
            or re.search(r"fresh_topic\(|fresh_group\(|create_topics\(", cell.source)
        )
    )


def printed(cell) -> str:
    return "".join(o.get("text", "") or "".join(o.get("data", {}).get("text/plain", "")) for o in cell.outputs)


@pytest.mark.slow
@pytest.mark.parametrize("lab", LABS)
def test_solution_runs_top_to_bottom(cluster, lab, tmp_path, monkeypatch):
    # A run that passed on exactly these inputs (the lab's files, the shared code, this test with
    # this lab's lessons) proved it already: tests/proven.py.
    if proof := solution_run_proven(lab, Path(__file__)):
        pytest.skip(proof.says())
    inputs, started = solution_run_inputs(lab, Path(__file__)), time.monotonic()
    for item in (RELEASE / lab).iterdir():
        if item.suffix != ".ipynb":
            shutil.copy(item, tmp_path)
    nb = nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4)
    monkeypatch.setenv("LAB_NAMESPACE", f"run-{lab}")
    client = NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    twice = []
    client.reset_execution_trackers()
    with client.setup_kernel(env=dict(os.environ)):
        for index, cell in enumerate(nb.cells):
            # raises CellExecutionError, naming the cell, on any error
            client.execute_cell(cell, index)
            if is_setup(cell):  # students run set-up cells again; the second run must work as well
                client.execute_cell(cell, index)
                twice.append(cell.metadata["nbgrader"]["grade_id"])
    assert any(t.endswith("-setup") for t in twice), f"{lab}'s set-up cell ran twice"
    demos = [c for c in nb.cells if "demo" in c.metadata.get("tags", [])]
    assert all(c.outputs for c in demos), "every demo cell shows something"
    text = "\n".join(printed(c) for c in nb.cells if c.cell_type == "code")
    missing = [
        getattr(lesson, "__name__", lesson)
        for lesson in LESSONS.get(lab, [])
        if not (lesson(text) if callable(lesson) else re.search(lesson, text))
    ]
    assert not missing, f"the demos did not print {missing}; they printed:\n{text[-6000:]}"
    if solution_run_inputs(lab, Path(__file__)) == inputs:  # nothing it read changed while it ran
        record_solution_run(lab, inputs, time.monotonic() - started)
