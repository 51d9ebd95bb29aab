"""PPTX parsing with python-pptx: one section per slide (title, body, tables, speaker notes).

Each slide's title is a level-1 heading (``Slide N`` when it has none), so every chunk of
the slide carries it as its section path, and the slide number is the section's page: a
result's ``page_start``/``page_end`` name the slides it came from. Shapes are read top to
bottom, left to right; grouped shapes are read inside their group. Speaker notes follow the
slide's body as a paragraph starting ``Notes:``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from core.errors import ParseError
from core.records import ParsedDocument, SectionKind
from ingest.archive import open_zip
from ingest.limits import check_deadline
from ingest.text import Block, assemble, outline_block, table_blocks

MAX_SLIDES = 5000
_MAX_GROUP_DEPTH = 20


def parse(data: bytes) -> ParsedDocument:
    """Parse a PPTX into one titled section per slide.

    Args:
        data: The PPTX bytes.

    Returns:
        The parsed document with ``page_count`` = slides and each section's page = its slide;
        the title is the core properties' title, else the first slide's title.

    Raises:
        ParseError: the container's codes (``encrypted_document``, ``zip_bomb``,
            ``unsafe_xml``, ``corrupt_document``), ``corrupt_document`` for a ZIP that is not
            a presentation, ``too_many_slides`` past ``MAX_SLIDES``.
    """
    open_zip(data).close()
    pptx, group = _import()
    try:
        presentation = pptx.Presentation(io.BytesIO(data))
    except (KeyError, ValueError) as exc:
        raise ParseError(f"not a PowerPoint file ({type(exc).__name__})", code="corrupt_document") from exc
    slides = presentation.slides
    if len(slides) > MAX_SLIDES:
        raise ParseError(f"the deck has {len(slides)} slides (at most {MAX_SLIDES})", code="too_many_slides")
    blocks: list[Block] = []
    first_title: str | None = None
    for number, slide in enumerate(slides, start=1):
        check_deadline()
        title_shape = slide.shapes.title
        title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
        first_title = first_title or title or None
        blocks.append(Block(title or f"Slide {number}", SectionKind.HEADING, level=1, page_start=number))
        for shape in _ordered(slide.shapes, group, 0):
            if title_shape is not None and shape.shape_id == title_shape.shape_id:
                continue
            blocks.extend(_shape_blocks(shape, number))
        notes = _notes(slide)
        if notes:
            blocks.append(Block("Notes: " + notes, SectionKind.PARAGRAPH, page_start=number))
    core_title = " ".join((presentation.core_properties.title or "").split())
    return assemble(blocks, title=core_title or first_title, page_count=len(slides))


def _import() -> tuple[Any, Any]:
    """python-pptx and its group shape type."""
    try:
        import pptx
        from pptx.enum.shapes import MSO_SHAPE_TYPE
    except ImportError as exc:
        raise ParseError(
            "PPTX support needs python-pptx: pip install python-pptx", code="parser_unavailable"
        ) from exc
    return pptx, MSO_SHAPE_TYPE.GROUP


def _ordered(shapes: Any, group: Any, depth: int) -> Iterator[Any]:
    """Shapes top to bottom, then left to right; a group's members in place of the group."""
    if depth > _MAX_GROUP_DEPTH:
        return
    for shape in sorted(shapes, key=lambda s: (s.top or 0, s.left or 0)):
        if shape.shape_type == group:
            yield from _ordered(shape.shapes, group, depth + 1)
        else:
            yield shape


def _shape_blocks(shape: Any, slide: int) -> list[Block]:
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
        return table_blocks(rows, page=slide)
    if not getattr(shape, "has_text_frame", False) or not shape.has_text_frame:
        return []
    items: list[tuple[int, str]] = []
    for paragraph in shape.text_frame.paragraphs:
        text = " ".join(paragraph.text.split())
        if text:
            items.append((min(paragraph.level, 8), text))
    block = outline_block(items, page=slide)
    return [block] if block is not None else []


def _notes(slide: Any) -> str:
    if not slide.has_notes_slide:
        return ""
    frame = slide.notes_slide.notes_text_frame
    return " ".join(frame.text.split()) if frame is not None else ""
