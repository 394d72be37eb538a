# Two commands set everything up on a fresh machine with Python 3.11+, a JDK 17+ and make:
#   make lab    virtual environment, jars, cluster, then JupyterLab on labs/
#   make test   the same set-up, then the whole test suite on a cluster it starts and stops
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: lab test test-heavy test-capstone test-fast bench up down status jars install lock outdated release selftest student-kit gradescope hub clean

# Every Python package comes from requirements/dev.txt: the pins of pyproject.toml and all they
# depend on, each with the hashes of its files (pip refuses anything else); the kit itself is
# then installed over them, editable and without dependencies.
$(STAMP): pyproject.toml requirements/dev.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed; found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --require-hashes -r requirements/dev.txt
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

# The lock files, from pyproject.toml's pins (needs PyPI; run it after changing a pin, and commit
# what it writes): dev (tests and hub), hub (the users' environment on a hub), runtime (the
# student kit, Gradescope, the compose image). hub and runtime keep dev's versions.
UV_VERSION = $$($(PYTHON) -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["tool"]["course"]["tools"]["uv"])')
LOCK = .lock-tools/bin/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes --quiet --custom-compile-command "make lock"
lock:
	@[ -x .lock-tools/bin/uv ] && [ "$$(.lock-tools/bin/uv --version | cut -d' ' -f2)" = "$(UV_VERSION)" ] || \
	  { $(PYTHON) -m venv .lock-tools && .lock-tools/bin/python -m pip install --quiet "uv==$(UV_VERSION)"; }
	$(LOCK) --extra test --extra hub -o requirements/dev.txt
	$(LOCK) --extra hub -c requirements/dev.txt -o requirements/hub.txt
	$(LOCK) -c requirements/dev.txt -o requirements/runtime.txt

# Each pin beside the newest version PyPI, Maven Central and npm serve (needs the network).
outdated: $(STAMP)
	$(PY) -m staff outdated

install: $(STAMP)

jars: $(STAMP)
	$(PY) -m cluster jars

up: jars
	$(PY) -m cluster up

down:
	@if [ -x $(PY) ]; then $(PY) -m cluster down; fi

# A stopped cluster is an answer, not a failure of make: `python -m cluster status` exits 3 for
# scripts (not running, as `systemctl status` does), which make does not report as an error.
status: $(STAMP)
	@$(PY) -m cluster status || [ $$? -eq 3 ]

# (--allow-root only where make runs as root, e.g. in a container)
lab: up
	$(VENV)/bin/jupyter lab --notebook-dir=labs $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# The tests run their own clusters (other ports, other folders), so a lab cluster that is
# already running is left alone. Two processes (tests/conftest.py): the self-test's gradings
# beside every other test module. Three layers:
#   make test-fast   no cluster: the grader's pure steps, sandbox, harness, settings (seconds)
#   make test        everything but the `heavy` layer: labs 1-8 whole, labs 9-13's checks' parts (~25 min on 2 cores)
#   make test-heavy  the labs whose gradings start programs for the student's work (labs 9, 10:
#                    Spark, lab 12: stream apps; and lab 11, see tests/layers.py): self-tests, notebooks, standalone Spark,
#                    Kafka Connect's workers; and the
#                    Gradescope package, set up and run as Gradescope does; the course's
#                    JupyterHub in a real browser (~27 min)
# CI (.ci/run) runs test, then test-heavy.
# Each layer keeps its tests' durations in build/junit/ (.ci/durations.py prints the slowest).
test: jars
	$(PY) -m pytest -n 2 --dist loadscope -m "not heavy" --junitxml=build/junit/test.xml

test-heavy: jars
	$(PY) -m pytest -n 2 --dist loadscope -m "heavy and not capstone" --junitxml=build/junit/test-heavy.xml

test-capstone: jars
	$(PY) -m pytest -n 2 --dist loadscope -m capstone --junitxml=build/junit/test-capstone.xml

# The fast layer: no cluster (the grader's pure steps, the sandbox, the harness, settings).
test-fast: $(STAMP)
	$(PY) -m pytest -n 2 -m "not cluster"

bench: jars
	$(PY) -m bench

# labs/ is generated from solutions/ by nbgrader; never edit labs/ by hand.
release: $(STAMP)
	@for lab in $$($(PY) -c "from autograder.pipeline import course_labs; print(*course_labs())"); do \
	  $(VENV)/bin/nbgrader generate_assignment $$lab --force --no-db --log-level=WARN || exit 1; done

# What students get: labs, cluster and self-checks, without solutions/ or the grading corpus.
student-kit: release
	$(PY) -m staff student-kit build/student-kit

# Gradescope's autograder zip of each lab (setup.sh, run_autograder, no solution code).
gradescope: release
	$(PY) -m autograder gradescope build --out build/gradescope

# The course's JupyterHub on this machine, as root (README: On a hosted JupyterHub): the users'
# environment from the student kit (once), then jars, the shared cluster and the hub.
hub: jars
	@[ -x "$${COURSE_HUB_STATE:-/srv/kafka-course-hub}/env/bin/jupyterhub-singleuser" ] || $(PY) -m hub install
	$(PY) -m hub run

selftest: up
	$(PY) -m staff selftest

clean: down
	rm -rf $(VENV) .lock-tools .cluster .test-cluster .test-cluster-* .own-cluster .test-own-cluster .test-own-cluster-*
