"""Every solution notebook runs from top to bottom without an error, demo cells included
(the grader skips those, so only this test sees them), as a student would run it."""

from __future__ import annotations

import os
import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.pipeline import RELEASE, SOLUTIONS

LABS = sorted(p.name for p in SOLUTIONS.iterdir() if (p / f"{p.name}.ipynb").exists())


@pytest.mark.parametrize("lab", LABS)
def test_solution_runs_top_to_bottom(cluster, lab, tmp_path, monkeypatch):
    for item in (RELEASE / lab).iterdir():
        if item.suffix != ".ipynb":
            shutil.copy(item, tmp_path)
    nb = nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4)
    monkeypatch.setenv("LAB_NAMESPACE", f"run-{lab}")
    client = NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=dict(os.environ))  # raises CellExecutionError, naming the cell, on any error
    demos = [c for c in nb.cells if "demo" in c.metadata.get("tags", [])]
    assert all(c.outputs for c in demos), "every demo cell shows something"
