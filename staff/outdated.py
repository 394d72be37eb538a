"""python -m staff outdated: each pin of pyproject.toml beside the newest version its registry
serves, so the next drift is seen by the staff, not found by a reader of the labs.

It asks PyPI (Python packages), Maven Central (the jars) and npm (the hub's proxy); the Docker
images follow the Kafka and Spark pins, so they are listed with them and not asked for. A pin
behind its registry is not always wrong: pyproject.toml says why where a pin stays back (the Spark
connector's jars, quixstreams' bound on confluent-kafka), and Kafka's release is the newest whose
every artifact the kit uses is served. Exit status 0 always: this is a report, not a gate.
"""

from __future__ import annotations

import json
import re
import urllib.request
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor

from cluster import settings

PYPI = "https://pypi.org/pypi/{name}/json"
MAVEN = "https://repo.maven.apache.org/maven2/{path}/{artifact}/maven-metadata.xml"
NPM = "https://registry.npmjs.org/{name}"
STABLE = re.compile(r"^\d+(\.\d+)*$")  # no rc, beta, dev, SNAPSHOT, M1


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=15) as r:
        return r.read(64 << 20)  # a registry's answer, bounded (PyPI's for grpcio is over 4 MB)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def newest_pypi(name: str) -> str:
    return json.loads(_get(PYPI.format(name=name)))["info"]["version"]


def newest_maven(coordinate: str) -> str:
    group, artifact, _ = coordinate.rstrip("!").split(":")
    root = ET.fromstring(_get(MAVEN.format(path=group.replace(".", "/"), artifact=artifact)))
    versions = [v.text or "" for v in root.iter("version")]
    return max((v for v in versions if STABLE.match(v)), key=_key)


def newest_npm(name: str) -> str:
    return json.loads(_get(NPM.format(name=name)))["dist-tags"]["latest"]


def rows() -> list[tuple[str, str, str]]:
    """(what, pinned, where to ask) for every pin."""
    out = [(f"pypi {name}", version, "pypi") for name, version in settings.python_pins().items()]
    pins = settings.pins()
    seen = set()
    for coords in pins["maven"].values():
        for c in coords:
            group, artifact, version = c.rstrip("!").split(":")
            if (group, artifact) not in seen:
                seen.add((group, artifact))
                out.append((f"maven {group}:{artifact}", version, "maven"))
    out += [(f"npm {name}", version, "npm") for name, version in pins.get("npm", {}).items()]
    out += [
        (f"image {image.rsplit(':', 1)[0]}", image.rsplit(":", 1)[1], "image")
        for image in pins.get("images", {}).values()
    ]
    return out


def check(row: tuple[str, str, str]) -> tuple[str, str, str, str]:
    what, pinned, where = row
    name = what.split(" ", 1)[1]
    try:
        if where == "pypi":
            newest = newest_pypi(name)
        elif where == "maven":
            newest = newest_maven(f"{name}:{pinned}")
        elif where == "npm":
            newest = newest_npm(name)
        else:
            follows = {"apache/kafka": "the Kafka pin", "apache/spark": "the pyspark pin"}.get(name)
            return (
                what,
                pinned,
                "-",
                f"follows {follows}" if follows else "not asked (image registries are out of reach here)",
            )
    except Exception as e:  # a registry down or a name it does not know: say so, go on
        return what, pinned, "?", f"could not ask: {type(e).__name__}: {e}"
    behind = STABLE.match(pinned) and STABLE.match(newest) and _key(newest) > _key(pinned)
    return what, pinned, newest, "newer served" if behind else ""


def main() -> int:
    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(check, rows()))
    width = max(len(r[0]) for r in found)
    pinned_width = max(len(r[1]) for r in found)
    print(f"{'pin':<{width}}  {'pinned':<{pinned_width}}  {'newest':<8}  note")
    for what, pinned, newest, note in found:
        print(f"{what:<{width}}  {pinned:<{pinned_width}}  {newest:<8}  {note}")
    behind = sum(r[3] == "newer served" for r in found)
    print(
        f"{behind} of {len(found)} pins have a newer version served; pyproject.toml says why where a pin stays back on purpose."
    )
    return 0
