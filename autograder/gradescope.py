"""Gradescope: one autograder zip per lab, and what runs inside Gradescope's container.

    python -m autograder gradescope build [LAB ...] [--out build/gradescope]   (or: make gradescope)
    python -m autograder gradescope run LAB [--root /autograder]              (run_autograder calls it)

Gradescope unpacks a zip into /autograder/source, runs its setup.sh once to build the image,
then, for each submission, runs /autograder/run_autograder with the student's files in
/autograder/submission and reads /autograder/results/results.json. Each zip here holds:

- setup.sh: the JDK, Python 3.11+, bubblewrap (apt, only what is missing), the course's
  virtual environment with every pin of pyproject.toml, and the pinned jars;
- run_autograder: starts the three-broker cluster, grades the submission, always writes
  results.json (an infrastructure failure says so, and is tried once more first);
- course/: the grading pipeline and checks, the cluster, the data, the released notebooks
  (labs/: the grading takes the test cells, locked cells and points from them), pyproject.toml
  and the lab's own grading secret (derived from the course's: pipeline.lab_secret), so one
  lab's zip reveals no other lab's seeds, and a seed in a result's staff details replays
  locally (`python -m autograder grade LAB notebook --seed N`).
  No solution code: not solutions/, not the corpus or the self-test, not the tests.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import threading
import time
import zipfile
from pathlib import Path

import psutil

from cluster.settings import ROOT

from . import GRADER, STUDENT
from .pipeline import RELEASE, StudentError, course_labs, grade_notebook, packaged_secret
from selfcheck.checks import policy
from .results import GradingResult

# What the grading needs, whole folders: the grader and what students have (autograder.GRADER,
# autograder.STUDENT); nothing of the staff's.
PACKAGED = (*GRADER, *STUDENT, "pyproject.toml", "requirements/runtime.txt")
IGNORED = shutil.ignore_patterns(
    "__pycache__", "*.pyc", ".ipynb_checkpoints", "*_pb2*.py", "*.egg-info", "checkpoint*", "spark-warehouse"
)
GRADESCOPE_ROOT = Path("/autograder")
SAMPLE_S = 0.5  # how often run() samples the memory of the cluster and the grading

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu 22.04 or
# newer). It installs only what is missing, so it also runs on a machine that has it all.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
course="$here/course"
# The jars where every user can read them: student code may run as a user of its own (below).
export COURSE_JARS_CACHE="$here/jars"
missing=()
java_ok() { command -v java >/dev/null && java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])'; }
java_ok || missing+=(openjdk-17-jre-headless)
python=""
for p in python3.13 python3.12 python3.11 python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    python="$(command -v "$p")"; break
  fi
done
[ -n "$python" ] || { missing+=(python3.11 python3.11-venv); python=python3.11; }
# The sandbox: bubblewrap where the container allows namespaces, else a user of its own (setpriv)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v setpriv >/dev/null || missing+=(util-linux)
# PostgreSQL: only the labs whose checks start one (the server stays off: the checks run their own)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
"$python" -m venv "$course/.venv"
"$course/.venv/bin/python" -m pip install --quiet --upgrade pip
"$course/.venv/bin/python" -m pip install --quiet --require-hashes -r "$course/requirements/runtime.txt"
PYTHONWARNINGS="ignore:Editable installation" "$course/.venv/bin/python" -m pip install --quiet --no-deps -e "$course"
"$course/.venv/bin/python" -m cluster jars
echo "setup.sh: ready ($("$course/.venv/bin/python" --version), $(java -version 2>&1 | head -1))"
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this for every submission (as /autograder/run_autograder, as root). It always
# writes /autograder/results/results.json; AUTOGRADER_ROOT replaces /autograder (tests).
root="${{AUTOGRADER_ROOT:-/autograder}}"
course="$root/source/course"
export COURSE_JARS_CACHE="$root/source/jars"
cd "$course" && exec "$course/.venv/bin/python" -m autograder gradescope run {lab} --root "$root"
"""


# --- the package -----------------------------------------------------------------------------
def build(labs: list[str], out: Path) -> list[Path]:
    """One zip per lab in `out`; returns their paths."""
    known = course_labs()
    labs = labs or known
    unknown = [lab for lab in labs if lab not in known]
    if unknown:
        raise SystemExit(f"no lab named {', '.join(unknown)}; the labs are {', '.join(known)}")
    stale = [lab for lab in labs if not (RELEASE / lab / f"{lab}.ipynb").exists()]
    if stale:
        raise SystemExit(f"labs/ has no released notebook for {', '.join(stale)}: run `make release` first")
    out.mkdir(parents=True, exist_ok=True)
    return [package(lab, out / f"{lab}-autograder.zip") for lab in labs]


def setup_sh(lab: str) -> str:
    """setup.sh for one lab's zip: PostgreSQL too when the lab's checks start one."""
    if not policy(lab).postgres:
        return SETUP_SH
    need = 'compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null || missing+=(postgresql)\n'
    marker = "# PostgreSQL: only the labs whose checks start one (the server stays off: the checks run their own)\n"
    return SETUP_SH.replace(marker, marker + need)


def package(lab: str, target: Path) -> Path:
    secret = packaged_secret(lab)  # the lab's alone (the course's is made now if it has none yet)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        entry(z, "setup.sh", setup_sh(lab), 0o755)
        entry(z, "run_autograder", RUN_AUTOGRADER.format(lab=lab), 0o755)
        for name in PACKAGED:
            src = ROOT / name
            for path in walk(src):
                z.write(path, f"course/{path.relative_to(ROOT)}")
        entry(z, "course/.grading-secret", secret + "\n", 0o600)  # the grader's alone; the sandbox hides it
    return target


def walk(src: Path) -> list[Path]:
    if src.is_file():
        return [src]
    found = []
    for folder, dirs, files in os.walk(src):
        ignored = IGNORED(folder, dirs + files)
        dirs[:] = sorted(d for d in dirs if d not in ignored)
        found += [Path(folder, f) for f in sorted(files) if f not in ignored]
    return found


def entry(z: zipfile.ZipFile, name: str, text: str, mode: int) -> None:
    info = zipfile.ZipInfo(name, date_time=time.localtime()[:6])
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, text)


# --- inside Gradescope -------------------------------------------------------------------------
def find_notebook(lab: str, submission: Path) -> Path:
    """The submitted notebook: <lab>.ipynb anywhere in the upload, else its only notebook."""
    notebooks = sorted(
        p for p in submission.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
    )  # grader-only: lists; read_submission reads
    named = [p for p in notebooks if p.name == f"{lab}.ipynb"]
    if len(named) == 1 or len(notebooks) == 1:
        return (named or notebooks)[0]
    found = ", ".join(str(p.relative_to(submission)) for p in notebooks) or "no notebook at all"
    raise StudentError(
        f"expected one notebook, {lab}.ipynb, in the upload; found {found}. "
        f"Upload {lab}.ipynb alone (JupyterLab: File > Download)."
    )


def student_of(metadata: Path) -> str:
    """The student's Gradescope email (or id): with the lab's secret and the grading's nonce, it
    makes the seed."""
    try:
        users = json.loads(metadata.read_text()).get("users") or [{}]
    except (OSError, ValueError):
        return ""
    return str(users[0].get("email") or users[0].get("id") or "")


class PeakMemory:
    """The largest total resident memory of this process and everything it started (the
    brokers, the grading's kernel and scripts), sampled while the block runs."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(SAMPLE_S):
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)


def run(lab: str, root: Path = GRADESCOPE_ROOT) -> int:
    """Grade root/submission with a cluster of its own; always write results.json."""
    from cluster.errors import ClusterError
    from cluster.brokers import Cluster

    results = root / "results" / "results.json"
    try:
        notebook = find_notebook(lab, root / "submission")
    except StudentError as e:
        result = GradingResult(lab=lab, notebook="(none)", notes=[str(e)])
        result.write_json(results)
        print(result.table())
        return 0
    student, cluster = student_of(root / "submission_metadata.json"), Cluster()
    with PeakMemory() as memory:
        for attempt in (
            1,
            2,
        ):  # an infrastructure failure is tried once more, on a restarted cluster (each sets result)
            if attempt > 1:
                cluster.down()
            try:
                cluster.up()
            except ClusterError as e:
                result = GradingResult(
                    lab=lab, notebook=notebook.name, infrastructure_error=f"the cluster did not start: {e}"
                )
                continue
            result = grade_notebook(lab, notebook, student=student)
            if not result.infrastructure_error:
                break
            print(f"attempt {attempt}: {result.infrastructure_error}", file=sys.stderr)
        cluster.down()
    result.staff.append(f"peak memory of the cluster and the grading: {memory.peak / 2**20:.0f} MB")
    result.write_json(results)
    print(result.table())
    return 0


def main(a) -> int:
    if a.action == "build":
        for path in build(a.labs, Path(a.out)):
            print(f"{path} ({path.stat().st_size / 2**20:.1f} MB)")
        return 0
    if len(a.labs) != 1:
        raise SystemExit("gradescope run grades one lab: python -m autograder gradescope run LAB [--root DIR]")
    return run(a.labs[0], Path(a.root))
