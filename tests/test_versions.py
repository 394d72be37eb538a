"""No sentence of the course names a Kafka or Spark version the pins contradict: the labs (their
source, solutions/), the README and docs/ may speak of past releases (a feature's history, when a
figure was measured) but never of a release newer than the kit's as if it ran here, nor of the
kit's own as another version than pyproject.toml pins. `python -m staff outdated` shows the other
side: what the registries serve beyond the pins."""

from __future__ import annotations

import json
import re

import pytest

from cluster import settings
from cluster.settings import ROOT

MENTION = re.compile(r"\b(Kafka|PySpark|Spark)(?:'s)? (\d+)\.(\d+)(?:\.\d+)?\b(?!-)")
# the kit's own version, said outright: "the PySpark here is 4.0", "the course runs Kafka 4.1"
OWN = re.compile(
    r"\bthe (Kafka|PySpark|Spark) (?:here|of this course|of the kit) (?:is|runs) (\d+)\.(\d+)"
    r"|\b(?:the course|the kit|this course|this kit) runs (Kafka|PySpark|Spark) (\d+)\.(\d+)",
    re.I,
)
# a newer release may be named in a sentence about what is to come
AHEAD = re.compile(r"\b(planned|not yet|future|upcoming|will|newer than the kit)\b", re.I)


def pinned() -> dict[str, tuple[int, int]]:
    kafka = settings.kafka_version().split(".")
    spark = settings.python_pins()["pyspark"].split(".")
    return {"Kafka": (int(kafka[0]), int(kafka[1])), "Spark": (int(spark[0]), int(spark[1]))}


def sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+|\n\s*\n", text)


def contradictions(text: str, pins: dict[str, tuple[int, int]]) -> list[str]:
    """The sentences of text that name a version the pins contradict, each with why."""
    found = []
    for sentence in sentences(text):
        for m in OWN.finditer(sentence):
            name, major, minor = m.group(1, 2, 3) if m.group(1) else m.group(4, 5, 6)
            product = "Kafka" if name.lower() == "kafka" else "Spark"
            if (int(major), int(minor)) != pins[product]:
                found.append(
                    f"says the kit runs {name} {major}.{minor}, the pin is {'.'.join(map(str, pins[product]))}: {sentence.strip()!r}"
                )
        for m in MENTION.finditer(sentence):
            product = "Kafka" if m.group(1) == "Kafka" else "Spark"
            if (int(m.group(2)), int(m.group(3))) > pins[product] and not AHEAD.search(sentence):
                found.append(
                    f"names {m.group(0)}, newer than the pin {'.'.join(map(str, pins[product]))}, as if it were here: {sentence.strip()!r}"
                )
    return found


def course_texts() -> list[tuple[str, str]]:
    texts = [
        (str(p.relative_to(ROOT)), p.read_text()) for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    ]
    for nb in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        for i, cell in enumerate(cells):
            texts.append((f"{nb.relative_to(ROOT)} cell {i}", "".join(cell["source"])))
    return texts


def test_no_course_text_names_a_version_the_pins_contradict():
    pins = pinned()
    found = [f"{where}: {why}" for where, text in course_texts() for why in contradictions(text, pins)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "text, found",
    [
        ("Spark 4.1's real-time mode (the PySpark here is 4.0) handles records as they come.", 1),
        ("The course runs Kafka 4.1 on three brokers.", 1),
        ("Kafka 4.9 brings share groups to every client.", 1),
        ("Stateful queries are planned for Spark 4.9.", 0),
        ("They came as early access in Kafka 4.0 and a preview in 4.1.", 0),
        ("Measured in November 2026 on Kafka 4.1.1.", 0),
        ("the kafka-python 3.0.12 client; Spark 3.5's API.", 0),
    ],
)
def test_a_stale_sentence_is_found(text, found):
    assert len(contradictions(text, {"Kafka": (4, 3), "Spark": (4, 2)})) == found, contradictions(
        text, {"Kafka": (4, 3), "Spark": (4, 2)}
    )
