"""OCR with Tesseract (Debian's ``tesseract-ocr``) through pytesseract.

Used for PDF pages without a text layer (``ingest/pdf.py``) and for image documents (PNG,
JPEG, TIFF). Tesseract runs as a child of the parse worker, so it inherits the worker's
memory and CPU ceilings, and each page gets its own wall-clock bound (pytesseract kills it
past ``page_timeout_seconds``): a page that takes too long costs that page, with a warning.
Words come back with Tesseract's confidence (0-100); the mean over a document's OCR'd
words is reported in its warnings next to the pages that were OCR'd.

Pytesseract over PyMuPDF's built-in OCR: it gives per-word confidence (MuPDF's OCR text
page does not) and a per-page kill, and it needs no tessdata path of its own.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from core.errors import ParseError
from core.records import ParsedDocument, SectionKind
from ingest.limits import check_deadline, remaining_seconds
from ingest.text import Block, assemble

OcrMode = Literal["auto", "off", "force"]
# 20k x 20k px is 400M pixels, 1.2 GB as RGB: far past any scan (an A4 page at 300 dpi is
# 8.7M). Refused from the header, before a pixel is decoded.
MAX_IMAGE_PIXELS = 60_000_000
MAX_IMAGE_FRAMES = 500
_MIN_CONFIDENCE = 0


@dataclass(frozen=True, slots=True)
class OcrOptions:
    """When and how to OCR (``IngestSettings.ocr*`` hold the defaults)."""

    mode: OcrMode = "auto"  # auto: pages without a text layer; force: every page; off: never
    languages: str = "eng"  # Tesseract's -l: "eng", "eng+deu"
    page_timeout_seconds: float = 60.0
    dpi: int = 300


@dataclass(frozen=True, slots=True)
class OcrPage:
    """One page's OCR: its paragraphs and the mean confidence of its words (-1: no words)."""

    paragraphs: tuple[str, ...]
    confidence: float
    words: int


@dataclass(slots=True)
class OcrReport:
    """The pages of one document that were OCR'd, for its warnings."""

    pages: list[int] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    confidence_sum: float = 0.0
    words: int = 0

    def add(self, number: int, page: OcrPage) -> None:
        self.pages.append(number)
        self.confidence_sum += page.confidence * page.words
        self.words += page.words

    def warnings(self) -> tuple[str, ...]:
        out: list[str] = []
        if self.pages:
            mean = self.confidence_sum / self.words if self.words else 0.0
            out.append(f"ocr_pages: {_ranges(self.pages)} (mean confidence {mean:.1f})")
        out.extend(self.failed)
        return tuple(out)


def available() -> bool:
    return shutil.which("tesseract") is not None


def ocr_raster(width: int, height: int, gray: bytes, options: OcrOptions) -> OcrPage:
    """OCR one rendered page: ``gray`` is its 8-bit grayscale samples, row by row.

    Raises:
        ParseError: ``ocr_timeout`` past the page's bound, ``ocr_failed`` when Tesseract
            fails (a language not installed, a damaged image), ``image_too_large``.
    """
    pytesseract, image_module = _imports()
    with image_module.frombytes("L", (width, height), gray) as image:
        return _ocr_image(pytesseract, image, options)


def parse_image(data: bytes, options: OcrOptions) -> ParsedDocument:
    """An image document (PNG, JPEG, TIFF; each TIFF frame a page) as its OCR'd text.

    Raises:
        ParseError: ``ocr_disabled`` (``mode`` off), ``ocr_unavailable`` (no Tesseract),
            ``image_too_large``, ``corrupt_document``, ``ocr_timeout``, ``ocr_failed``.
    """
    if options.mode == "off":
        raise ParseError("an image needs OCR, and OCR is off (RAGLINE_INGEST__OCR)", code="ocr_disabled")
    if not available():
        raise ParseError("an image needs OCR: install tesseract-ocr", code="ocr_unavailable")
    pytesseract, image_module = _imports()
    try:
        image = image_module.open(io.BytesIO(data))
    except image_module.DecompressionBombError as exc:  # Pillow's own check, from the header
        raise ParseError(f"the image is too large ({exc})"[:300], code="image_too_large") from exc
    except (OSError, ValueError) as exc:
        raise ParseError(f"the image cannot be read ({type(exc).__name__})", code="corrupt_document") from exc
    report = OcrReport()
    blocks: list[Block] = []
    with image:
        frames = getattr(image, "n_frames", 1)
        if frames > MAX_IMAGE_FRAMES:
            raise ParseError(f"the image has {frames} frames", code="image_too_large")
        for number in range(1, frames + 1):
            check_deadline()
            image.seek(number - 1)
            page = _ocr_image(pytesseract, image, options)
            report.add(number, page)
            blocks.extend(Block(text, SectionKind.PARAGRAPH, page_start=number) for text in page.paragraphs)
    return assemble(blocks, page_count=frames, warnings=report.warnings())


def _imports() -> tuple[Any, Any]:
    try:
        import pytesseract
        from PIL import Image
    except ImportError as exc:
        raise ParseError(
            "OCR needs pytesseract and Pillow: pip install pytesseract", code="ocr_unavailable"
        ) from exc
    # Pillow refuses (DecompressionBombError) past twice this, warns past it: our limit.
    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS // 2
    # Tesseract's OpenMP threads would each compete for the parse workers' cores.
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    return pytesseract, Image


def _ocr_image(pytesseract: Any, image: Any, options: OcrOptions) -> OcrPage:
    width, height = image.size
    if width * height > MAX_IMAGE_PIXELS:
        raise ParseError(
            f"the image is {width} x {height} px (at most {MAX_IMAGE_PIXELS} pixels)", code="image_too_large"
        )
    timeout = min(options.page_timeout_seconds, max(remaining_seconds(), 1.0))
    try:
        image.load()
        data = pytesseract.image_to_data(
            image if image.mode in ("L", "RGB", "1") else image.convert("RGB"),
            lang=options.languages,
            timeout=timeout,
            output_type=pytesseract.Output.DICT,
        )
    except RuntimeError as exc:  # pytesseract's kill past the timeout
        if "timeout" in str(exc).lower():
            raise ParseError(f"OCR of a page took longer than {timeout:.0f} s", code="ocr_timeout") from exc
        raise ParseError(f"OCR failed ({type(exc).__name__})", code="ocr_failed") from exc
    except (pytesseract.TesseractError, OSError) as exc:
        raise ParseError(f"OCR failed: {str(exc)[:200]}", code="ocr_failed") from exc
    return _page(data)


def _page(data: dict[str, list[Any]]) -> OcrPage:
    """Paragraphs from Tesseract's TSV: words joined by line, lines by (block, paragraph)."""
    paragraphs: dict[tuple[int, int], list[str]] = {}
    confidences: list[float] = []
    for index, word in enumerate(data["text"]):
        word = (word or "").strip()
        conf = float(data["conf"][index])
        if not word or conf < _MIN_CONFIDENCE:
            continue
        confidences.append(conf)
        paragraphs.setdefault((int(data["block_num"][index]), int(data["par_num"][index])), []).append(word)
    texts = tuple(_dehyphenate(words) for words in paragraphs.values())
    mean = sum(confidences) / len(confidences) if confidences else -1.0
    return OcrPage(texts, mean, len(confidences))


def _dehyphenate(words: list[str]) -> str:
    out: list[str] = []
    for word in words:
        if out and out[-1].endswith("-") and len(out[-1]) > 1 and word[:1].islower():
            out[-1] = out[-1][:-1] + word
        else:
            out.append(word)
    return " ".join(out)


def _ranges(numbers: list[int]) -> str:
    """``[1, 2, 3, 5]`` as ``1-3,5``."""
    parts: list[str] = []
    for start, end in _runs(sorted(numbers)):
        parts.append(str(start) if start == end else f"{start}-{end}")
    return ",".join(parts)


def _runs(numbers: list[int]) -> Iterator[tuple[int, int]]:
    start = previous = numbers[0]
    for number in numbers[1:]:
        if number != previous + 1:
            yield start, previous
            start = number
        previous = number
    yield start, previous
