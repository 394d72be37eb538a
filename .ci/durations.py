"""Where a CI run's time went: each layer's wall time (build/ci/layers.txt, written by .ci/run),
its slowest tests (the JUnit XML each layer writes under build/junit/), and the slowest
self-test gradings with what each lab's gradings cost together (build/gradings.log).

    python .ci/durations.py [--top 15]
"""

from __future__ import annotations

import argparse
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

BUILD = Path(__file__).resolve().parent.parent / "build"


def minutes(s: float) -> str:
    return f"{int(s // 60)}:{int(s % 60):02d}"


def budgets() -> dict[str, float]:
    """Each layer's budget in minutes, as tests/layers.py states it."""
    import ast

    tree = ast.parse((BUILD.parent / "tests" / "layers.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "BUDGET_MIN":
            return ast.literal_eval(node.value)
    return {}


def layers() -> None:
    path = BUILD / "ci" / "layers.txt"
    if not path.exists():
        return
    budget = budgets()
    print("Layers (wall time, and the budget tests/layers.py gives each):")
    total = 0.0
    for line in path.read_text().splitlines():
        name, seconds, status = line.split()
        total += float(seconds)
        within = ""
        if name in budget:
            within = f"budget {budget[name]:g} min" + (" (over)" if float(seconds) > 60 * budget[name] else "")
        print(f"  {name:<16} {minutes(float(seconds)):>6}  {status:<8} {within}".rstrip())
    print(f"  {'all':<16} {minutes(total):>6}  (CI's whole run: at most 60 min)")


def slowest_tests(top: int) -> None:
    for xml in sorted((BUILD / "junit").glob("*.xml")):
        cases = []
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            outcome = "failed" if case.find("failure") is not None or case.find("error") is not None else ""
            cases.append((float(case.get("time") or 0), name, outcome))
        cases.sort(reverse=True)
        total = sum(t for t, _, _ in cases)
        print(f"\n{xml.stem}: {len(cases)} tests, {minutes(total)} of test time on its workers; the {top} slowest:")
        for t, name, outcome in cases[:top]:
            print(f"  {t:7.1f}s  {name} {outcome}".rstrip())


def gradings(top: int) -> None:
    path = BUILD / "gradings.log"
    if not path.exists():
        return
    line_re = re.compile(r"^\S+ (lab\d+) (\S+)\s+(PASS|FAIL)\s+([\d.]+)s\s+cpu\s+([\d.]+)s")
    rows, per_lab = [], defaultdict(lambda: [0, 0.0, 0.0])
    totals = []
    for line in path.read_text().splitlines():
        m = line_re.match(line)
        if m:
            lab, case, verdict, wall, cpu = m[1], m[2], m[3], float(m[4]), float(m[5])
            rows.append((wall, cpu, lab, case, verdict))
            per_lab[lab][0] += 1
            per_lab[lab][1] += wall
            per_lab[lab][2] += cpu
        elif "selftest:" in line and " in " in line:
            totals.append(line.split(" ", 1)[1])
    print(f"\nSelf-test gradings: {len(rows)}; per lab (count, mean wall, mean CPU of its processes, cores):")
    for lab, (n, wall, cpu) in sorted(per_lab.items(), key=lambda kv: int(kv[0][3:])):
        print(f"  {lab:<6} {n:4d}  {wall / n:6.1f}s  {cpu / n:6.1f}s  {cpu / wall:4.2f}")
    for t in totals:
        print(f"  {t}")
    print(f"the {top} slowest gradings:")
    for wall, cpu, lab, case, verdict in sorted(rows, reverse=True)[:top]:
        print(f"  {wall:6.1f}s  cpu {cpu:6.1f}s  {lab} {case} {verdict}")


def closing_line() -> None:
    """The whole run's count, as the last line (the layers' own closing lines are above)."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for xml in (BUILD / "junit").glob("*.xml"):
        for case in ET.parse(xml).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                counts["failed"] += 1
            elif case.find("skipped") is not None:
                counts["skipped"] += 1
            else:
                counts["passed"] += 1
    if any(counts.values()):
        print(f"\nlayers: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--top", type=int, default=15)
    a = p.parse_args()
    layers()
    slowest_tests(a.top)
    gradings(a.top)
    closing_line()


if __name__ == "__main__":
    main()
