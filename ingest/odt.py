"""ODT (OpenDocument text) parsing: headings by outline level, lists, tables.

What is kept, deliberately, as for DOCX (``ingest/docx.py``):

- the body in reading order; ``text:h`` is a heading at its ``text:outline-level`` (1 when
  absent, at most 6), so every chunk carries its heading path; sections and frames anchored
  in the body are read in place;
- a ``text:list`` is one list block, an item per line (``- ``), nested lists indented;
- tables as Markdown with the header row repeated per group of rows (``table_blocks``);
- tracked changes read as accepted: inserted text is in the body already, deleted text
  lives only in ``text:tracked-changes`` (the change log), which is not read.

Dropped, deliberately: page headers and footers (they live in ``styles.xml``, which is not
read), comments (``office:annotation``; their count is a ``comments_dropped`` warning),
foot- and endnotes, and generated indexes (a table of contents repeats the headings).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from core.errors import ParseError
from core.records import ParsedDocument, SectionKind
from ingest.limits import check_deadline
from ingest.opendocument import (
    LIST,
    LIST_HEADER,
    LIST_ITEM,
    MAX_DEPTH,
    TABLE,
    H,
    Notes,
    P,
    body,
    inline_text,
    meta_title,
    open_package,
    parse_part,
    q,
    table_rows,
)
from ingest.sheets import CellCounter
from ingest.text import Block, assemble, table_blocks, top_heading

_MAX_LEVEL = 6
_TITLE_STYLE = "Title"
_STYLE_NAME, _PARENT = q("style", "name"), q("style", "parent-style-name")
_DROPPED_BLOCKS = frozenset(
    {q("text", "tracked-changes"), q("office", "forms")}
    | {
        q("text", name)
        for name in ("sequence-decls", "variable-decls", "user-field-decls", "dde-connection-decls")
    }
    | {
        q("text", name)
        for name in (
            "table-of-content",
            "alphabetical-index",
            "illustration-index",
            "table-index",
            "object-index",
            "user-index",
            "bibliography",
        )
    }
)


def parse(data: bytes) -> ParsedDocument:
    """Parse an ODT into headings, paragraphs, lists and Markdown tables.

    Args:
        data: The ODT bytes.

    Returns:
        The parsed document; the title is ``meta.xml``'s ``dc:title``, else the first
        ``Title``-style paragraph, else the first top-level heading.

    Raises:
        ParseError: the container's codes (``encrypted_document``, ``zip_bomb``,
            ``unsafe_xml``, ``corrupt_document``), ``corrupt_document`` for a package with no
            text body, ``too_many_cells`` for tables past the spreadsheet cell cap.
    """
    with open_package(data) as archive:
        content = parse_part(archive, "content.xml")
        title = meta_title(archive)
    reader = _Reader(_title_styles(content))
    blocks = list(reader.blocks(body(content, "text"), 0))
    return assemble(
        blocks,
        title=title or reader.title or top_heading(blocks),
        warnings=reader.notes.warnings(),
    )


def _title_styles(content: ET.Element) -> frozenset[str]:
    """``Title`` and the automatic styles derived from it (``P1`` with parent ``Title``):
    a writer saves a title paragraph under an automatic style whenever it is formatted."""
    names = {_TITLE_STYLE}
    styles = content.find(q("office", "automatic-styles"))
    for style in styles if styles is not None else ():
        if style.get(_PARENT) == _TITLE_STYLE and style.get(_STYLE_NAME):
            names.add(style.get(_STYLE_NAME, ""))
    return frozenset(names)


class _Reader:
    """One document's walk: the blocks, the first title paragraph, what was dropped."""

    def __init__(self, title_styles: frozenset[str]) -> None:
        self.title_styles = title_styles
        self.title: str | None = None
        self.notes = Notes()
        self.cells = CellCounter()

    def blocks(self, container: ET.Element, depth: int) -> list[Block]:
        if depth > MAX_DEPTH:
            raise ParseError(f"sections nested more than {MAX_DEPTH} deep", code="corrupt_document")
        out: list[Block] = []
        for child in container:
            check_deadline()
            tag = child.tag
            if tag == H:
                out.append(self._heading(child))
            elif tag == P:
                out.append(self._paragraph(child))
            elif tag == LIST:
                lines = self._list_lines(child, 0)
                out.append(Block("\n".join(lines), SectionKind.LIST))
            elif tag == TABLE:
                out.extend(table_blocks(self.cells.rows(table_rows(child, self._cell))))
            elif tag not in _DROPPED_BLOCKS:  # text:section, a frame anchored to the page
                out.extend(self.blocks(child, depth + 1))
        return out

    def _heading(self, element: ET.Element) -> Block:
        try:
            level = int(element.get(q("text", "outline-level"), "1"))
        except ValueError:
            level = 1
        text = inline_text(element, self.notes)
        return Block(text, SectionKind.HEADING, level=min(max(level, 1), _MAX_LEVEL))

    def _paragraph(self, element: ET.Element) -> Block:
        text = inline_text(element, self.notes)
        if self.title is None and text and element.get(q("text", "style-name")) in self.title_styles:
            self.title = " ".join(text.split())
        return Block(text, SectionKind.PARAGRAPH)

    def _list_lines(self, element: ET.Element, level: int) -> list[str]:
        """An item's first paragraph is its bullet; its further paragraphs continue it."""
        if level > MAX_DEPTH:
            raise ParseError(f"lists nested more than {MAX_DEPTH} deep", code="corrupt_document")
        lines: list[str] = []
        indent = "  " * level
        for item in element:
            if item.tag not in (LIST_ITEM, LIST_HEADER):
                continue
            bullet = "- "
            for child in item:
                if child.tag == LIST:
                    lines.extend(self._list_lines(child, level + 1))
                    continue
                text = " ".join(inline_text(child, self.notes).split())
                if text:
                    lines.append(indent + bullet + text)
                    bullet = "  "
        return lines

    def _cell(self, cell: ET.Element) -> str:
        return inline_text(cell, self.notes)
