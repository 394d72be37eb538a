"""labs/ is exactly what nbgrader generates from solutions/: never edited by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.pipeline import RELEASE, SOLUTIONS, course_labs
from cluster.settings import ROOT

LABS = course_labs()


@pytest.mark.parametrize("lab", LABS)
def test_release_matches_what_nbgrader_generates(lab, tmp_path):
    nbgrader = Path(sys.executable).with_name("nbgrader")
    out = subprocess.run(
        [
            str(nbgrader),
            "generate_assignment",
            lab,
            "--no-db",
            "--force",
            "--log-level=WARN",
            f"--CourseDirectory.release_directory={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    fresh = sorted(p.relative_to(tmp_path / lab) for p in (tmp_path / lab).rglob("*") if p.is_file())
    committed = sorted(p.relative_to(RELEASE / lab) for p in (RELEASE / lab).rglob("*") if p.is_file())
    assert committed == fresh, "labs/ has other files than nbgrader generates; run `make release`"
    for rel in fresh:
        a, b = (tmp_path / lab / rel), (RELEASE / lab / rel)
        if rel.suffix == ".ipynb":
            assert json.loads(b.read_text()) == json.loads(a.read_text()), (
                f"labs/{lab}/{rel} drifted from solutions/; run `make release` (never edit labs/ by hand)"
            )
        else:
            assert b.read_bytes() == a.read_bytes(), f"labs/{lab}/{rel} drifted; run `make release`"


@pytest.mark.parametrize("lab", LABS)
def test_release_hides_solutions_and_hidden_tests(lab):
    text = (RELEASE / lab / f"{lab}.ipynb").read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS"):
        assert marker not in text
    assert "raise NotImplementedError()" in text


@pytest.mark.parametrize("lab", LABS)
def test_one_label_per_graded_part_everywhere(lab):
    """The nbgrader cell id, the check's name and the handout heading are the same label."""
    import nbformat

    from selfcheck.checks import checks_for
    from autograder.pipeline import graded_parts

    nb = nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4)
    parts = graded_parts(nb)
    assert parts and set(parts) == set(checks_for(lab))
    headings = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for label in parts:
        assert f"`{label}`" in headings, f"no heading names {label}"
        test_cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == label]
        assert test_cells[0].source.strip() == f'grade("{label}")'


def test_dataset_file_matches_the_pinned_package():
    out = subprocess.run(
        [sys.executable, str(ROOT / "datasets" / "make_datasets.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("lab", LABS)
def test_run_all_goes_past_unwritten_parts(lab):
    """JupyterLab's Run All stops at the first error unless the cell is tagged `raises-exception`
    (the kernel is then asked not to drop the queued cells). nbgrader's stub raises
    NotImplementedError, and a test cell raises while its part is not written: every code cell
    but the first (which connects: nothing works without it) carries the tag, so a student who
    runs all sees every part's state."""
    import nbformat

    for path in (SOLUTIONS / lab / f"{lab}.ipynb", RELEASE / lab / f"{lab}.ipynb"):
        code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        assert "raises-exception" not in code[0].metadata.get("tags", []), f"{path}: the set-up cell must stop a run"
        untagged = [c.id for c in code[1:] if "raises-exception" not in c.metadata.get("tags", [])]
        assert not untagged, f"{path}: cells {untagged} would stop Run All; tag them raises-exception"
