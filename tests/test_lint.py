"""The code stays formatted, linted and typed: ruff's formatter and linter and mypy, as configured
in pyproject.toml ([tool.ruff], [tool.mypy]: what they check, and what mypy leaves out and why),
find nothing.
In `make test-fast` and so in `make test` too: a finding fails CI where it was written."""

from __future__ import annotations

import subprocess
import sys

from cluster.settings import ROOT


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    found = run("ruff", "check", "--output-format", "concise", ".")
    assert found.returncode == 0, (
        f"ruff:\n{found.stdout[-4000:]}{found.stderr[-2000:]}\n(`ruff check --fix .` mends some)"
    )


def test_the_code_is_formatted():
    found = run("ruff", "format", "--check", ".")
    assert found.returncode == 0, (
        f"ruff format:\n{found.stdout[-4000:]}{found.stderr[-2000:]}\n(`ruff format .` applies it)"
    )


def test_mypy_finds_nothing():
    found = run("mypy")
    assert found.returncode == 0, f"mypy:\n{found.stdout[-4000:]}{found.stderr[-2000:]}"
