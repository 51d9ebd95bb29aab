"""DOCX parsing with python-docx: headings from styles and outline levels, lists, tables.

What is kept, deliberately:

- the body in reading order, paragraphs and tables interleaved; headings are paragraphs
  whose style (or the paragraph itself) carries an outline level, or a ``Heading N`` /
  ``Title`` style;
- tracked changes read as if accepted: inserted runs are text, deleted runs are not (Word's
  own "final" view, what a reader of the document sees);
- tables as Markdown with the header row repeated per group of rows (``table_blocks``).

Dropped, deliberately: page headers and footers (repeated on every page, as the PDF parser
drops running headers), comments (talk about the text, not the text; their count is a
warning), footnote bodies and field codes.
"""

from __future__ import annotations

import io
import re
from typing import Any

from core.errors import ParseError
from core.records import ParsedDocument, SectionKind
from ingest.archive import open_zip
from ingest.limits import check_deadline
from ingest.text import Block, assemble, table_blocks, top_heading

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_TEXT_TAGS = {f"{_W}t": None, f"{_W}tab": "\t", f"{_W}br": "\n", f"{_W}cr": "\n", f"{_W}noBreakHyphen": "-"}
_SKIPPED = {f"{_W}del", f"{_W}moveFrom", f"{_W}instrText", f"{_W}delText", f"{_W}fldSimple"}
_HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)
_MAX_LEVEL = 6


def parse(data: bytes) -> ParsedDocument:
    """Parse a DOCX into headings, paragraphs, lists and Markdown tables.

    Args:
        data: The DOCX bytes.

    Returns:
        The parsed document; the title is the core properties' title, else the first
        ``Title`` paragraph, else the first top-level heading.

    Raises:
        ParseError: the container's codes (``encrypted_document``, ``zip_bomb``,
            ``unsafe_xml``, ``corrupt_document``), or ``corrupt_document`` for a ZIP that is
            not a Word document.
    """
    open_zip(data).close()
    docx = _import()
    try:
        document = docx.Document(io.BytesIO(data))
    except (KeyError, ValueError) as exc:  # no word/document.xml, or the wrong content type
        raise ParseError(f"not a Word document ({type(exc).__name__})", code="corrupt_document") from exc
    blocks: list[Block] = []
    title: str | None = None
    levels: dict[str, int] = {}
    for item in document.iter_inner_content():
        check_deadline()
        if isinstance(item, docx.table.Table):
            blocks.extend(table_blocks(_table_rows(item)))
            continue
        text = paragraph_text(item._p)
        if not text.strip():
            continue
        level, is_title = _level(item, levels)
        if is_title and title is None:
            title = " ".join(text.split())
        if level:
            blocks.append(Block(text, SectionKind.HEADING, level=level))
        elif _is_list(item):
            blocks.append(Block("- " + text.strip(), SectionKind.LIST))
        else:
            blocks.append(Block(text, SectionKind.PARAGRAPH))
    warnings = _comment_warning(document)
    core_title = " ".join((document.core_properties.title or "").split())
    return assemble(blocks, title=core_title or title or top_heading(blocks), warnings=warnings)


def _import() -> Any:
    try:
        import docx
        import docx.table
    except ImportError as exc:
        raise ParseError(
            "DOCX support needs python-docx: pip install python-docx", code="parser_unavailable"
        ) from exc
    return docx


def paragraph_text(element: Any) -> str:
    """The text of a ``w:p`` (or any) element with tracked insertions, without deletions."""
    parts: list[str] = []
    _collect(element, parts)
    return "".join(parts)


def _collect(element: Any, parts: list[str]) -> None:
    for child in element:
        tag = child.tag
        if tag in _SKIPPED:
            continue
        if tag in _TEXT_TAGS:
            replacement = _TEXT_TAGS[tag]
            parts.append(child.text or "" if replacement is None else replacement)
            continue
        _collect(child, parts)


def _level(paragraph: Any, cache: dict[str, int]) -> tuple[int, bool]:
    """The heading level (0 for body text) and whether the paragraph is the Title style."""
    own = _outline_level(paragraph._p.pPr)
    if own is not None:
        return own, False
    style = paragraph.style
    name = (style.name or "") if style is not None else ""
    if name not in cache:
        cache[name] = _style_level(style, name)
    is_title = name.lower() == "title"
    return (1 if is_title else cache[name]), is_title


def _style_level(style: Any, name: str) -> int:
    seen = 0
    while style is not None and seen < 10:  # based-on chains are short; a loop is not
        level = _outline_level(style.element.pPr)
        if level is not None:
            return level
        match = _HEADING_STYLE.match(style.name or "")
        if match:
            return min(max(int(match.group(1)), 1), _MAX_LEVEL)
        style, seen = style.base_style, seen + 1
    return 0


def _outline_level(ppr: Any) -> int | None:
    """``w:outlineLvl`` 0-8 is a heading level 1-9 (9 is body text)."""
    if ppr is None:
        return None
    found = ppr.find(f"{_W}outlineLvl")
    if found is None:
        return None
    try:
        value = int(found.get(f"{_W}val", "9"))
    except ValueError:
        return None
    return min(value + 1, _MAX_LEVEL) if 0 <= value < 9 else None


def _is_list(paragraph: Any) -> bool:
    ppr = paragraph._p.pPr
    if ppr is not None and ppr.find(f"{_W}numPr") is not None:
        return True
    style = paragraph.style
    return style is not None and (style.name or "").lower().startswith("list")


def _table_rows(table: Any) -> list[list[str]]:
    rows: list[list[str]] = []
    for row in table.rows:
        check_deadline()
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            # A merged cell comes back once per grid column it spans: keep one copy.
            text = (
                "" if cell._tc is previous else " ".join(paragraph_text(p) for p in cell._tc.iter(f"{_W}p"))
            )
            previous = cell._tc
            cells.append(text)
        rows.append(cells)
    return rows


def _comment_warning(document: Any) -> tuple[str, ...]:
    try:
        count = len(list(document.comments))
    except (AttributeError, KeyError, ValueError):
        return ()
    return (f"comments_dropped: {count}",) if count else ()
