"""Generate the two sample PDFs of ``samples/corpus`` with PyMuPDF.

Run: ``python -m samples.make_pdfs`` (or ``python samples/make_pdfs.py``). The PDFs are
committed; rerun this only after editing the content below. The layout is deliberately
"real-world": headings in larger bold fonts, body text wrapped over several pages, a table
drawn with lines, and a running footer with page numbers, so the PDF parser has to cope with
what exported office documents look like.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pymupdf

CORPUS = Path(__file__).resolve().parent / "corpus"

PAGE_W, PAGE_H = 595.0, 842.0  # A4 in points
MARGIN = 64.0
FOOTER_Y = PAGE_H - 36.0
BODY_BOTTOM = PAGE_H - 72.0
BODY_FONT, BOLD_FONT = "helv", "hebo"
STYLES = {"h1": (20.0, BOLD_FONT, 14.0), "h2": (14.0, BOLD_FONT, 8.0), "p": (10.5, BODY_FONT, 6.0)}


@dataclass(frozen=True, slots=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    widths: tuple[float, ...]  # column widths as fractions of the text width


Block = tuple[str, str] | Table  # ("h1" | "h2" | "p" | "li" | "break", text) or a table


class Writer:
    """A minimal flowing layout: wraps text, breaks pages, draws tables and footers."""

    def __init__(self, footer: str) -> None:
        self.doc = pymupdf.open()
        self.footer = footer
        self.page: pymupdf.Page | None = None
        self.y = 0.0

    def _new_page(self) -> pymupdf.Page:
        self.page = self.doc.new_page(width=PAGE_W, height=PAGE_H)
        self.y = MARGIN
        return self.page

    def _ensure(self, height: float) -> pymupdf.Page:
        if self.page is None or self.y + height > BODY_BOTTOM:
            return self._new_page()
        return self.page

    @staticmethod
    def _wrap(text: str, size: float, font: str, width: float) -> list[str]:
        lines: list[str] = []
        current = ""
        for word in text.split():
            trial = f"{current} {word}".strip()
            if pymupdf.get_text_length(trial, fontname=font, fontsize=size) <= width or not current:
                current = trial
            else:
                lines.append(current)
                current = word
        if current:
            lines.append(current)
        return lines

    def text(self, kind: str, text: str) -> None:
        if kind == "break":
            self._new_page()
            return
        indent = 14.0 if kind == "li" else 0.0
        size, font, after = STYLES["p" if kind == "li" else kind]
        lines = self._wrap(text, size, font, PAGE_W - 2 * MARGIN - indent)
        leading = size * 1.35
        # A heading must not be the last line of a page: keep it with two lines of body text.
        self._ensure(leading * (len(lines) if kind not in ("h1", "h2") else len(lines) + 2))
        for i, line in enumerate(lines):
            page = self._ensure(leading)
            self.y += size
            if kind == "li" and i == 0:
                page.insert_text((MARGIN + 2, self.y), "-", fontname=font, fontsize=size)
            page.insert_text((MARGIN + indent, self.y), line, fontname=font, fontsize=size)
            self.y += leading - size
        self.y += after

    def table(self, table: Table) -> None:
        size, pad = 9.5, 4.0
        width = PAGE_W - 2 * MARGIN
        cols = [w * width for w in table.widths]
        for r, row in enumerate((table.headers, *table.rows)):
            font = BOLD_FONT if r == 0 else BODY_FONT
            cells = [self._wrap(c, size, font, w - 2 * pad) for c, w in zip(row, cols, strict=True)]
            height = max(len(c) for c in cells) * size * 1.3 + 2 * pad
            page = self._ensure(height)
            x = MARGIN
            for lines, w in zip(cells, cols, strict=True):
                page.draw_rect(pymupdf.Rect(x, self.y, x + w, self.y + height), color=(0, 0, 0), width=0.6)
                for i, line in enumerate(lines):
                    baseline = self.y + pad + size + i * size * 1.3
                    page.insert_text((x + pad, baseline), line, fontname=font, fontsize=size)
                x += w
            self.y += height
        self.y += 10.0

    def save(self, path: Path) -> None:
        total = len(self.doc)
        for number, page in enumerate(self.doc, start=1):
            page.draw_line((MARGIN, FOOTER_Y - 10), (PAGE_W - MARGIN, FOOTER_Y - 10), width=0.4)
            page.insert_text((MARGIN, FOOTER_Y), self.footer, fontname=BODY_FONT, fontsize=8)
            label = f"Page {number} of {total}"
            x = PAGE_W - MARGIN - pymupdf.get_text_length(label, fontname=BODY_FONT, fontsize=8)
            page.insert_text((x, FOOTER_Y), label, fontname=BODY_FONT, fontsize=8)
        # Fixed dates keep the bytes stable between runs, so rerunning leaves git clean.
        self.doc.set_metadata(
            {"title": self.footer, "creationDate": "D:20240901000000", "modDate": "D:20240901000000"}
        )
        self.doc.save(path, garbage=4, deflate=True, no_new_id=True)


def render(path: Path, footer: str, blocks: Sequence[Block]) -> None:
    """Lay ``blocks`` out into a PDF at ``path``."""
    writer = Writer(footer)
    for block in blocks:
        if isinstance(block, Table):
            writer.table(block)
        else:
            writer.text(*block)
    writer.save(path)


HANDBOOK: list[Block] = [
    ("h1", "Fernhill Systems Employee Handbook"),
    (
        "p",
        "Edition 2024. This handbook summarises the working conditions of Fernhill Systems employees in "
        "France. Where it differs from your employment contract or the collective agreement, the "
        "contract and the agreement prevail. Questions go to the People team at people@fernhill.example.",
    ),
    ("h2", "1. Working hours and flexibility"),
    (
        "p",
        "The standard working week is 37.5 hours. Core hours are 10:00 to 16:00, when meetings may be "
        "scheduled; outside core hours you organise your time with your team. Overtime must be agreed with "
        "your manager in advance and is compensated with time off.",
    ),
    ("h2", "2. Remote work"),
    (
        "p",
        "Employees may work remotely up to three days per week after their probation period. Fully "
        "remote contracts are possible for roles marked as remote in the job description. Remote work must "
        "happen from France or another EU country; working from outside the EU for more than 10 days a year "
        "needs approval from the People team because of tax and data protection rules.",
    ),
    ("li", "Use the company VPN for every connection to internal systems."),
    ("li", "Do not work on confidential data in public places where screens can be overlooked."),
    ("li", "The home office allowance of EUR 400 per year covers a chair, a monitor or a headset."),
    ("h2", "3. Paid time off"),
    (
        "p",
        "Full-time employees receive 25 days of paid vacation per year plus 10 RTT days. Vacation is "
        "requested in the HR portal at least two weeks in advance for absences longer than three days. "
        "Up to five unused days may be carried over to the first quarter of the following year.",
    ),
    Table(
        headers=("Leave type", "Duration", "How to request"),
        rows=(
            ("Annual vacation", "25 working days per year", "HR portal, two weeks ahead"),
            ("RTT days", "10 days per year", "HR portal"),
            (
                "Sick leave",
                "As certified by a doctor; full pay from day one",
                "Send the certificate within 48 hours",
            ),
            ("Maternity leave", "16 weeks, full pay", "Inform HR before the 4th month"),
            ("Second parent leave", "28 days, full pay", "Inform HR one month ahead"),
            (
                "Bereavement",
                "3 to 5 days depending on the relationship",
                "Tell your manager; HR portal later",
            ),
            ("Moving house", "1 day per year", "HR portal"),
        ),
        widths=(0.28, 0.38, 0.34),
    ),
    ("h2", "4. Parental leave"),
    (
        "p",
        "Fernhill tops up statutory parental benefits so that parents keep their full salary during "
        "maternity leave (16 weeks) and second parent leave (28 days). After parental leave, parents may "
        "work part time (80 percent) for up to 12 months with their position guaranteed. Adoption gives the "
        "same rights as birth.",
    ),
    ("h2", "5. Learning and development"),
    (
        "p",
        "Every employee has a learning budget of EUR 1,500 per year for courses, conferences and books, "
        "plus five learning days. Conference talks given on behalf of Fernhill do not count against "
        "the budget.",
    ),
    ("break", ""),
    ("h2", "6. Performance and feedback"),
    (
        "p",
        "Performance conversations happen twice a year, in March and September. They look at impact, "
        "collaboration and growth. Feedback is continuous: managers hold a one-to-one at least every "
        "two weeks.",
    ),
    ("h2", "7. Code of conduct"),
    (
        "p",
        "We treat colleagues, customers and partners with respect. Harassment and discrimination of any "
        "kind are not tolerated. Concerns can be raised with your manager, the People team or anonymously "
        "through the ethics line; retaliation against anyone who raises a concern in good faith is itself a "
        "serious breach of this code.",
    ),
    ("h2", "8. Leaving Fernhill"),
    (
        "p",
        "The notice period is one month for L1 to L3 and three months for L4 and above, for both sides. "
        "Return your laptop, badge and security key on your last day; access is removed at 18:00 that day.",
    ),
]

RETENTION: list[Block] = [
    ("h1", "Data Retention Standard"),
    (
        "p",
        "Standard SEC-07, version 1.4, owned by the Security and Privacy team. This standard implements "
        "the data classification of the Information Security Policy: it says how long each kind of record "
        "is kept, and how it is destroyed at the end of its retention period.",
    ),
    ("h2", "1. Principles"),
    ("li", "Keep personal data only as long as it is needed for the purpose it was collected for."),
    ("li", "Legal holds override every retention period until Legal releases the hold."),
    ("li", "Deletion must reach backups: backups older than the retention period are expired, not restored."),
    ("h2", "2. Retention periods"),
    (
        "p",
        "The table below lists the retention period for each record type. Periods start at the end of "
        "the customer relationship or when the record is created, as noted.",
    ),
    Table(
        headers=("Record type", "Retention period", "Start", "Owner"),
        rows=(
            ("Customer orders and invoices", "10 years", "Invoice date", "Finance"),
            ("Customer account profile", "3 years", "Last activity", "Product"),
            ("Application logs", "30 days", "Creation", "Platform"),
            ("Security audit logs", "1 year", "Creation", "Security"),
            ("Backups of production databases", "35 days", "Creation", "Infrastructure"),
            ("Recruiting files of rejected candidates", "2 years", "Decision", "People"),
            ("Employee payroll records", "5 years", "End of employment", "People"),
            ("Support tickets", "3 years", "Ticket closed", "Support"),
        ),
        widths=(0.36, 0.2, 0.22, 0.22),
    ),
    ("h2", "3. Destruction methods"),
    (
        "p",
        "Electronic records are deleted with the platform's deletion jobs; storage volumes are "
        "crypto-shredded by destroying their encryption keys. Paper records are shredded with a cross-cut "
        "shredder (security level P-4) or through the certified destruction service.",
    ),
    ("break", ""),
    ("h2", "4. Customer deletion requests"),
    (
        "p",
        "Requests to erase personal data under the GDPR are handled by Support within 30 days. Records "
        "that must be kept for legal reasons, such as invoices, are kept but restricted: they are removed "
        "from search, analytics and marketing systems.",
    ),
    ("h2", "5. Exceptions and review"),
    (
        "p",
        "Exceptions need approval from the Data Protection Officer and are reviewed every year. This "
        "standard itself is reviewed every 12 months or after any change in law.",
    ),
]


def main() -> None:
    """Write both PDFs into ``samples/corpus`` and print their sizes."""
    CORPUS.mkdir(parents=True, exist_ok=True)
    outputs = {
        "employee-handbook.pdf": ("Fernhill Systems - Employee Handbook 2024", HANDBOOK),
        "data-retention-standard.pdf": ("Fernhill Systems - SEC-07 Data Retention Standard", RETENTION),
    }
    for name, (footer, blocks) in outputs.items():
        path = CORPUS / name
        render(path, footer, blocks)
        with pymupdf.open(path) as doc:
            print(f"{path}: {len(doc)} pages, {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
