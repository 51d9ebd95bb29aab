"""Markdown parsing: a line-based block scanner, no external Markdown library.

Recognises ATX and setext headings, fenced code (kept verbatim, fences included), pipe
tables (kept as Markdown), lists and paragraphs. Inline markup is left as written: it is
readable to both people and embedding models, and keeping it preserves exact offsets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.records import ParsedDocument, SectionKind
from ingest.decoding import decode_text
from ingest.text import Block, assemble

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")
_TABLE_DELIMITER = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_FRONT_MATTER_END = re.compile(r"^(?:---|\.\.\.)[ \t]*$")


@dataclass(frozen=True, slots=True)
class _Scan:
    """One block found by the scanner and the index of the line after it."""

    block: Block | None
    next_line: int


def parse(data: bytes) -> ParsedDocument:
    """Parse Markdown into headings, paragraphs, lists, tables and code blocks.

    Args:
        data: The raw bytes, in any encoding ``decode_text`` can handle.

    Returns:
        The parsed document; the title is the first level-1 heading, else the first heading.
    """
    text, warnings = decode_text(data)
    lines = text.split("\n")
    blocks: list[Block] = []
    index = _skip_front_matter(lines)
    while index < len(lines):
        scan = _scan_block(lines, index)
        if scan.block is not None:
            blocks.append(scan.block)
        index = scan.next_line
    return assemble(blocks, title=_title(blocks), warnings=warnings)


def _scan_block(lines: list[str], index: int) -> _Scan:
    line = lines[index]
    if not line.strip() or _THEMATIC_BREAK.match(line):
        return _Scan(None, index + 1)
    atx = _ATX.match(line)
    if atx:
        return _Scan(Block(atx.group(2) or "", SectionKind.HEADING, level=len(atx.group(1))), index + 1)
    fence = _FENCE.match(line)
    if fence:
        return _scan_fence(lines, index, fence.group(1))
    if _is_table_start(lines, index):
        end = index + 2
        while end < len(lines) and lines[end].strip() and "|" in lines[end]:
            end += 1
        return _Scan(Block("\n".join(lines[index:end]), SectionKind.TABLE), end)
    if _LIST_ITEM.match(line):
        return _scan_list(lines, index)
    return _scan_paragraph(lines, index)


def _scan_fence(lines: list[str], index: int, fence: str) -> _Scan:
    """A fenced code block runs to a closing fence of the same character, at least as long."""
    end = index + 1
    closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
    while end < len(lines) and not closing.match(lines[end]):
        end += 1
    # An unclosed fence runs to the end of the document, as CommonMark specifies.
    stop = min(end + 1, len(lines))
    return _Scan(Block("\n".join(lines[index:stop]), SectionKind.CODE), stop)


def _scan_list(lines: list[str], index: int) -> _Scan:
    """A list continues through items, indented continuation lines and single blank lines."""
    end = index + 1
    while end < len(lines):
        line = lines[end]
        if _THEMATIC_BREAK.match(line):
            break
        if not line.strip():
            following = lines[end + 1] if end + 1 < len(lines) else ""
            if (
                not (_LIST_ITEM.match(following) or following.startswith((" ", "\t")))
                or not following.strip()
            ):
                break
        elif not (_LIST_ITEM.match(line) or line.startswith((" ", "\t"))) and _interrupts(lines, end):
            break
        end += 1
    return _Scan(Block("\n".join(lines[index:end]), SectionKind.LIST), end)


def _scan_paragraph(lines: list[str], index: int) -> _Scan:
    end = index + 1
    while end < len(lines) and lines[end].strip():
        setext = _SETEXT.match(lines[end])
        if setext:
            level = 1 if setext.group(1).startswith("=") else 2
            heading = " ".join(line.strip() for line in lines[index:end])
            return _Scan(Block(heading, SectionKind.HEADING, level=level), end + 1)
        if _interrupts(lines, end) or (_LIST_ITEM.match(lines[end]) and not lines[end].startswith(" ")):
            break
        end += 1
    return _Scan(Block("\n".join(lines[index:end]), SectionKind.PARAGRAPH), end)


def _interrupts(lines: list[str], index: int) -> bool:
    """Whether the line starts a block that ends the paragraph or list before it."""
    line = lines[index]
    return bool(_ATX.match(line) or _FENCE.match(line) or _is_table_start(lines, index))


def _is_table_start(lines: list[str], index: int) -> bool:
    return (
        "|" in lines[index]
        and index + 1 < len(lines)
        and "|" in lines[index + 1]
        and bool(_TABLE_DELIMITER.match(lines[index + 1]))
    )


def _skip_front_matter(lines: list[str]) -> int:
    """YAML front matter is metadata, not content: skip it when it is closed."""
    if not lines or lines[0].strip() != "---":
        return 0
    for index in range(1, len(lines)):
        if _FRONT_MATTER_END.match(lines[index]):
            return index + 1
    return 0


def _title(blocks: list[Block]) -> str | None:
    headings = [block for block in blocks if block.kind is SectionKind.HEADING and block.text.strip()]
    for block in headings:
        if block.level == 1:
            return block.text.strip()
    return headings[0].text.strip() if headings else None
