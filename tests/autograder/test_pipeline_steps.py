"""The grader's pure steps, with no cluster and no kernel: a small notebook in, a notebook or
a result out (the fast layer: `make test-fast`)."""

from __future__ import annotations

import copy
import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from staff.corpus import find_cell, scenarios
from autograder.pipeline import RELEASE, SOLUTIONS, Job, restore_tests
from autograder.results import CheckResult, GradingResult


def nbgrader(grade_id: str, **flags) -> dict:
    meta = {"grade": False, "solution": False, "locked": False, "schema_version": 3, "grade_id": grade_id}
    meta.update(flags)
    return {"nbgrader": meta}


def course() -> dict:
    """Set-up (locked), an answer, its test, a demo: the shape of every lab."""
    cells = [
        new_code_cell("lab = start_lab('lab0')", metadata=nbgrader("lab0-setup", locked=True)),
        new_code_cell("answer = 42", metadata=nbgrader("lab0-answer", solution=True)),
        new_code_cell('grade("lab0-q1")', metadata=nbgrader("lab0-q1", grade=True, locked=True, points=2)),
        new_code_cell("print(answer)", metadata={"tags": ["demo"]}),
    ]
    for i, cell in enumerate(cells):
        cell.id = f"cell-{i}"
    return new_notebook(cells=cells)


def restored(submission) -> Job:
    job = Job("lab0", None, source=course(), submission=submission, parts={"lab0-q1": 2.0})
    job.result = GradingResult("lab0", "x.ipynb")
    restore_tests(job)
    return job


def sources(job: Job) -> list[str]:
    return [c.source for c in job.submission.cells]


def test_an_untouched_notebook_is_left_as_it_is():
    job = restored(course())
    assert sources(job) == sources(restored(course())) == [c.source for c in course().cells]
    assert job.result.notes == []


def test_edited_test_and_locked_cells_get_the_courses_source_and_type_back():
    nb = course()
    nb.cells[0].source = "lab = None"  # the locked set-up, edited
    nb.cells[2].source, nb.cells[2].cell_type = "pass", "markdown"  # the test cell, gutted
    job = restored(nb)
    assert sources(job)[:3] == ["lab = start_lab('lab0')", "answer = 42", 'grade("lab0-q1")']
    assert job.submission.cells[2].cell_type == "code"
    assert any("were edited" in n and "lab0-q1" in n and "lab0-setup" in n for n in job.result.notes)


def test_a_pasted_copy_of_a_test_cell_counts_for_nothing():
    nb = course()
    copy_ = copy.deepcopy(nb.cells[2])
    copy_.id = "pasted"
    nb.cells.insert(1, copy_)  # pasted above the course's own copy
    job = restored(nb)
    kinds = [(c.cell_type, c.get("id")) for c in job.submission.cells]
    assert kinds[1] == ("markdown", "pasted") and kinds[3] == ("code", "cell-2")
    assert any("appears 2 times" in n for n in job.result.notes)


def test_without_the_courses_copy_the_first_one_counts():
    nb = course()
    nb.cells[2].id = "renamed"
    second = copy.deepcopy(nb.cells[2])
    second.id = "later"
    nb.cells.append(second)
    job = restored(nb)
    assert [c.cell_type for c in job.submission.cells][2::2] == ["code", "markdown"]


def test_a_deleted_test_cell_is_put_back_at_the_end():
    nb = course()
    del nb.cells[2]
    job = restored(nb)
    assert job.submission.cells[-1].source == 'grade("lab0-q1")'
    assert any("put back at the end" in n for n in job.result.notes)


def test_only_the_courses_own_observation_cells_stay_demos():
    nb = course()
    nb.cells.append(new_code_cell("import os; os._exit(0)", metadata={"tags": ["demo"]}))  # "skip me"
    job = restored(nb)
    assert "demo" in job.submission.cells[3].metadata["tags"]
    assert "demo" not in job.submission.cells[4].metadata["tags"]


def test_outputs_the_student_brought_are_dropped():
    nb = course()
    nb.cells[1].outputs = [{"output_type": "stream", "name": "stdout", "text": "lab0-q1 passed"}]
    assert restored(nb).submission.cells[1].outputs == []


# --- results --------------------------------------------------------------------------------
def result() -> GradingResult:
    r = GradingResult("lab0", "x.ipynb", seed=987654321, namespace="grade-lab0-x")
    r.checks = [
        CheckResult("lab0-q1", 2, 2, True, 1.0, "Passed."),
        CheckResult("lab0-q2", 3, 0, False, 1.0, "wrong\n  expected: 1\n  found:    2", "Traceback ..."),
    ]
    r.notes = ["Cell 3 was interrupted."]
    return r


def test_a_part_graded_by_people_is_named_and_not_scored():
    """The capstone's design note: the grader's score and maximum leave it out, and say who grades it."""
    r = result()
    r.manual = {"lab0-design": 4.0}
    data = r.gradescope()
    assert (data["score"], data["max_score"]) == (2, 5)
    assert "lab0-design (4 points) is graded by your instructor, not here." in data["output"]
    assert "lab0-design" not in [t["name"] for t in data["tests"]]
    assert "lab0-design  by the instructor: -/4" in r.table()
    from autograder.pipeline import graded_parts, manual_parts

    lab15 = nbformat.read(SOLUTIONS / "lab15" / "lab15.ipynb", as_version=4)
    assert manual_parts(lab15) == {"lab15-design": 2.0}
    assert "lab15-design" not in graded_parts(lab15)


def test_gradescope_results_show_parts_and_hide_staff_details():
    data = json.loads(json.dumps(result().gradescope()))
    assert (data["score"], data["max_score"]) == (2, 5)
    visible = [t for t in data["tests"] if t["visibility"] == "visible"]
    hidden = [t for t in data["tests"] if t["visibility"] == "hidden"]
    assert [t["name"] for t in visible] == ["lab0-q1", "lab0-q2"]
    assert [t["status"] for t in visible] == ["passed", "failed"]
    assert "Cell 3 was interrupted." in data["output"]
    student_view = data["output"] + "".join(t["output"] for t in visible)
    assert "987654321" not in student_view and "Traceback" not in student_view
    assert any("987654321" in t["output"] for t in hidden) and any("Traceback" in t["output"] for t in hidden)


def test_the_table_has_one_line_per_part_with_the_failure_beneath():
    lines = result().table().splitlines()
    assert lines[0].endswith("seed=987654321")
    rows = [ln.split() for ln in lines if ln.strip().startswith("lab0-q")]
    assert [r[:2] for r in rows] == [["lab0-q1", "PASS"], ["lab0-q2", "FAIL"]]
    assert lines[-1].strip().startswith("total: 2/5")


# --- the corpus -----------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", scenarios(), ids=lambda s: f"{s.lab}-{s.name}")
def test_every_corpus_entry_still_applies_to_its_lab(scenario):
    """An edit whose anchor text left the solution would silently grade the solution."""
    nb = scenario.notebook()
    base = nbformat.read(
        (RELEASE if scenario.base == "release" else SOLUTIONS) / scenario.lab / f"{scenario.lab}.ipynb", as_version=4
    )
    assert {c.id for c in base.cells} <= {c.id for c in nb.cells}, "the course's cells keep their ids"
    assert nb.cells != base.cells, "the scenario changed nothing"
    for label in scenario.fails:
        find_cell(nb, label)


@pytest.mark.parametrize(
    "expr, name",
    [
        ("predicted_order", "predicted_order"),
        ("sorted(replay(1, 2))", "replay"),  # builtins are not the student's
        ("[(r['id'], type(r['t']).__name__) for r in parse(__import__('m').raw())]", "parse"),
        ("lab.topic('x')", "lab"),
        # a function passed to the grader's own code in the kernel: the argument, not the import
        (
            "__import__('selfcheck.checks.lab10', fromlist=['_']).start_join(with_weather, 'a', 'b', 'n')",
            "with_weather",
        ),
    ],
)
def test_a_missing_answer_is_named_by_the_students_function(expr, name):
    from selfcheck.errors import NotWritten, answer_name

    assert answer_name(expr) == name
    assert f"`{name}` is not written yet" in str(NotWritten(expr))


def test_a_name_only_an_example_cell_defines_is_told_apart():
    # grading skips example cells: an answer that leans on their names gets its own message
    from autograder.kernel import defined_in_demo

    nb = new_notebook(
        cells=[
            new_code_cell(
                "%%time\nweather_topic = lab.fresh_topic('w', 3)\nimport numpy as np\ndef helper():\n    pass",
                metadata={"tags": ["demo"]},
            ),
            new_code_cell("mine = 1"),
        ]
    )
    assert all(defined_in_demo(nb, name) for name in ("weather_topic", "np", "helper"))
    assert not any(defined_in_demo(nb, name) for name in ("mine", "lab", "numpy"))


def read(path) -> Job:
    from autograder.pipeline import read_submission

    job = Job("lab0", path)
    job.result = GradingResult("lab0", str(path))
    read_submission(job)
    return job


def test_a_notebook_is_bounded_before_it_is_parsed(tmp_path):
    """Over MAX_NOTEBOOK_BYTES, or a link (to the grader's secrets, say), or a pipe: refused with
    a message for the student, never read into the grader's memory or followed."""
    from autograder.pipeline import MAX_NOTEBOOK_BYTES, StudentError

    ok = tmp_path / "ok.ipynb"
    nbformat.write(course(), ok)
    assert len(read(ok).submission.cells) == 4
    big = copy.deepcopy(course())
    big.cells[1].source = "x = '" + "0" * MAX_NOTEBOOK_BYTES + "'"
    nbformat.write(big, tmp_path / "big.ipynb")
    with pytest.raises(StudentError, match="MB: clear large outputs"):
        read(tmp_path / "big.ipynb")
    from autograder.pipeline import read_submission

    given = Job("lab0", None, submission=big)  # nbgrader's preprocessor hands it over in memory
    given.result = GradingResult("lab0", "x.ipynb")
    with pytest.raises(StudentError, match="larger than 8 MB"):
        read_submission(given)
    (tmp_path / "link.ipynb").symlink_to(ok)
    with pytest.raises(StudentError, match="is a link"):
        read(tmp_path / "link.ipynb")
    import os

    os.mkfifo(tmp_path / "pipe.ipynb")
    with pytest.raises(StudentError, match="not an ordinary file"):
        read(tmp_path / "pipe.ipynb")


def test_a_large_value_is_parsed_out_of_the_graders_memory(monkeypatch):
    """A value of a million small items (a few MB of text, a GB to parse) is parsed by a child
    process with its own memory limit: the grader gets the value, or MemoryError, and stays small."""
    import resource

    import autograder.kernel as kernel

    text = repr(repr(("ok", [0] * 999_999)))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    found = kernel.parse_value(text)
    assert found == ("ok", [0] * 999_999)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 200 * 2**20
    monkeypatch.setattr(kernel, "PARSE_MEMORY_MB", 200)
    with pytest.raises(MemoryError):
        kernel.parse_value(text)
    assert kernel.parse_value(repr(repr(("ok", {"a": (1.5, b"x", {3}, None)})))) == (
        "ok",
        {"a": (1.5, b"x", {3}, None)},
    )
