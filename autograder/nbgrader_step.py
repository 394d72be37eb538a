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
import html
import re

import nh3
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.filters.strings import strip_files_prefix
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from nbgrader.utils import compute_checksum
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
    notebook, rendered on the instructor's own server, where a script of the student's (or a
    `javascript:` link the instructor clicks) would run with the instructor's session.

    So what is cleaned is what those pages show, not the markdown it comes from: each markdown
    cell (every one) and each text/markdown output is rendered as nbgrader's formgrade and
    feedback templates render it (nbconvert's markdown2html, then strip_files_prefix), the HTML
    is cleaned (clean_html), and that HTML is stored in its place, written so that the
    templates' markdown2html passes it through unchanged (_as_one_html_block); each is checked
    by rendering it again as the templates do, and shown as plain text if it would not come out
    exactly as cleaned. HTML and SVG outputs are cleaned, script and widget outputs dropped,
    and output metadata the templates write into a tag unquoted (an image's width, height)
    kept only when it is a number. (nbgrader's templates render markdown unsanitized whatever
    HTMLExporter's sanitize_html says.)"""

    enabled = Bool(True).tag(config=True)
    SCRIPTED = ("application/javascript", "text/javascript", "application/vnd.jupyter.widget-view+json")
    MARKUP = ("text/html", "image/svg+xml")

    def preprocess(self, nb: NotebookNode, resources: dict):
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                grading = cell.get("metadata", {}).get("nbgrader", {})
                # An answer left as released (its checksum, the gradebook's, still matches) is
                # "No response." for nbgrader: it stays so once its markup is rewritten.
                released = grading.get("checksum")
                unanswered = released is not None and "grade_id" in grading and released == _checksum(cell)
                cell.source = shown_markdown(cell.source, cell.get("attachments"))
                if unanswered:
                    grading["checksum"] = _checksum(cell)
            for output in cell.get("outputs", []):
                self._clean_output(output)
        return nb, resources

    def _clean_output(self, output: NotebookNode) -> None:
        data = output.get("data", {})
        for mime in [m for m in data if m in self.SCRIPTED]:
            del data[mime]
        for mime in [m for m in data if m in self.MARKUP]:
            data[mime] = clean_html(_text(data[mime]))
        if "text/markdown" in data:
            data["text/markdown"] = shown_markdown(_text(data["text/markdown"]))
        output.pop("svg_filename", None)  # an <img src> of its own, not nbformat's
        metadata = output.get("metadata")
        if isinstance(metadata, dict):
            for level in [metadata, *(v for v in metadata.values() if isinstance(v, dict))]:
                level.pop("filenames", None)  # <img src=...> from the metadata
                for key in ("width", "height"):  # written as width={{ width }}, unquoted
                    if key in level and not _is_number(level[key]):
                        del level[key]


def _text(value) -> str:
    return value if isinstance(value, str) else "".join(value)


def _is_number(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    return isinstance(value, str) and re.fullmatch(r"[0-9]{1,6}(\.[0-9]{1,3})?", value) is not None


def _checksum(cell: NotebookNode) -> str | None:
    try:
        return compute_checksum(cell)
    except (KeyError, TypeError, ValueError):  # not an nbgrader cell after all
        return None


def render_markdown(source: str, attachments: dict | None = None, anchors: bool = True) -> str:
    """The HTML of a markdown text as nbconvert's HTMLExporter.markdown2html makes it (the
    filter the formgrade and feedback templates use): mistune with nbconvert's math, tables,
    autolinks, ...; images from the cell's attachments inlined; without `anchors`, headings
    have no ¶ link to themselves."""
    renderer = IPythonRenderer(escape=False, attachments=attachments or {}, exclude_anchor_links=not anchors)
    return MarkdownWithMath(renderer=renderer).render(source)


def as_shown(source: str, attachments: dict | None = None, anchors: bool = True) -> str:
    """What the formgrade and feedback templates show of a markdown cell's source:
    `cell.source | markdown2html | strip_files_prefix` (HTMLExporter's defaults)."""
    return strip_files_prefix(render_markdown(source, attachments, anchors))


def shown_markdown(source: str, attachments: dict | None = None) -> str:
    """A markdown text replaced by the cleaned HTML of what it renders to, in a form that
    renders to exactly that HTML (checked, by rendering it again): the student's text, lists,
    tables, code, links and images, nothing that runs. Markdown that cannot be so (an image
    from a missing attachment, ...) is shown as its text."""
    if not source.strip():
        return ""
    candidates = []
    try:
        # Headings keep no id (an id of the student's choosing could stand for one of the
        # formgrader's own), so no ¶ link to one either.
        candidates.append(clean_html(as_shown(source, attachments, anchors=False)))
    except Exception:  # mistune, or an image from a missing attachment: the text is still there
        pass
    # the text as it is (strip_files_prefix would take `files/` out of it, `&#47;` is a /)
    candidates.append("<pre>" + html.escape(source, quote=False).replace("files/", "files&#47;") + "</pre>")
    for cleaned in candidates:
        stored = _as_one_html_block(cleaned)
        if as_shown(stored, attachments).strip() == stored:
            return stored
    return ""


def _as_one_html_block(cleaned: str) -> str:
    """The cleaned HTML as one HTML block of CommonMark's kind 6 (a <div> with no blank line),
    which markdown2html passes through untouched: no markdown in it is read again. A blank
    line (which would end the block) keeps its line break as a character reference, which the
    browser reads as the same character, in text, in an attribute or in a <pre>; so does a
    carriage return (mistune makes it a line break)."""
    cleaned = cleaned.replace("\r", "&#13;")
    cleaned = re.sub(r"(?m)^([ \t\v\f]*)\n", r"\1&#10;", cleaned)
    return "<div>" + cleaned + "</div>"


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
    kept; scripts and styles removed whole); links and images only to http(s), mailto and
    relative URLs, and inline raster images (_safe_url). By nh3 (Rust's Ammonia, maintained;
    bleach, which did this before, no longer is)."""
    return nh3.clean(
        text,
        tags=SAFE_TAGS,
        attributes=SAFE_ATTRIBUTES,
        url_schemes={"http", "https", "mailto", "data"},  # data: only as _safe_url allows
        link_rel=None,
        attribute_filter=_safe_url,
    )


# What a browser ignores in a URL (the URL standard): tabs and line breaks anywhere, control
# characters and spaces around it. `jav&#9;ascript:` is a javascript: URL.
_URL_IGNORED = re.compile(r"[\t\n\r]")
_C0_AND_SPACE = "".join(map(chr, range(0x21)))
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_INLINE_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*", re.IGNORECASE)
# nbconvert's strip_files_prefix, which the templates apply after markdown2html, takes
# `files/` off the start of every href and src: `files/javascript:...` would become a script.
_FILES_PREFIX = re.compile(r"/?files/")


def _safe_url(tag: str, attribute: str, value: str) -> str | None:
    """href and src: data: URLs only for inline raster images (a plot's PNG, a pasted
    screenshot); a link to one, or an SVG or HTML one, would open a page of the student's
    making. None that strip_files_prefix would change."""
    if attribute not in ("href", "src"):
        return value
    url = _URL_IGNORED.sub("", value).strip(_C0_AND_SPACE)
    if _FILES_PREFIX.match(value) or _FILES_PREFIX.match(url):
        return None
    scheme = _SCHEME.match(url)
    if scheme and scheme.group(1).lower() == "data":
        return url if tag == "img" and attribute == "src" and _INLINE_IMAGE.fullmatch(url) else None
    return value
