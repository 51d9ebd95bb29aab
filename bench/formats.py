"""Parsing throughput per format beside PDF's, and OCR quality and speed.

Run: ``python -m bench.formats --pages 40 --ocr-pages 6``. The same text (documents of the
shared cisi collection, ``../shared/data/cisi``, else generated prose) is written as PDF,
DOCX, PPTX, XLSX, CSV, EPUB, e-mail, ODT, ODP and ODS by the writer libraries (odfpy for the
OpenDocument ones), then parsed in this process with the production parsers
(``ingest.parse.parse_document``); rounds alternate the formats so drift on a shared machine
hits them alike. A "page" is the same ~2,400 characters in every format (a PDF page, a DOCX
page break or an ODT heading's section, a slide, a sheet, an EPUB chapter, a message),
so the units per second compare like with like, and the ratio column is each format's rate
over PDF's in the same run.

OCR: text PDF pages are rendered to page images (300 dpi clean; 150 dpi with Gaussian noise
and a slight blur for the degraded case), OCR'd through Tesseract as a scanned page is
(``ingest.ocr.ocr_raster``), and the character error rate is the Levenshtein distance to the
page's source text over its length, whitespace collapsed on both sides.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path

import numpy as np

from bench.common import generated_texts, print_table
from core.records import SourceDocument
from ingest import ocr
from ingest.ocr import OcrOptions
from ingest.parse import CSV, DOCX, EML, EPUB, ODP, ODS, ODT, PDF, PPTX, XLSX, parse_document

CISI = Path(__file__).resolve().parents[2] / "shared" / "data" / "cisi" / "corpus.jsonl"
PAGE_CHARS = 2400


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pages", type=int, default=40, help="pages per document")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ocr-pages", type=int, default=6, help="pages rendered and OCR'd per quality (0: skip)")
    return p.parse_args()


def _pages(n: int) -> list[str]:
    """``n`` pages of ~PAGE_CHARS characters of real abstracts (or generated prose)."""
    if CISI.exists():
        texts = [json.loads(line)["text"] for line in CISI.read_text().splitlines()]
    else:
        texts = generated_texts(n * 4, 100, seed=3)
    pages, current = [], ""
    for text in texts:
        current = (current + " " + " ".join(text.split())).strip()
        if len(current) >= PAGE_CHARS:
            pages.append(current[:PAGE_CHARS].rsplit(" ", 1)[0])
            current = ""
            if len(pages) == n:
                break
    return pages


def _pdf(pages: list[str]) -> bytes:
    import pymupdf

    doc = pymupdf.open()
    for text in pages:
        page = doc.new_page()
        page.insert_textbox(
            pymupdf.Rect(54, 54, page.rect.width - 54, page.rect.height - 54), text, fontsize=10
        )
    return doc.tobytes()


def _docx(pages: list[str]) -> bytes:
    import docx

    document = docx.Document()
    for number, text in enumerate(pages, 1):
        document.add_heading(f"Section {number}", 1)
        document.add_paragraph(text)
        document.add_page_break()
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _pptx(pages: list[str]) -> bytes:
    import pptx

    deck = pptx.Presentation()
    for number, text in enumerate(pages, 1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Slide {number}"
        slide.placeholders[1].text_frame.text = text
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def _rows(text: str) -> list[list[str]]:
    words = text.split()
    return [[str(i), " ".join(words[i : i + 12])] for i in range(0, len(words), 12)]


def _xlsx(pages: list[str]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for number, text in enumerate(pages, 1):
        sheet = book.create_sheet(f"Sheet {number}")
        sheet.append(["row", "text"])
        for row in _rows(text):
            sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _csv(pages: list[str]) -> bytes:
    import csv

    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["row", "text"])
    for text in pages:
        writer.writerows(_rows(text))
    return out.getvalue().encode()


def _epub(pages: list[str]) -> bytes:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("bench")
    book.set_title("Bench")
    chapters = []
    for number, text in enumerate(pages, 1):
        item = epub.EpubHtml(title=f"Chapter {number}", file_name=f"c{number}.xhtml")
        item.content = f"<html><body><h1>Chapter {number}</h1><p>{text}</p></body></html>"
        book.add_item(item)
        chapters.append(item)
    book.toc = tuple(chapters)
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = chapters
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()


def _eml(pages: list[str]) -> bytes:
    message = EmailMessage()
    message["Subject"] = "Bench"
    message["From"] = "a@example.org"
    message.set_content("\n\n".join(pages))
    return message.as_bytes()


def _odf(document: object) -> bytes:
    out = io.BytesIO()
    document.save(out)  # type: ignore[attr-defined]
    return out.getvalue()


def _odt(pages: list[str]) -> bytes:
    from odf import text
    from odf.opendocument import OpenDocumentText

    document = OpenDocumentText()
    for number, page in enumerate(pages, 1):
        document.text.addElement(text.H(outlinelevel=1, text=f"Section {number}"))
        document.text.addElement(text.P(text=page))
    return _odf(document)


def _odp(pages: list[str]) -> bytes:
    from odf import draw, style, text
    from odf.namespaces import PRESENTATIONNS
    from odf.opendocument import OpenDocumentPresentation

    deck = OpenDocumentPresentation()
    layout = style.PageLayout(name="Slide")
    deck.automaticstyles.addElement(layout)
    master = style.MasterPage(name="Default", pagelayoutname=layout)
    deck.masterstyles.addElement(master)
    for number, page in enumerate(pages, 1):
        slide = draw.Page(masterpagename=master)
        deck.presentation.addElement(slide)
        for kind, y, words in (("title", "1cm", f"Slide {number}"), ("outline", "4cm", page)):
            frame = draw.Frame(x="1cm", y=y, width="24cm", height="3cm")
            frame.setAttrNS(PRESENTATIONNS, "class", kind)
            box = draw.TextBox()
            box.addElement(text.P(text=words))
            frame.addElement(box)
            slide.addElement(frame)
    return _odf(deck)


def _ods(pages: list[str]) -> bytes:
    from odf import table, text
    from odf.opendocument import OpenDocumentSpreadsheet

    book = OpenDocumentSpreadsheet()
    for number, page in enumerate(pages, 1):
        sheet = table.Table(name=f"Sheet {number}")
        for values in [["row", "text"], *_rows(page)]:
            row = table.TableRow()
            for value in values:
                cell = table.TableCell(valuetype="string")
                cell.addElement(text.P(text=value))
                row.addElement(cell)
            sheet.addElement(row)
        book.spreadsheet.addElement(sheet)
    return _odf(book)


# (label, MIME type, builder, what a page is called in that format)
FORMATS: list[tuple[str, str, Callable[[list[str]], bytes], str]] = [
    ("pdf", PDF, _pdf, "pages"),
    ("docx", DOCX, _docx, "pages"),
    ("pptx", PPTX, _pptx, "slides"),
    ("xlsx", XLSX, _xlsx, "sheets"),
    ("csv", CSV, _csv, "pages"),
    ("epub", EPUB, _epub, "chapters"),
    ("eml", EML, _eml, "pages"),
    ("odt", ODT, _odt, "pages"),
    ("odp", ODP, _odp, "slides"),
    ("ods", ODS, _ods, "sheets"),
]


def _throughput(pages: list[str], rounds: int) -> list[list[object]]:
    built = {label: (mime, build(pages), unit) for label, mime, build, unit in FORMATS}
    times: dict[str, list[float]] = {label: [] for label in built}
    for _ in range(rounds):
        for label, (mime, data, _unit) in built.items():
            started = time.perf_counter()
            parsed = parse_document(SourceDocument("t", "e", mime, data))
            times[label].append(time.perf_counter() - started)
            if len(parsed.text) < len(pages) * PAGE_CHARS * 0.8:
                raise RuntimeError(f"{label}: parsed only {len(parsed.text)} characters")
    pdf_rate = len(pages) / statistics.median(times["pdf"])
    rows: list[list[object]] = []
    for label, (_mime, data, unit) in built.items():
        seconds = statistics.median(times[label])
        rate = len(pages) / seconds
        rows.append([label, f"{len(data) / 1024:.0f}", unit, f"{rate:.1f}", f"{rate / pdf_rate:.2f}"])
    return rows


def _normalise(text: str) -> str:
    return " ".join(text.split())


def _ocr_quality(pages: list[str]) -> list[list[object]]:
    import pymupdf
    from rapidfuzz.distance import Levenshtein

    options = OcrOptions()
    doc = pymupdf.open(stream=_pdf(pages), filetype="pdf")
    rng = np.random.default_rng(5)
    rows = []
    for label, dpi, noise in (("clean 300 dpi", 300, 0.0), ("degraded 150 dpi + noise", 150, 40.0)):
        errors = chars = 0
        seconds = 0.0
        confidences = []
        for index, source in enumerate(pages):
            pixmap = doc[index].get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
            gray = np.frombuffer(pixmap.samples, dtype=np.uint8).reshape(pixmap.height, pixmap.width)
            if noise:
                noisy = gray.astype(np.float32) + rng.normal(0, noise, gray.shape)
                gray = np.clip(noisy, 0, 255).astype(np.uint8)
            started = time.perf_counter()
            page = ocr.ocr_raster(pixmap.width, pixmap.height, gray.tobytes(), options)
            seconds += time.perf_counter() - started
            found, truth = _normalise(" ".join(page.paragraphs)), _normalise(source)
            errors += Levenshtein.distance(found, truth)
            chars += len(truth)
            confidences.append(page.confidence)
        rows.append(
            [
                label,
                len(pages),
                f"{100 * errors / chars:.2f}",
                f"{statistics.mean(confidences):.1f}",
                f"{len(pages) / seconds:.2f}",
            ]
        )
    return rows


def main() -> None:
    args = _args()
    load = os.getloadavg()
    pages = _pages(args.pages)
    print(
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {len(pages)} pages of ~{PAGE_CHARS} chars"
    )
    print_table(["format", "KiB", "unit", "units/s", "vs pdf"], _throughput(pages, args.rounds))
    if args.ocr_pages and ocr.available():
        print()
        print_table(
            ["OCR render", "pages", "CER %", "mean conf", "pages/s"], _ocr_quality(pages[: args.ocr_pages])
        )


if __name__ == "__main__":
    main()
