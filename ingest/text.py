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
