"""PDF parsing with PyMuPDF: reading order, headings by font size, tables, running headers.

Pages are loaded one at a time and reduced to small line records before the next one is
loaded, so memory follows the text, not the page count. Document-wide decisions (the body
font size, which sizes are headings, which lines are running headers) need every page, so
they are made over those records after extraction.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from core.errors import ParseError
from core.records import ParsedDocument, SectionKind
from ingest import ocr
from ingest.limits import check_deadline
from ingest.ocr import OcrOptions, OcrReport
from ingest.pdf_tables import find_tables
from ingest.text import Block, assemble, table_blocks

_MARGIN_ZONE = 0.08  # top/bottom share of the page where running headers live
_HEADING_RATIO = 1.15
_MAX_HEADING_CHARS = 200
_MAX_BOLD_HEADING_CHARS = 80
_MIN_TABLE_RULES = 3  # find_tables is ~0.1 s a page: only run it where rules are drawn
_MIN_RULE_LENGTH = 20.0
_STORE_SHRINK_EVERY = 100
_BULLETS = ("•", "◦", "▪", "‣", "∙", "●", "○", "■", "–", "- ", "* ")
_BOLD_FLAG = 16
_LETTER = re.compile(r"[^\W\d_]")
_DIGITS = re.compile(r"\d+")
_FILE_NAME_TITLE = re.compile(r"\.(?:docx?|pdf|tex|dvi|indd|pptx?|odt)$|^untitled", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Line:
    text: str
    size: float
    bold: bool
    y0: float
    y1: float


@dataclass(frozen=True, slots=True)
class _Region:
    """A text block or a table, positioned on its page."""

    bbox: tuple[float, float, float, float]
    lines: tuple[_Line, ...] = ()
    table: tuple[tuple[str, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class _Page:
    number: int
    height: float
    regions: tuple[_Region, ...]
    has_graphics: bool
    ocr: tuple[str, ...] = ()  # the page's OCR'd paragraphs, in place of its regions


@dataclass(frozen=True, slots=True)
class _Fonts:
    """Document-wide typography: heading levels by rounded font size."""

    body_size: float
    heading_levels: dict[float, int]

    @property
    def bold_level(self) -> int:
        return min(len(self.heading_levels) + 1, 6)


def parse(data: bytes, ocr_options: OcrOptions | None = None) -> ParsedDocument:
    """Parse a PDF into sections with page numbers, headings and Markdown tables.

    Pages without a text layer but with graphics are OCR'd (``ocr_options.mode`` auto; every
    page with force, none with off); an OCR'd page keeps its page number, so a mixed PDF's
    sections say which page each came from.

    Args:
        data: The PDF bytes.
        ocr_options: When and how to OCR (default: auto, English).

    Returns:
        The parsed document with ``page_count`` set and 1-based pages on every section;
        ``warnings`` name the OCR'd pages and their mean word confidence.

    Raises:
        ParseError: ``corrupt_pdf``, ``encrypted_pdf``, ``empty_document`` or
            ``image_only_pdf`` (pages but no text, OCR off, unavailable or finding none).
    """
    pymupdf = _import_pymupdf()
    doc = _open(pymupdf, data)
    warnings: list[str] = []
    reader = _OcrReader(pymupdf, ocr_options or OcrOptions())
    try:
        page_count = doc.page_count
        pages = list(_extract_pages(pymupdf, doc, warnings, reader))
        metadata_title = (doc.metadata or {}).get("title") or ""
    finally:
        doc.close()
    warnings.extend(reader.report.warnings())
    if not pages:
        raise ParseError("no page of the PDF could be read", code="corrupt_pdf")
    fonts = _fonts(pages)
    repeated = _running_lines(pages, fonts)
    blocks = [block for page in pages for block in _page_blocks(page, fonts, repeated)]
    if not blocks:
        if any(page.has_graphics for page in pages):
            raise ParseError(
                f"the PDF has {page_count} pages but no extractable text: it looks image-only "
                f"(scanned); {reader.why_no_text()}",
                code="image_only_pdf",
            )
        raise ParseError("the PDF contains no text", code="empty_document")
    blank = sum(1 for page in pages if not page.regions and not page.ocr)
    if blank:
        warnings.append(f"pages_without_text: {blank}")
    return assemble(
        blocks, title=_title(metadata_title, blocks), page_count=page_count, warnings=tuple(warnings)
    )


def _import_pymupdf() -> Any:
    try:
        import pymupdf
    except ImportError as exc:
        raise ParseError("PDF support needs PyMuPDF: pip install pymupdf", code="parser_unavailable") from exc
    return pymupdf


def _open(pymupdf: Any, data: bytes) -> Any:
    if not data.strip():
        raise ParseError("the PDF is empty (no bytes)", code="empty_document")
    try:
        doc = pymupdf.open(stream=data, filetype="pdf")
    except (RuntimeError, ValueError) as exc:  # pymupdf.FileDataError is a RuntimeError
        raise ParseError(f"cannot open the PDF ({type(exc).__name__})", code="corrupt_pdf") from exc
    if doc.needs_pass:
        doc.close()
        raise ParseError("the PDF is encrypted and needs a password", code="encrypted_pdf")
    if doc.page_count == 0:
        repaired = doc.is_repaired
        doc.close()
        if repaired:
            raise ParseError("the PDF is damaged and no page could be recovered", code="corrupt_pdf")
        raise ParseError("the PDF has no pages", code="empty_document")
    return doc


class _OcrReader:
    """OCRs the pages that need it, and remembers what it did for the warnings."""

    def __init__(self, pymupdf: Any, options: OcrOptions) -> None:
        self.pymupdf = pymupdf
        self.options = options
        self.report = OcrReport()
        self.enabled = options.mode != "off" and ocr.available()

    def wanted(self, regions: list[_Region], has_graphics: bool) -> bool:
        if not self.enabled:
            return False
        return self.options.mode == "force" or (not regions and has_graphics)

    def read(self, page: Any, number: int) -> tuple[str, ...]:
        rect = page.rect
        dpi = self.options.dpi
        pixels = rect.width * rect.height * (dpi / 72) ** 2
        if pixels > ocr.MAX_IMAGE_PIXELS:  # a poster-sized page: render it smaller
            dpi = max(int(dpi * (ocr.MAX_IMAGE_PIXELS / pixels) ** 0.5), 1)
        pixmap = page.get_pixmap(dpi=dpi, colorspace=self.pymupdf.csGRAY, alpha=False)
        try:
            result = ocr.ocr_raster(pixmap.width, pixmap.height, pixmap.samples, self.options)
        except ParseError as exc:
            if exc.code not in ("ocr_timeout", "ocr_failed"):
                raise
            self.report.failed.append(f"{exc.code}: page {number}")
            return ()
        finally:
            pixmap = None
        self.report.add(number, result)
        return result.paragraphs

    def why_no_text(self) -> str:
        if self.options.mode == "off":
            return "OCR is off (RAGLINE_INGEST__OCR)"
        if not self.enabled:
            return "OCR needs tesseract-ocr, which is not installed"
        if self.report.failed:
            return f"OCR failed ({self.report.failed[0]})"
        return "OCR found no text"


def _extract_pages(pymupdf: Any, doc: Any, warnings: list[str], reader: _OcrReader) -> Iterator[_Page]:
    """Load, reduce and release one page at a time."""
    flags = int(pymupdf.TEXTFLAGS_TEXT)
    for index in range(doc.page_count):
        check_deadline()
        try:
            page = doc.load_page(index)
            yield _extract_page(page, index + 1, flags, warnings, reader)
        except RuntimeError:
            warnings.append(f"page_unreadable: {index + 1}")
        finally:
            page = None
        if (index + 1) % _STORE_SHRINK_EVERY == 0:
            # MuPDF caches decoded resources across pages; release them so a long PDF
            # does not grow the store without bound.
            pymupdf.TOOLS.store_shrink(100)


def _extract_page(page: Any, number: int, flags: int, warnings: list[str], reader: _OcrReader) -> _Page:
    log = page.get_bboxlog()
    paths = [rect for kind, rect in log if "path" in kind]
    has_graphics = bool(paths) or any("image" in kind for kind, _ in log)
    # Only strokes long enough to be table rules count: TeX draws underscores as paths.
    rules = sum(1 for x0, y0, x1, y1 in paths if max(x1 - x0, y1 - y0) >= _MIN_RULE_LENGTH)
    tables = _tables(page, number, flags, warnings) if rules >= _MIN_TABLE_RULES else []
    width = page.rect.width
    # TEXTFLAGS_TEXT leaves images out of the dict: their pixels would cost memory for nothing.
    content = page.get_text("dict", sort=True, flags=flags)
    regions = list(tables)
    for block in content["blocks"]:
        lines = tuple(
            line
            for raw in block.get("lines", ())
            if (line := _line(raw)) is not None and not _inside(raw["bbox"], tables)
        )
        if lines:
            regions.append(_Region(bbox=tuple(block["bbox"]), lines=lines))
    if reader.wanted(regions, has_graphics):
        paragraphs = reader.read(page, number)
        if paragraphs or reader.options.mode != "force":
            return _Page(number, page.rect.height, (), has_graphics, paragraphs)
    return _Page(number, page.rect.height, tuple(_reading_order(regions, width)), has_graphics)


def _tables(page: Any, number: int, flags: int, warnings: list[str]) -> list[_Region]:
    try:
        return [_Region(bbox=table.bbox, table=table.rows) for table in find_tables(page, flags)]
    except Exception as exc:  # the table finder is heuristic; text still flows
        warnings.append(f"table_detection_failed: page {number} ({type(exc).__name__})")
        return []


def _line(raw: dict[str, Any]) -> _Line | None:
    spans = [span for span in raw.get("spans", ()) if span.get("text")]
    text = "".join(span["text"] for span in spans).strip()
    if not text:
        return None
    visible = [span for span in spans if span["text"].strip()]
    main = max(visible, key=lambda span: len(span["text"].strip()))
    bold = all(span["flags"] & _BOLD_FLAG or "bold" in span["font"].lower() for span in visible)
    return _Line(text, round(float(main["size"]), 1), bold, float(raw["bbox"][1]), float(raw["bbox"][3]))


def _inside(bbox: tuple[float, ...], tables: list[_Region]) -> bool:
    x = (bbox[0] + bbox[2]) / 2
    y = (bbox[1] + bbox[3]) / 2
    return any(t.bbox[0] - 3 <= x <= t.bbox[2] + 3 and t.bbox[1] - 3 <= y <= t.bbox[3] + 3 for t in tables)


def _reading_order(regions: list[_Region], width: float) -> list[_Region]:
    """Order regions top to bottom, reading a two-column band left column first.

    Full-width regions (titles, wide figures) cut the page into bands; a band is read as
    two columns only when it really has regions on both sides of the middle.
    """
    middle, tolerance = width / 2, width * 0.02
    ordered: list[_Region] = []
    band: list[_Region] = []
    for region in sorted(regions, key=lambda r: (round(r.bbox[1]), r.bbox[0])):
        if region.bbox[2] < middle + tolerance or region.bbox[0] > middle - tolerance:
            band.append(region)
        else:
            ordered.extend(_order_band(band, middle))
            ordered.append(region)
            band = []
    ordered.extend(_order_band(band, middle))
    return ordered


def _order_band(band: list[_Region], middle: float) -> list[_Region]:
    left = [region for region in band if region.bbox[0] + region.bbox[2] < 2 * middle]
    right = [region for region in band if region.bbox[0] + region.bbox[2] >= 2 * middle]
    side_by_side = any(a.bbox[1] < b.bbox[3] and b.bbox[1] < a.bbox[3] for a in left for b in right)
    return left + right if side_by_side else band


def _fonts(pages: list[_Page]) -> _Fonts:
    weights: Counter[float] = Counter()
    for line in _all_lines(pages):
        weights[line.size] += len(line.text)
    body = _weighted_median(weights)
    sizes = {
        _size_key(line.size)
        for line in _all_lines(pages)
        if line.size >= body * _HEADING_RATIO and _is_heading_text(line.text, _MAX_HEADING_CHARS)
    }
    levels = {size: min(rank + 1, 6) for rank, size in enumerate(sorted(sizes, reverse=True))}
    return _Fonts(body_size=body, heading_levels=levels)


def _weighted_median(weights: Counter[float]) -> float:
    """The font size of the median character: the body size, whatever headings do."""
    half = sum(weights.values()) / 2
    running = 0
    for size in sorted(weights):
        running += weights[size]
        if running >= half:
            return size
    return 0.0


def _all_lines(pages: list[_Page]) -> Iterator[_Line]:
    return (line for page in pages for region in page.regions for line in region.lines)


def _size_key(size: float) -> float:
    return round(size * 2) / 2


def _is_heading_text(text: str, limit: int) -> bool:
    return len(text) <= limit and bool(_LETTER.search(text))


def _running_lines(pages: list[_Page], fonts: _Fonts) -> frozenset[tuple[str, str]]:
    """Lines in the top or bottom margin repeated, digits ignored, on half the pages (3+)."""
    seen: Counter[tuple[str, str]] = Counter()
    for page in pages:
        keys = {
            key for region in page.regions for line in region.lines if (key := _margin_key(line, page, fonts))
        }
        seen.update(keys)
    threshold = max(3, (len(pages) + 1) // 2)
    return frozenset(key for key, count in seen.items() if count >= threshold)


def _margin_key(line: _Line, page: _Page, fonts: _Fonts) -> tuple[str, str] | None:
    if line.y0 < page.height * _MARGIN_ZONE:
        zone = "top"
    elif line.y1 > page.height * (1 - _MARGIN_ZONE):
        zone = "bottom"
    else:
        return None
    text = line.text.lower()
    # Digits are ignored so "Page 3 of 9" repeats; not in heading type, where the digits are
    # what tells "Chapter 1" from "Chapter 2" at the top of each chapter's first page.
    if _size_key(line.size) not in fonts.heading_levels:
        text = _DIGITS.sub("", text)
    return zone, " ".join(text.split())


def _page_blocks(page: _Page, fonts: _Fonts, repeated: frozenset[tuple[str, str]]) -> Iterator[Block]:
    for paragraph in page.ocr:
        yield Block(paragraph, SectionKind.PARAGRAPH, page_start=page.number)
    for region in page.regions:
        if region.table is not None:
            yield from table_blocks([list(row) for row in region.table], page=page.number)
            continue
        lines = [line for line in region.lines if _margin_key(line, page, fonts) not in repeated]
        all_bold = all(line.bold for line in lines)
        run: list[_Line] = []
        run_level = 0
        for line in lines:
            level = _heading_level(line, fonts, all_bold)
            if run and level != run_level:
                yield _run_block(run, run_level, page.number)
                run = []
            run.append(line)
            run_level = level
        if run:
            yield _run_block(run, run_level, page.number)


def _heading_level(line: _Line, fonts: _Fonts, region_bold: bool) -> int:
    """0 for body text, else the heading level (1 = largest type)."""
    level = fonts.heading_levels.get(_size_key(line.size), 0)
    if level and _is_heading_text(line.text, _MAX_HEADING_CHARS):
        return level
    if (
        region_bold
        and line.bold
        and line.size >= fonts.body_size - 0.5  # bold small print (code, captions) is not a heading
        and _is_heading_text(line.text, _MAX_BOLD_HEADING_CHARS)
    ):
        return fonts.bold_level
    return 0


def _run_block(lines: list[_Line], level: int, page: int) -> Block:
    if level:
        return Block(" ".join(line.text for line in lines), SectionKind.HEADING, level=level, page_start=page)
    kind = SectionKind.LIST if lines[0].text.startswith(_BULLETS) else SectionKind.PARAGRAPH
    return Block(_join_lines([line.text for line in lines]), kind, page_start=page)


def _join_lines(lines: list[str]) -> str:
    """Reflow lines into a paragraph, repairing words hyphenated across a line break."""
    parts = [lines[0]]
    for line in lines[1:]:
        previous = parts[-1]
        if previous.endswith("-") and len(previous) > 1 and previous[-2].isalpha() and line[0].islower():
            parts[-1] = previous[:-1]
            parts.append(line)
        elif line.startswith(_BULLETS):
            parts.extend(("\n", line))
        else:
            parts.extend((" ", line))
    return "".join(parts)


def _title(metadata_title: str, blocks: list[Block]) -> str | None:
    title = " ".join(metadata_title.split())
    if title and not _FILE_NAME_TITLE.search(title):
        return title
    headings = [block for block in blocks if block.kind is SectionKind.HEADING]
    if not headings:
        return None
    top = min(block.level for block in headings)
    return next(block.text for block in headings if block.level == top)
