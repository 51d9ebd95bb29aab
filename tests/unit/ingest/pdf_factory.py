"""Small PDFs built with PyMuPDF for the parser tests."""

from __future__ import annotations

import pymupdf

BODY = 11
LOREM = "The quick brown fox jumps over the lazy dog near the river bank."


def heading_table_pdf() -> bytes:
    """Headings in larger bold type, body text, a hyphenated line and a ruled table."""
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 90), "Quarterly Report", fontsize=22, fontname="hebo")
    page.insert_text((72, 130), "Revenue Overview", fontsize=15, fontname="hebo")
    page.insert_text((72, 160), "This paragraph explains the informa-", fontsize=BODY)
    page.insert_text((72, 174), "tion architecture of the report in detail.", fontsize=BODY)
    page.insert_text((72, 188), LOREM, fontsize=BODY)
    x0, y0 = 72, 260
    cells = [["Region", "Sales", "Growth"], ["North", "120", "5%"], ["South", "98", "7%"]]
    for r, row in enumerate(cells):
        for c, value in enumerate(row):
            rect = pymupdf.Rect(x0 + c * 120, y0 + r * 22, x0 + (c + 1) * 120, y0 + (r + 1) * 22)
            page.draw_rect(rect, color=(0, 0, 0), width=0.8)
            page.insert_text((rect.x0 + 6, rect.y0 + 15), value, fontsize=10)
    page.insert_text((72, 360), "Closing remarks follow the table. " + LOREM, fontsize=BODY)
    return doc.tobytes()


def two_column_pdf() -> bytes:
    doc = pymupdf.open()
    page = doc.new_page()
    for row, y in enumerate((120, 260, 400)):
        for side, x in (("Left", 50), ("Right", 320)):
            for line in range(3):
                text = f"{side} paragraph {row} line {line} words here."
                page.insert_text((x, y + line * 14), text, fontsize=10)
    return doc.tobytes()


def running_header_pdf(pages: int = 5) -> bytes:
    doc = pymupdf.open()
    for number in range(1, pages + 1):
        page = doc.new_page()
        page.insert_text((72, 40), "ACME Corp Confidential Handbook", fontsize=9)
        page.insert_text((72, 120), f"Chapter text for page {number}. {LOREM}", fontsize=BODY)
        page.insert_text((300, 820), f"Page {number} of {pages}", fontsize=9)
    return doc.tobytes()


def many_pages_pdf(pages: int) -> bytes:
    doc = pymupdf.open()
    for number in range(1, pages + 1):
        page = doc.new_page()
        page.insert_text((72, 100), f"Section {number}", fontsize=16, fontname="hebo")
        page.insert_text((72, 130), f"Body of page {number}. {LOREM}", fontsize=BODY)
    return doc.tobytes(garbage=0, deflate=False)


def image_only_pdf() -> bytes:
    doc = pymupdf.open()
    page = doc.new_page()
    page.draw_rect(pymupdf.Rect(100, 100, 300, 300), color=(0, 0, 0), fill=(0.5, 0.5, 0.5))
    pixmap = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 8, 8), False)
    pixmap.clear_with(200)
    page.insert_image(pymupdf.Rect(320, 320, 400, 400), pixmap=pixmap)
    return doc.tobytes()


def blank_pdf() -> bytes:
    doc = pymupdf.open()
    doc.new_page()
    return doc.tobytes()


def encrypted_pdf() -> bytes:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "secret text", fontsize=BODY)
    aes_256 = pymupdf.PDF_ENCRYPT_AES_256  # type: ignore[attr-defined]  # absent from the stubs
    return doc.tobytes(encryption=aes_256, user_pw="user", owner_pw="owner")


def chapter_pdf(chapters: int = 4) -> bytes:
    """Two pages a chapter; "Chapter N" in heading type at the top of each chapter's first page."""
    doc = pymupdf.open()
    for number in range(1, chapters + 1):
        first = doc.new_page()
        first.insert_text((72, 72), f"Chapter {number}", fontsize=20, fontname="hebo")
        first.insert_text((72, 110), f"Topic {number} starts here. {LOREM}", fontsize=BODY)
        doc.new_page().insert_text((72, 110), f"More about topic {number}. {LOREM}", fontsize=BODY)
    return doc.tobytes()
