"""The student kit: what students get, without what would hand them the answers.

    python -m staff student-kit DIR      (or: make student-kit)

Writes DIR with the released labs (labs/, generated from solutions/ by nbgrader), the
cluster (cluster/), the data (datasets/), the self-checks a test cell calls
(selfcheck/: `grade("lab1-q2")`), the rubric of the one part people grade (docs/capstone-rubric.md),
the set-up files (pyproject.toml, Makefile, docker-compose.yml) and
JupyterLab settings that hide nbgrader's instructor menus (jupyter/).
Left out: the grader (autograder/), the staff's tools (staff/: the corpus, the self-test),
solutions/, the tests, and any secret of the course (.grading-secret, a cluster's passwords).

Hand DIR out as it is (a zip, or a repository of its own for the class); students run
`make lab` in it, as the README there says.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cluster.settings import ROOT

from autograder import GRADER, STAFF, STUDENT

# Copied as they are: what students have (autograder.STUDENT, whole folders, the same the grading
# sandbox shows) and the set-up files. Not the grader (autograder/) nor anything of the staff's.
COPIED = (
    *STUDENT,
    "pyproject.toml",
    "requirements/runtime.txt",
    "requirements/hub.txt",
    "docker-compose.yml",
    ".gitignore",
    "docs/capstone-rubric.md",  # how the capstone's design note is graded: lab 15's brief points to it
)
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "*_pb2*.py", "*.egg-info")

# JupyterLab's settings for students (the folder `jupyter/`, put first on JUPYTER_CONFIG_PATH by
# `make lab`): nbgrader's instructor parts are hidden and switched off. Students keep Validate.
# JupyterLab's announcements (the "notified about official Jupyter news?" toast on the first page,
# and its update checks) are off too: a lab opens on the lab, and a hub's servers call nobody.
INSTRUCTOR_PLUGINS = (
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:course-list",
    "@jupyter/nbgrader:assignment-list",
)
QUIET_PLUGINS = ("@jupyterlab/apputils-extension:announcements",)
INSTRUCTOR_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.course_list",
    "nbgrader.server_extensions.assignment_list",
)
JUPYTER_CONFIG = {
    "labconfig/page_config.json": {"disabledExtensions": {name: True for name in INSTRUCTOR_PLUGINS + QUIET_PLUGINS}},
    "jupyter_server_config.json": {
        "ServerApp": {"jpserver_extensions": {name: False for name in INSTRUCTOR_SERVER_EXTENSIONS}},
        "LabApp": {"check_for_updates_class": "jupyterlab.NeverCheckForUpdate"},
    },
}

STUDENT_MAKEFILE = """\
# make lab    virtual environment, jars, the three-broker cluster, then JupyterLab on labs/
# make up / make down / make status    the cluster alone
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: lab up down status install

$(STAMP): pyproject.toml requirements/runtime.txt
\t@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed")'
\t$(PYTHON) -m venv $(VENV)
\t$(PY) -m pip install --quiet --upgrade pip
\t@# every package as the course locked it (versions and hashes), then the kit itself over them
\t$(PY) -m pip install --quiet --require-hashes -r requirements/runtime.txt
\t@# setuptools warns on every editable install that folders named like a package may shadow it
\t@# (they are the package here): silenced by its message, nothing else.
\tPYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet --no-deps -e .
\t@touch $(STAMP)

install: $(STAMP)

up: $(STAMP)
\t$(PY) -m cluster up

down:
\t@if [ -x $(PY) ]; then $(PY) -m cluster down; fi

status: $(STAMP)
\t$(PY) -m cluster status

lab: up
\tJUPYTER_CONFIG_PATH=$(CURDIR)/jupyter $(VENV)/bin/jupyter lab --notebook-dir=labs $$([ "$$(id -u)" = 0 ] && echo --allow-root)
"""

STUDENT_README = """\
# Kafka & streaming ETL: the labs

You need Linux or macOS (Windows: WSL 2) with Python 3.11+, a JDK 17+ and `make`, about
3 GB of disk and 8 GB of memory (the cluster takes about 1 GB; lab 9's or 10's Spark up to 1 GB more).

```sh
make lab      # installs everything, starts a three-broker Kafka cluster, opens JupyterLab
```

The first run downloads Python packages and Kafka's jars (a few minutes); later runs start
in about 15 seconds. `make down` stops the cluster (your topics are kept), `make status`
shows it. With Docker instead: `docker compose up`, then open http://localhost:8888.

Work through the labs (`labs/lab1`, `labs/lab2`, ...) in order. Run each notebook from the top; every
graded part has a test cell right below it, `grade("lab1-q2")`, that checks your work
against the live cluster and says what it expected, what it found and what to try. Your
course grades the notebook you hand in the same way, in a fresh kernel. The capstone's
design note (lab 15) is graded by your instructor, by the rubric in `docs/capstone-rubric.md`.

`make lab` starts JupyterLab with the settings in `jupyter/`, which hide nbgrader's instructor
menus (Formgrader, Create Assignment); a hub gives student servers the same with
`JUPYTER_CONFIG_PATH=<this folder>/jupyter`.

## Ports

The cluster listens on 127.0.0.1 only: ports 9092-9094 (the ones your code uses), 9192-9194
and 9292-9294 (the brokers' own). If another program holds one of them, `make up` says which
program and starts nothing. Pick another base once:

```sh
COURSE_PORT_BASE=19092 make lab      # ports 19092-19094, 19192-19194, 19292-19294
```

The cluster's folder (`.cluster/`) remembers its ports: later `make status`, `make lab` and
the notebooks find them without the variable. To move the cluster, `make down` first.

## When something is in the way

| you see | do |
|---|---|
| `Java was not found` or `Java 11 ... 17 or newer` | install a JDK 17+ (`sudo apt install openjdk-17-jdk`, `brew install openjdk@17`), or set `JAVA_HOME` to one |
| `Port 9092 ... is already in use by ...` | stop that program (often another Kafka, or a Docker container), or use another port base (above) |
| `Could not fetch the kafka jars` | the first run needs Maven Central; later runs need no network |
| a notebook cannot connect, or `make status` shows a node `dead` | `make up` starts what is not running, with its data; `.venv/bin/python -m cluster logs` shows the brokers' last lines |
| the cluster will not start after a crash, and the logs name a corrupt folder | `.venv/bin/python -m cluster down --wipe`, then `make up`: a new, empty cluster (your topics are gone; your notebooks are not) |
| the laptop runs out of memory | close other programs (a browser's tabs count); `make down` when you stop working, and stop lab 9's and lab 10's Spark sessions (`spark.stop()`, or shut the kernel down) when you move on |
| too many topics of old labs | `.venv/bin/python -m cluster clean` deletes your namespace's topics and groups |

You do not need bubblewrap, Docker or nbgrader's instructor tools: those are for the course's
grader. Every error message of the kit says what happened and what to do next.
"""


def build(target: Path) -> Path:
    """Write the kit into `target` (replaced if it exists) and return it."""
    target = Path(target).resolve()
    course = {*COPIED, *GRADER, *STAFF, "hub", "docs", "Makefile", "README.md"}
    if target == ROOT or target in ROOT.parents or (target.parent == ROOT and target.name in course):
        raise ValueError(f"{target} is part of the course itself; choose another folder")
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, target / name, ignore=IGNORED)
        elif src.exists():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target / name)
    for name, config in JUPYTER_CONFIG.items():
        (target / "jupyter" / name).parent.mkdir(parents=True, exist_ok=True)
        (target / "jupyter" / name).write_text(json.dumps(config, indent=2) + "\n")
    (target / "Makefile").write_text(STUDENT_MAKEFILE)
    (target / "README.md").write_text(STUDENT_README)
    return target


def files(target: Path) -> list[str]:
    """Every file of the kit, relative to it (for a listing or a test)."""
    return sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())


def main(target: str) -> int:
    out = build(Path(target))
    print(f"Student kit written to {out}: {len(files(out))} files ({', '.join(COPIED)}).")
    return 0
