"""The student kit holds the labs and the cluster, and nothing that hands out answers."""

from __future__ import annotations

import os

import nbformat
import pytest

from staff import kit
from autograder.pipeline import SOLUTIONS


def solution_lines() -> set[str]:
    """Every substantial line the solutions write between BEGIN and END SOLUTION that the
    released notebooks do not give away themselves (a loop header the lab provides elsewhere)."""
    from autograder.pipeline import RELEASE

    given = {
        line.strip()
        for path in RELEASE.glob("*/*.ipynb")
        for cell in nbformat.read(path, as_version=4).cells
        for line in cell.source.splitlines()
    }
    lines = set()
    for path in SOLUTIONS.glob("*/*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            inside = False
            for line in cell.source.splitlines():
                if "BEGIN SOLUTION" in line:
                    inside = True
                elif "END SOLUTION" in line:
                    inside = False
                elif inside and len(line.strip()) >= 25 and line.strip() not in given:
                    lines.add(line.strip())
    return lines


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return kit.build(tmp_path_factory.mktemp("kit") / "kafka-course")


def test_the_kit_has_the_labs_and_the_cluster_and_no_answers(built):
    files = kit.files(built)
    assert {
        "labs/lab1/lab1.ipynb",
        "cluster/clients.py",
        "selfcheck/checks/lab1.py",
        "Makefile",
        "README.md",
        "pyproject.toml",
    } <= set(files)
    for gone in ("solutions/", "tests/", "staff/", "autograder/", ".grading-secret", "secrets.json"):
        assert not any(f.startswith(gone) or f.endswith(gone) for f in files), gone
    answers = solution_lines()
    assert len(answers) > 50  # the solutions do have answers to look for
    for name in files:
        text = (built / name).read_text(errors="replace")
        assert "BEGIN SOLUTION" not in text, name
        leaked = [line for line in answers if line in text]
        assert not leaked, f"{name} holds solution code: {leaked[:3]}"


def test_building_over_the_course_itself_is_refused():
    from cluster.settings import ROOT

    for target in (ROOT, ROOT / "labs", ROOT / "solutions", ROOT.parent):
        with pytest.raises(ValueError, match="part of the course"):
            kit.build(target)


def kernel_output(nb, path, env: dict[str, str]) -> list[str]:
    """Run `nb` in a real kernel whose environment is exactly `env`; each cell's printed text."""
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path)}})
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]


def test_a_lab_runs_from_the_kit(cluster, built):
    """The kit's own packages (not the course's) start a lab against the live cluster, and its
    self-check answers a blank part with a message."""
    release = nbformat.read(built / "labs/lab1/lab1.ipynb", as_version=4).cells
    blank_answer = next(c for c in release if c.metadata.get("nbgrader", {}).get("grade_id") == "lab1-increase")
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(release[1].source),
            nbformat.v4.new_code_cell(blank_answer.source),
            nbformat.v4.new_code_cell("import cluster, selfcheck\nprint(cluster.__file__, selfcheck.__file__)"),
            nbformat.v4.new_code_cell(
                "try:\n    grade('lab1-q1')\nexcept AssertionError as e:\n    print('CHECK SAID', e)"
            ),
        ]
    )
    printed = kernel_output(nb, built / "labs/lab1", dict(os.environ, PYTHONPATH=str(built), LAB_NAMESPACE="kit"))
    assert "lab1: Kafka at" in printed[0]
    paths = printed[2].split()
    assert all(p.startswith(str(built)) for p in paths), paths
    assert "CHECK SAID" in printed[3] and "`increase` is not written yet" in printed[3], printed[3]


@pytest.mark.cluster  # starts a cluster of its own (the kit's), on the throwaway ports
def test_the_kits_cluster_on_other_ports_is_found_from_a_fresh_shell(built, tmp_path):
    """`COURSE_PORT_BASE=... make up` once; then `make status`, a notebook's first cell and `up`
    in shells without it find that cluster's ports in its folder; an `up` naming other ports
    while it runs is refused with what to do."""
    import subprocess
    import sys

    from cluster import settings

    base = settings.THROWAWAY_PORT_BASE
    fresh = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COURSE_", "KAFKA_", "PYTEST")) and k not in ("LAB_NAMESPACE", "VIRTUAL_ENV")
    }
    fresh |= {"PYTHONPATH": str(built), "LAB_NAMESPACE": "kit"}
    stamp = tmp_path / "installed"  # the kit's Makefile installs first: this checkout has it installed
    stamp.touch()

    def make(*args, **env):
        return subprocess.run(
            ["make", "-C", str(built), *args, f"PY={sys.executable}", f"STAMP={stamp}"],
            env={**fresh, **env},
            capture_output=True,
            text=True,
            timeout=300,
        )

    try:
        up = make("up", COURSE_PORT_BASE=str(base))
        assert up.returncode == 0, up.stdout + up.stderr
        status = make("status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}" in status.stdout, status.stdout
        assert status.stdout.count("alive") == 3, status.stdout

        release = nbformat.read(built / "labs/lab1/lab1.ipynb", as_version=4).cells
        printed = kernel_output(
            nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(release[1].source)]), built / "labs/lab1", fresh
        )
        assert f"lab1: Kafka at 127.0.0.1:{base}," in printed[0], printed[0]

        assert make("up").returncode == 0  # finds it running: nothing to start
        moved = make("up", COURSE_PORT_BASE=str(settings.DEFAULT_PORT_BASE))
        assert moved.returncode != 0
        assert f"running on ports from {base}, not {settings.DEFAULT_PORT_BASE}" in moved.stderr, moved.stderr
        assert "Leave COURSE_PORT_BASE unset" in moved.stderr
    finally:
        subprocess.run(
            [sys.executable, "-m", "cluster", "down", "--wipe"], cwd=built, env=fresh, capture_output=True, timeout=300
        )


def test_jupyterlab_from_the_kit_hides_the_instructor_menus(built):
    """A real JupyterLab started as the kit's `make lab` starts it: the page it serves disables
    nbgrader's instructor plugins and the news toast, the formgrader's pages are not there;
    Validate stays."""
    import re
    import socket
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    assert "JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter" in (built / "Makefile").read_text()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    jupyter = os.path.join(os.path.dirname(sys.executable), "jupyter")
    server = subprocess.Popen(
        [
            jupyter,
            "lab",
            "--no-browser",
            f"--port={port}",
            "--ServerApp.token=kit",
            f"--notebook-dir={built / 'labs'}",
            "--allow-root",
        ],
        env=dict(os.environ, JUPYTER_CONFIG_PATH=str(built / "jupyter")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def get(path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}?token=kit", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, page = get("/lab")
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "JupyterLab did not start"
                time.sleep(0.2)
        assert status == 200
        disabled = re.search(r'"disabledExtensions": \[([^\]]*)\]', page).group(1)
        for plugin in kit.INSTRUCTOR_PLUGINS + kit.QUIET_PLUGINS:
            assert f'"{plugin}"' in disabled, (plugin, disabled)
        assert "validate-assignment" not in disabled
        assert get("/formgrader")[0] == 404
    finally:
        server.terminate()
        server.wait(timeout=30)
