"""Plain-text parsing, and the section assembly every parser shares.

Parsers emit ``Block``s (text, kind, heading level, pages) in reading order; ``assemble``
turns them into a ``ParsedDocument`` whose ``text`` is the blocks joined by blank lines, with
exact character offsets and heading paths, so no parser computes offsets on its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from core.records import ParsedDocument, Section, SectionKind
from ingest.decoding import decode_text

SECTION_SEPARATOR = "\n\n"
_BLANK_LINE = re.compile(r"\n[ \t]*\n\s*")
# About 200 model tokens of table text (numbers run ~2.5 characters a token): under the
# default 256-token chunk, so a group of rows is one chunk with its header.
TABLE_GROUP_CHARS = 500


@dataclass(frozen=True, slots=True)
class Block:
    """A parser's structural unit before offsets are known.

    ``level`` is the heading level (1 = top) for ``HEADING`` blocks and ignored otherwise.
    """

    text: str
    kind: SectionKind
    level: int = 0
    page_start: int | None = None
    page_end: int | None = None


def assemble(
    blocks: Iterable[Block],
    *,
    title: str | None = None,
    page_count: int = 0,
    warnings: tuple[str, ...] = (),
) -> ParsedDocument:
    """Join blocks into a ``ParsedDocument`` with exact offsets and heading paths.

    Args:
        blocks: Blocks in reading order; blank ones are skipped.
        title: The document title, if the parser found one.
        page_count: Pages in the source (0 for formats without pages).
        warnings: Warnings gathered while parsing.

    Returns:
        The parsed document; ``text[s.char_start:s.char_end] == s.text`` for every section.
    """
    headings: list[tuple[int, str]] = []
    sections: list[Section] = []
    parts: list[str] = []
    offset = 0
    for block in blocks:
        text = _clean(block)
        if not text:
            continue
        if block.kind is SectionKind.HEADING:
            # A heading closes every open heading at its level or deeper.
            while headings and headings[-1][0] >= block.level:
                headings.pop()
            headings.append((block.level, text))
        if parts:
            offset += len(SECTION_SEPARATOR)
        path = tuple(heading for _, heading in headings)
        sections.append(
            Section(
                text=text,
                kind=block.kind,
                heading_path=path,
                char_start=offset,
                char_end=offset + len(text),
                page_start=block.page_start,
                page_end=block.page_end if block.page_end is not None else block.page_start,
            )
        )
        parts.append(text)
        offset += len(text)
    return ParsedDocument(
        text=SECTION_SEPARATOR.join(parts),
        sections=tuple(sections),
        title=title,
        page_count=page_count,
        warnings=warnings,
    )


def _clean(block: Block) -> str:
    if block.kind is SectionKind.CODE:
        # Leading indentation is meaningful in code; only blank edge lines go.
        return block.text.strip("\n").rstrip()
    text = block.text.strip()
    if block.kind is SectionKind.HEADING:
        return " ".join(text.split())
    return text


def markdown_table(rows: list[list[str]]) -> str:
    """Render rows of cell strings as a Markdown pipe table, the first row as header.

    Args:
        rows: Non-empty list of rows; short rows are padded with empty cells.

    Returns:
        The table as Markdown, one row per line.
    """
    width = max(len(row) for row in rows)
    padded = [row + [""] * (width - len(row)) for row in rows]
    lines = ["| " + " | ".join(padded[0]) + " |", "|" + "---|" * width]
    lines.extend("| " + " | ".join(row) + " |" for row in padded[1:])
    return "\n".join(lines)


def table_blocks(
    rows: list[list[str]], *, page: int | None = None, group_chars: int = TABLE_GROUP_CHARS
) -> list[Block]:
    """A table as Markdown ``TABLE`` blocks of whole rows, each repeating the header row.

    A long table is cut between rows into groups of about ``group_chars`` characters, so the
    chunker finds pieces that fit a chunk (it cuts a table only between lines) and every
    chunk of the table starts with its header: a chunk of rows 400-420 still says what its
    columns are.

    Args:
        rows: The table's rows of cell text, the first row the header; ``|`` and line breaks
            in cells are escaped here.
        page: The page (slide, sheet) the table is on.
        group_chars: The size a group of rows grows to before the next starts.

    Returns:
        One block per group of rows (one for a short table), none for a table without text.
    """
    cleaned = [[_cell_text(cell) for cell in row] for row in rows]
    cleaned = [row for row in cleaned if any(row)]
    if not cleaned:
        return []
    width = max(len(row) for row in cleaned)
    padded = [row + [""] * (width - len(row)) for row in cleaned]
    header, body = padded[0], padded[1:] or [[""] * width]
    blocks: list[Block] = []
    group: list[list[str]] = []
    size = 0
    for row in body:
        row_chars = sum(len(cell) + 3 for cell in row)
        if group and size + row_chars > group_chars:
            blocks.append(Block(markdown_table([header, *group]), SectionKind.TABLE, page_start=page))
            group, size = [], 0
        group.append(row)
        size += row_chars
    blocks.append(Block(markdown_table([header, *group]), SectionKind.TABLE, page_start=page))
    return blocks


def outline_block(items: list[tuple[int, str]], *, page: int | None = None) -> Block | None:
    """A text box's paragraphs (indent level, text) on a slide: one paragraph is a paragraph;
    several are a bullet list in all but name, indented by level."""
    if len(items) > 1:
        lines = "\n".join("  " * level + "- " + text for level, text in items)
        return Block(lines, SectionKind.LIST, page_start=page)
    if items:
        return Block(items[0][1], SectionKind.PARAGRAPH, page_start=page)
    return None


def top_heading(blocks: list[Block]) -> str | None:
    """The first heading of the top level used: a document's title when it names none."""
    headings = [block for block in blocks if block.kind is SectionKind.HEADING]
    if not headings:
        return None
    top = min(block.level for block in headings)
    return next(" ".join(block.text.split()) for block in headings if block.level == top)


def _cell_text(cell: str) -> str:
    return " ".join(cell.split()).replace("|", "\\|")


def split_paragraphs(text: str) -> list[str]:
    """Split text on blank lines, dropping empty paragraphs."""
    return [part.strip() for part in _BLANK_LINE.split(text) if part.strip()]


def parse(data: bytes) -> ParsedDocument:
    """Parse plain text: one paragraph section per blank-line separated block.

    Args:
        data: The raw bytes, in any encoding ``decode_text`` can handle.

    Returns:
        The parsed document, with decoding warnings attached.
    """
    text, warnings = decode_text(data)
    blocks = [Block(paragraph, SectionKind.PARAGRAPH) for paragraph in split_paragraphs(text)]
    return assemble(blocks, warnings=warnings)
