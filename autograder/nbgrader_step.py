"""nbgrader's execution step, replaced by the grader's own: `nbgrader autograde` gives the
same points as `python -m autograder grade`, because it is the same grading.

nbgrader's own Execute step runs the test cells inside the student's kernel, where code in
the notebook can replace the checks. nbgrader_config.py puts GradeInSandbox in its place:
after nbgrader has restored the course's cells from its gradebook, the notebook is graded by
autograder.pipeline (kernel in the sandbox, checks in this process), and each test cell gets
an output nbgrader understands: nothing for a pass, an error for a fail. nbgrader's next
steps (SaveAutoGrades, feedback) then read those as usual.
"""

from __future__ import annotations

import copy
import re

import nh3
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from traitlets import Bool

import nbformat

from .pipeline import MAX_NOTEBOOK_BYTES, drop_copies, grade_notebook, source_notebook


class GradingFailed(RuntimeError):
    """We could not grade this submission (the cluster is down, ...): nbgrader records an
    error for it instead of a zero."""


class KeepCourseCopy(Preprocessor):
    """In place of nbgrader's DeduplicateIds: where a test cell (or another of the course's
    cells) appears several times, the course's own copy counts and the others become notes,
    as in `python -m autograder grade`. (DeduplicateIds keeps the last copy and leaves the
    others with empty metadata, which nbgrader then refuses as an old format: one pasted test
    cell would fail the whole submission.)"""

    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: dict):
        lab = resources.get("nbgrader", {}).get("assignment")
        source = nbformat.read(source_notebook(lab), as_version=4)
        for gid, cells in drop_copies(source, nb).items():
            if len(cells) > 1:
                self.log.warning(
                    "%s: the cell %s appears %d times; only the course's own copy counts", lab, gid, len(cells)
                )
        return nb, resources


class GradeInSandbox(Preprocessor):
    # nbconvert's preprocessors are off unless enabled: off, nbgrader would find no errors in
    # the (unrun) test cells and give full marks to every submission.
    enabled = Bool(True).tag(config=True)
    sandbox = Bool(
        True,
        help="Run the student's code in the bubblewrap sandbox (Linux). False is "
        "--no-sandbox: every result then says what is not guaranteed.",
    ).tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: dict):
        info = resources.get("nbgrader", {})
        lab, student = info.get("assignment"), info.get("student", "")
        # A notebook over the size bound is refused by the pipeline as it is (not copied first).
        too_large = len(nbformat.writes(nb).encode()) > MAX_NOTEBOOK_BYTES
        result = grade_notebook(lab, nb if too_large else copy.deepcopy(nb), student=student, sandbox=self.sandbox)
        if result.infrastructure_error:
            raise GradingFailed(f"{lab} of {student} could not be graded: {result.infrastructure_error}")
        graded = result.graded_notebook
        if graded is not None:
            for cell, ran in zip(nb.cells, graded.cells):
                if cell.cell_type == "code" and ran.cell_type == "code":
                    cell.outputs = ran.get("outputs", [])
            nb.cells.extend(graded.cells[len(nb.cells) :])  # test cells the student deleted, put back
        by_label = {c.label: c for c in result.checks}
        first = True
        for cell in nb.cells:
            label = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if cell.cell_type != "code" or label not in by_label or not cell.metadata["nbgrader"].get("grade"):
                continue
            check = by_label.pop(label)
            cell.outputs = []
            if first and result.notes:
                cell.outputs.append(
                    NotebookNode(
                        output_type="stream", name="stdout", text="".join(f"note: {n}\n" for n in result.notes)
                    )
                )
                first = False
            if check.passed:
                cell.outputs.append(NotebookNode(output_type="stream", name="stdout", text=check.message + "\n"))
            else:
                cell.outputs.append(
                    NotebookNode(
                        output_type="error",
                        ename="CheckFailed",
                        evalue=check.message,
                        traceback=[f"{label} failed", *check.message.splitlines()],
                    )
                )
        return nb, resources


class SanitizeMarkup(Preprocessor):
    """What the formgrader and the feedback show is the student's markup: the autograded
    notebook, rendered on the instructor's own server. Its markdown cells and HTML outputs are
    cleaned (tags outside SAFE_TAGS removed, scripts and styles with their content, event
    handlers and javascript: links dropped) and script outputs dropped. (nbgrader's formgrade
    template renders markdown unsanitized whatever HTMLExporter's sanitize_html says.)"""

    enabled = Bool(True).tag(config=True)
    SCRIPTED = ("application/javascript", "text/javascript", "application/vnd.jupyter.widget-view+json")
    MARKUP = ("text/html", "text/markdown", "image/svg+xml")

    def preprocess(self, nb: NotebookNode, resources: dict):
        for cell in nb.cells:
            if cell.cell_type == "markdown" and HTML_TAG.search(cell.source):
                cell.source = clean_html(cell.source)
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                for mime in [m for m in data if m in self.SCRIPTED]:
                    del data[mime]
                for mime in [m for m in data if m in self.MARKUP]:
                    text = data[mime] if isinstance(data[mime], str) else "".join(data[mime])
                    data[mime] = clean_html(text)
        return nb, resources


HTML_TAG = re.compile(r"<[A-Za-z!/?]")
# What a student's markup may keep: text formatting, lists, links, images, code and tables
# (pandas' HTML included); never scripts, styles, frames, forms or event handlers.
SAFE_TAGS = {
    "a",
    "abbr",
    "b",
    "blockquote",
    "br",
    "code",
    "dd",
    "del",
    "details",
    "div",
    "dl",
    "dt",
    "em",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "i",
    "img",
    "kbd",
    "li",
    "ol",
    "p",
    "pre",
    "s",
    "small",
    "span",
    "strong",
    "sub",
    "summary",
    "sup",
    "table",
    "caption",
    "thead",
    "tbody",
    "tfoot",
    "tr",
    "th",
    "td",
    "u",
    "ul",
}
SAFE_ATTRIBUTES = {
    "*": {"class", "title"},
    "a": {"href"},
    "img": {"src", "alt", "width", "height"},
    "th": {"colspan", "rowspan"},
    "td": {"colspan", "rowspan"},
    "table": {"border"},
}


def clean_html(text: str) -> str:
    """The markup with only SAFE_TAGS and SAFE_ATTRIBUTES left (other tags removed, their text
    kept; scripts and styles removed whole); links only to http(s), mailto and inline images, no
    javascript: URLs. By nh3 (Rust's Ammonia, maintained; bleach, which did this before, no
    longer is)."""
    return nh3.clean(
        text,
        tags=SAFE_TAGS,
        attributes=SAFE_ATTRIBUTES,
        url_schemes={"http", "https", "mailto", "data"},
        link_rel=None,
        attribute_filter=_inline_images_only,
    )


def _inline_images_only(tag: str, attribute: str, value: str) -> str | None:
    """data: URLs are for inline images (a plot's PNG); a link to one would open a page of the
    student's making."""
    if value.strip().lower().startswith("data:") and not (tag == "img" and attribute == "src"):
        return None
    return value
