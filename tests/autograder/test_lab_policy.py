"""Each lab's grading policy is one typed declaration (selfcheck.checks.LabPolicy), read through
policy(lab): a misspelt setting fails here instead of falling back to a default unseen."""

from __future__ import annotations

import dataclasses

import pytest

from autograder.pipeline import course_labs
from layers import HEAVY
from selfcheck.checks import LabPolicy, checks_module, policy


@pytest.mark.parametrize("lab", course_labs())
def test_a_labs_policy_is_a_labpolicy_and_nothing_else_says_it(lab):
    assert isinstance(policy(lab), LabPolicy)
    names = {f.name.upper() for f in dataclasses.fields(LabPolicy)} | {"SECOND_LAYER", "POLICIES"}
    stray = names & set(vars(checks_module(lab)))
    assert not stray, f"selfcheck.checks.{lab} sets {stray}: say it in POLICY = LabPolicy(...)"


def test_the_heavy_layer_names_labs_that_exist():
    assert set(HEAVY) <= set(course_labs())


def test_a_policy_of_another_type_is_refused(monkeypatch):
    monkeypatch.setattr(checks_module("lab1"), "POLICY", {"checks_budget_s": 10}, raising=False)
    with pytest.raises(TypeError, match="not a LabPolicy"):
        policy("lab1")
