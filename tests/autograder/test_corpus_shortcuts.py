"""Every graded part has, in the corpus, a shortcut it must score 0: an answer taken from the
public dataset or copied from an earlier printout instead of the work (a scenario whose story
says "(shortcut)"). The self-test grades them; this only checks that none is missing. No
cluster: the corpus is built, not graded."""

import nbformat
import pytest

from autograder.pipeline import SOLUTIONS, course_labs
from staff.corpus import scenarios
from staff.selftest import graded_parts

# Parts where no answer can be copied: what is graded is state the student's own code makes on
# the brokers, with values of the grader's; or a prediction, scored for being made at all (every
# part whose label ends in "-prediction", and the ones listed).
NO_COPY_POSSIBLE = {
    "lab1-q6": "a prediction: scored for being made, in form, before the demo (the rates are the grader's)",
    "lab2-q1": "the topic's settings, as the brokers report them: the topic is the work",
    "lab2-q2": "the day's flights on the topic, read from the brokers: the records are the work",
    "lab4-q5": "a prediction: scored for being made, in form, before the demo",
    "lab4-q6": "the grader's own seeded jobs, done by the student's workers (one killed mid-job), read back from the brokers",
    "lab5-q2": "a prediction, and the records a locked demo cell left on the topic",
    "lab6-q2": "a prediction, and the four topics a locked demo cell made",
    "lab7-q4": "the consumer reads seeded values the grader writes while it runs, through broker faults",
    "lab8-q3": "the grader's own seeded records, sent by the student's producer and read back from the brokers",
    "lab8-q4": "the grader's own seeded records; the rate and the bytes on disk are measured by the grader",
    "lab14-q1": "the grader's own seeded groups and offsets, made on the grading's cluster before the alert runs",
    "lab14-q2": "the grader's own topics, moved by the student's function, as the brokers hold them after",
    "lab14-q3": "the grader's own record of the restarts it did for the script, with its producer and consumer",
    "lab15-q1": "the grader's own seeded departures, fed while it breaks brokers, read back from the brokers",
    "lab15-q2": "where the brokers put the grader's own seeded departures, and in what order",
    "lab15-q5": "the grader's own seeded version 2 fields (seconds, gate), read back from the brokers",
    "lab15-q7": "the bytes the grader's own seeded departures take on the brokers' disks, measured by the grader",
    "lab13-q3": "the grader's own seeded rows, applied by the student's sink from the grader's topic, read back from "
    "its file",
    "lab13-q4": "the grader's own seeded column and rows, applied by the student's sink, read back from its file",
}


def parts() -> list[str]:
    return [
        part
        for lab in course_labs()
        for part in graded_parts(nbformat.read(SOLUTIONS / lab / f"{lab}.ipynb", as_version=4))
    ]


@pytest.mark.parametrize("part", parts())
def test_every_graded_part_has_a_shortcut_it_scores_zero(part):
    lab = part.split("-")[0]
    shortcuts = [s.name for s in scenarios(lab) if "(shortcut)" in s.story and part in s.fails]
    if part in NO_COPY_POSSIBLE or part.endswith("-prediction"):
        return
    assert shortcuts, f"{part}: no corpus scenario takes its answer from the public data or a printout"


def test_the_exemptions_are_graded_parts():
    assert set(NO_COPY_POSSIBLE) <= set(parts())


def test_every_scenario_builds_on_its_lab():
    for s in scenarios():
        s.notebook()  # raises if an edit no longer finds its cell or text
