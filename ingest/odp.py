"""ODP (OpenDocument presentation) parsing: one section per slide, as PPTX is read.

Each ``draw:page`` is a slide; its title frame (``presentation:class="title"``) is a level-1
heading (``Slide N`` when it has none) and the slide number is the section's page, so a
result's ``page_start``/``page_end`` name its slides. Shapes are read top to bottom, then left
to right (``svg:y``, ``svg:x``); grouped shapes (``draw:g``) inside their group. A text box of
several paragraphs or a list is a bullet list indented by level; tables are Markdown tables.
Speaker notes (``presentation:notes``) follow the body as a paragraph starting ``Notes:``.
Master pages (footers, slide numbers) live in ``styles.xml``, which is not read.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator

from core.errors import ParseError
from core.records import ParsedDocument, SectionKind
from ingest.limits import check_deadline
from ingest.opendocument import (
    LIST,
    LIST_HEADER,
    LIST_ITEM,
    MAX_DEPTH,
    NS,
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
from ingest.pptx import MAX_SLIDES
from ingest.sheets import CellCounter
from ingest.text import Block, assemble, outline_block, table_blocks

_PAGE, _GROUP, _FRAME = q("draw", "page"), q("draw", "g"), q("draw", "frame")
_NOTES, _CLASS = q("presentation", "notes"), q("presentation", "class")
_DRAW = "{" + NS["draw"] + "}"  # shapes; presentation:notes, office:forms and anim:* are not
_LENGTH = re.compile(r"^\s*(-?[0-9.]+)\s*(cm|mm|in|pt|pc|px)?\s*$")
_MM = {"cm": 10.0, "mm": 1.0, "in": 25.4, "pt": 25.4 / 72, "pc": 25.4 / 6, "px": 25.4 / 96, None: 1.0}


def parse(data: bytes) -> ParsedDocument:
    """Parse an ODP into one titled section per slide.

    Returns:
        The parsed document with ``page_count`` = slides and each section's page = its slide;
        the title is ``meta.xml``'s ``dc:title``, else the first slide's title.

    Raises:
        ParseError: the container's codes (``encrypted_document``, ``zip_bomb``,
            ``unsafe_xml``, ``corrupt_document``), ``corrupt_document`` for a package with no
            presentation body, ``too_many_slides`` past PPTX's ``MAX_SLIDES``.
    """
    with open_package(data) as archive:
        content = parse_part(archive, "content.xml")
        core_title = meta_title(archive)
    slides = body(content, "presentation").findall(_PAGE)
    if len(slides) > MAX_SLIDES:
        raise ParseError(f"the deck has {len(slides)} slides (at most {MAX_SLIDES})", code="too_many_slides")
    notes, cells = Notes(), CellCounter()
    blocks: list[Block] = []
    first_title: str | None = None
    for number, slide in enumerate(slides, start=1):
        check_deadline()
        shapes = list(_ordered(slide, 0))
        titles = [shape for shape in shapes if shape.get(_CLASS) == "title"]
        title = " ".join(" ".join(inline_text(t, notes).split()) for t in titles).strip()
        first_title = first_title or title or None
        blocks.append(Block(title or f"Slide {number}", SectionKind.HEADING, level=1, page_start=number))
        for shape in shapes:
            if shape.get(_CLASS) != "title":
                blocks.extend(_shape_blocks(shape, number, notes, cells))
        spoken = _speaker_notes(slide, notes)
        if spoken:
            blocks.append(Block("Notes: " + spoken, SectionKind.PARAGRAPH, page_start=number))
    return assemble(
        blocks, title=core_title or first_title, page_count=len(slides), warnings=notes.warnings()
    )


def _ordered(container: ET.Element, depth: int) -> Iterator[ET.Element]:
    """Shapes top to bottom, then left to right; a group's members in place of the group,
    the group placed where its top-left member is."""
    if depth > MAX_DEPTH:
        return
    placed: list[tuple[tuple[float, float], list[ET.Element]]] = []
    for shape in container:
        if not shape.tag.startswith(_DRAW):
            continue
        if shape.tag == _GROUP:
            members = list(_ordered(shape, depth + 1))
            if members:
                placed.append((min(_position(m) for m in members), members))
        else:
            placed.append((_position(shape), [shape]))
    placed.sort(key=lambda item: item[0])
    for _, members in placed:
        yield from members


def _position(shape: ET.Element) -> tuple[float, float]:
    return _millimetres(shape.get(q("svg", "y"))), _millimetres(shape.get(q("svg", "x")))


def _millimetres(value: str | None) -> float:
    match = _LENGTH.match(value or "")
    if match is None:
        return 0.0
    try:
        return float(match.group(1)) * _MM[match.group(2)]
    except ValueError:
        return 0.0


def _shape_blocks(shape: ET.Element, slide: int, notes: Notes, cells: CellCounter) -> list[Block]:
    """A frame's table, or the paragraphs of its text box (or of a shape's own text)."""
    blocks: list[Block] = []
    for table in shape.findall(TABLE):
        blocks.extend(
            table_blocks(cells.rows(table_rows(table, lambda c: inline_text(c, notes))), page=slide)
        )
    if blocks:
        return blocks
    block = outline_block(list(_items(shape, 0, notes)), page=slide)
    return [block] if block is not None else []


def _items(container: ET.Element, level: int, notes: Notes, depth: int = 0) -> Iterator[tuple[int, str]]:
    """(indent level, text) of every paragraph under ``container``; a list item's level is
    its list's nesting (the outline of a slide body)."""
    if depth > MAX_DEPTH:
        raise ParseError(f"shapes nested more than {MAX_DEPTH} deep", code="corrupt_document")
    nested = level + 1 if container.tag in (LIST_ITEM, LIST_HEADER) else level
    for child in container:
        if child.tag in (P, H):
            text = " ".join(inline_text(child, notes).split())
            if text:
                yield min(level, 8), text
        elif child.tag == LIST:
            for item in child:
                if item.tag in (LIST_ITEM, LIST_HEADER):
                    yield from _items(item, nested, notes, depth + 1)
        else:  # draw:text-box inside a frame
            yield from _items(child, level, notes, depth + 1)


def _speaker_notes(slide: ET.Element, notes: Notes) -> str:
    found = slide.find(_NOTES)
    if found is None:
        return ""
    texts = [text for frame in found.iter(_FRAME) for _, text in _items(frame, 0, notes)]
    return " ".join(texts)
