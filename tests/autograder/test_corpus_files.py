"""The corpus's files (staff/corpus/labN.toml): what the loader refuses, each with a message that
names the file, the scenario and what to write instead. That the files build the notebooks they
mean is test_pipeline_steps's `test_every_corpus_entry_still_applies_to_its_lab`."""

import textwrap

import pytest

from autograder.pipeline import course_labs
from staff.corpus import CorpusError, load, scenarios

GOOD = """
[code]
loop = '''
while True:
    pass
'''

[[scenario]]
name = "loops"
story = "a loop with no way out"
fails = ["lab1-q1"]

[[scenario.edit]]
cell = "lab1-increase"
kind = "after"
new = [{code = "loop"}, "print('never')", {repeat = "0", times = 3}]

[[attack]]
name = "copies"
story = "a copied cell"

[[attack.edit]]
cell = "lab1-increase"
kind = "copy"
old = "lab1-measure"
"""


def corpus(tmp_path, text, name="lab1.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_file_gives_its_scenarios_with_code_pieces_joined(tmp_path):
    groups = load(corpus(tmp_path, GOOD))
    (loops,) = groups["scenario"]
    assert (loops.lab, loops.fails, loops.base) == ("lab1", frozenset({"lab1-q1"}), "solution")
    assert loops.edits[0].new == "while True:\n    pass\nprint('never')000"
    assert [a.name for a in groups["attack"]] == ["copies"] and groups["shortcut"] == ()
    assert groups["attack"][0].edits[0].kind == "copy"


@pytest.mark.parametrize(
    "change, told",
    [
        (('fails = ["lab1-q1"]', 'fail = ["lab1-q1"]'), "keys ['edit', 'fail', 'name', 'story']"),
        (('kind = "after"', 'kind = "afer"'), "kind 'afer'"),
        (('{code = "loop"}', '{code = "lop"}'), "names no code of [code] (it has ['loop'])"),
        (("[[attack]]", "[[attacks]]"), "unknown tables ['attacks']"),
        (("times = 3", "times = -3"), "repeat is text, times a count"),
        (
            ('new = [{code = "loop"}, "print(\'never\')", {repeat = "0", times = 3}]', "new = \"print('never')\""),
            "['loop'] is used by no scenario",
        ),
        (('name = "loops"', 'name = "loops'), "not valid TOML"),
    ],
)
def test_a_typo_is_refused_with_where_it_is(tmp_path, change, told):
    text = GOOD.replace(*change)
    assert text != GOOD
    with pytest.raises(CorpusError) as e:
        load(corpus(tmp_path, text))
    assert str(e.value).startswith("lab1.toml") and told in str(e.value)


def test_the_files_make_the_corpus_with_names_unique_in_each_lab():
    labs = {s.lab for s in scenarios()}
    assert labs == set(course_labs())  # every lab has a corpus file
    for lab in labs:
        names = [s.name for s in scenarios(lab)]
        assert len(names) == len(set(names)), lab
