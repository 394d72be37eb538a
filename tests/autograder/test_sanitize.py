"""The autograded notebook that the formgrader renders on the instructor's server holds the
student's markup, cleaned: no script of theirs runs there (the hub's browser test shows it in
the formgrader itself)."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from autograder.nbgrader_step import SanitizeMarkup


def test_scripts_and_handlers_of_a_submission_are_shown_as_text_not_run():
    nb = new_notebook(
        cells=[
            new_markdown_cell('My answer: <img src="x.png" onerror="steal()"> and **a < b**'),
            new_markdown_cell("Plain markdown, *untouched*: `x < y`"),
            new_code_cell(
                "display(...)",
                outputs=[
                    new_output(
                        "display_data",
                        data={
                            "text/html": "<table><thead><tr><th>n</th></tr></thead><tbody><tr><td>ok</td></tr></tbody></table>"
                            '<script>steal()</script><a href="javascript:steal()">x</a>',
                            "application/javascript": "steal()",
                            "text/plain": "a table",
                        },
                    )
                ],
            ),
        ]
    )
    cleaned, _ = SanitizeMarkup().preprocess(nbformat.from_dict(nb), {})
    first, plain, code = cleaned.cells
    assert first.source.startswith('My answer: <img src="x.png">') and "onerror" not in first.source  # the handler goes
    assert plain.source == "Plain markdown, *untouched*: `x < y`"
    data = code.outputs[0]["data"]
    assert "application/javascript" not in data and data["text/plain"] == "a table"
    html = data["text/html"]
    assert "<script>" not in html and "javascript:" not in html
    assert (
        "<table><thead><tr><th>n</th></tr></thead><tbody><tr><td>ok</td></tr></tbody></table>" in html
    )  # pandas' kind


# What the XSS write-ups of the bleach era try (OWASP's cheat sheet, mutation XSS, filter evasion),
# each with what is left of it: nothing that runs, and the harmless rest kept.
PAYLOADS = [
    ('<a href="jav&#x09;ascript:alert(1)">x</a>', "<a>x</a>"),
    ('<a href="JaVaScRiPt:alert(1)">x</a>', "<a>x</a>"),
    ('<a href=" javascript:alert(1)">x</a>', "<a>x</a>"),
    ("<SCRIPT>alert(1)</SCRIPT>after", "after"),
    ("<svg><script>alert(1)</script></svg>", ""),
    ("<svg onload=alert(1)>", ""),
    ("<img src=x onerror=alert(1)>", '<img src="x">'),
    ('<iframe src="https://evil.example"></iframe>', ""),
    ("<style>body{display:none}</style>text", "text"),
    ('<div style="background:url(javascript:alert(1))">d</div>', "<div>d</div>"),
    ('<noscript><p title="</noscript><img src=x onerror=alert(1)>">', '&lt;p title="<img src="x">"&gt;'),
    ("<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>", ""),
    ('<form action="https://evil.example"><input name=p></form>', ""),
    ('<a href="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">d</a>', "<a>d</a>"),
    ('<img src="data:image/png;base64,iVBORw0KGgo=">', '<img src="data:image/png;base64,iVBORw0KGgo=">'),
    ("<details open ontoggle=alert(1)><summary>s</summary></details>", "<details><summary>s</summary></details>"),
    (
        '<a href="https://kafka.apache.org" title="docs">Kafka</a>',
        '<a href="https://kafka.apache.org" title="docs">Kafka</a>',
    ),
]


def test_known_xss_payloads_leave_nothing_that_runs():
    from autograder.nbgrader_step import clean_html

    for payload, left in PAYLOADS:
        assert clean_html(payload) == left, payload
