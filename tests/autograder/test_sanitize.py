"""The autograded notebook that the formgrader renders on the instructor's server holds the
student's markup, cleaned: no script of theirs runs there (the hub's browser test shows it in
the formgrader itself)."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from autograder.nbgrader_step import SanitizeMarkup


def test_scripts_and_handlers_of_a_submission_are_shown_as_text_not_run():
    nb = new_notebook(cells=[
        new_markdown_cell('My answer: <img src="x.png" onerror="steal()"> and **a < b**'),
        new_markdown_cell("Plain markdown, *untouched*: `x < y`"),
        new_code_cell("display(...)", outputs=[new_output("display_data", data={
            "text/html": '<table><thead><tr><th>n</th></tr></thead><tbody><tr><td>ok</td></tr></tbody></table>'
                         '<script>steal()</script><a href="javascript:steal()">x</a>',
            "application/javascript": "steal()",
            "text/plain": "a table"})]),
    ])
    cleaned, _ = SanitizeMarkup().preprocess(nbformat.from_dict(nb), {})
    first, plain, code = cleaned.cells
    assert first.source.startswith('My answer: <img src="x.png">') and "onerror" not in first.source   # the handler goes
    assert plain.source == "Plain markdown, *untouched*: `x < y`"
    data = code.outputs[0]["data"]
    assert "application/javascript" not in data and data["text/plain"] == "a table"
    html = data["text/html"]
    assert "<script>" not in html and "javascript:" not in html
    assert "<table><thead><tr><th>n</th></tr></thead><tbody><tr><td>ok</td></tr></tbody></table>" in html   # pandas' kind
