"""The kit's one part graded by people, through nbgrader end to end: the capstone's design note
(`lab15-design`, a markdown answer cell). A student fetches lab 15, writes the note and nothing
else, and submits; the instructor collects and autogrades (the grader's sandboxed capstone run
scores the automatic parts, 0 here, and leaves the note for a person), grades the note as the
formgrader does, and releases feedback; the student's feedback shows the note, its score and the
comment, and the gradebook's total is both kinds together. The capstone layer: one grading of a
release that runs no pipeline (the solution's full capstone grading through the grader's steps,
which nbgrader's autograde uses too, is the self-test's)."""

from __future__ import annotations

import csv

import nbformat
import pytest

from autograder.pipeline import SOLUTIONS, graded_parts, manual_parts
from nbgrader_course import released, run

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.capstone]

LAB, STUDENT = "lab15", "ada"
NOTE_PART = "lab15-design"
COMMENT = "Durability, order and state argued well; say what a departure later than 30 minutes meets."
NOTE = "Events topic: 6 partitions keyed by origin, so one airport's departures stay in order."


@pytest.mark.timeout(1200)
def test_a_manually_graded_note_goes_through_autograde_formgrader_feedback_and_export(cluster, tmp_path):
    course = released(tmp_path, LAB)
    common, nbgrader = course.common, course.nbgrader

    solution = nbformat.read(SOLUTIONS / LAB / f"{LAB}.ipynb", as_version=4)
    auto, manual = graded_parts(solution), manual_parts(solution)
    assert set(manual) == {NOTE_PART} and NOTE_PART not in auto

    home, student_env = course.student_env(STUDENT)
    run([nbgrader, "fetch_assignment", LAB, *common, f"--student={STUDENT}"], home, student_env)
    fetched = nbformat.read(home / LAB / f"{LAB}.ipynb", as_version=4)
    note = next(c for c in fetched.cells if c.metadata.get("nbgrader", {}).get("grade_id") == NOTE_PART)
    assert note.cell_type == "markdown" and "BEGIN SOLUTION" not in note.source, "the release asks, it does not answer"
    note.source = NOTE
    nbformat.write(fetched, home / LAB / f"{LAB}.ipynb")
    run([nbgrader, "submit", LAB, *common, f"--student={STUDENT}"], home, student_env)

    course.instructor("collect", LAB, *common)
    course.instructor("autograde", LAB, "--force", "--log-level=WARN")

    # what the formgrader shows and does: the automatic parts scored, the note waiting for a
    # person; a grader types a score and a comment (its API sets these two fields)
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course.folder / '.nbgrader' / 'gradebook.db'}") as gb:
        submission = gb.find_submission_notebook(LAB, LAB, STUDENT)
        assert submission.needs_manual_grade, "the note waits for a person"
        scores = {g.name: g for g in submission.grades}
        assert {name: scores[name].auto_score for name in auto} == dict.fromkeys(auto, 0.0), "no pipeline, no points"
        assert scores[NOTE_PART].auto_score is None and scores[NOTE_PART].needs_manual_grade
        scores[NOTE_PART].manual_score = given = 0.75 * manual[NOTE_PART]  # 1.5 of the note's 2
        scores[NOTE_PART].needs_manual_grade = False  # the formgrader's grade API does both
        comment = gb.find_comment(NOTE_PART, LAB, LAB, STUDENT)
        comment.manual_comment = COMMENT
        gb.db.commit()
        assert not gb.find_submission_notebook(LAB, LAB, STUDENT).needs_manual_grade

    course.instructor("generate_feedback", LAB, "--force", "--log-level=WARN")
    course.instructor("release_feedback", LAB, *common)
    course.instructor("export", "--to=grades.csv", "--log-level=WARN")
    with open(course.folder / "grades.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["assignment"] == LAB and r["student_id"] == STUDENT)
    assert float(row["score"]) == given
    assert float(row["max_score"]) == sum(auto.values()) + manual[NOTE_PART]

    run([nbgrader, "fetch_feedback", LAB, *common, f"--student={STUDENT}"], home, student_env)
    pages = list((home / LAB / "feedback").rglob(f"{LAB}.html"))
    assert len(pages) == 1, pages
    html = pages[0].read_text()
    assert NOTE in html, "the note itself, as the student wrote it"
    assert COMMENT in html, "the grader's comment"
    most = float(manual[NOTE_PART])
    assert f"{given} / {most}" in html or f"{given:g} / {most:g}" in html, "the note's score"
    assert "lab15-q3" in html and "producer.py" in html, "the automatic parts' messages beside it"
