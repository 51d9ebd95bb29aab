"""Office files, spreadsheets, scans and images built with the writer libraries for the tests.

Nothing here is a stored blob: every file is written by python-docx, python-pptx, openpyxl,
PyMuPDF or Pillow when a test asks for it.
"""

from __future__ import annotations

import io
from typing import Any

import pymupdf

# What each format says, so the same facts can be searched for in every one of them.
FACTS = {
    "rotation": "Signing keys are rotated every ninety days by the platform team.",
    "backups": "Database backups run nightly and are kept for thirty five days.",
}


def docx_bytes(*, rows: int = 3, comment: bool = False, tracked: bool = False) -> bytes:
    """Title, two headings with paragraphs, a bullet, a table of ``rows`` rows, a page header."""
    import docx

    document = docx.Document()
    document.core_properties.title = "Operations handbook"
    document.sections[0].header.paragraphs[0].text = "INTERNAL HEADER TEXT"
    document.add_heading("Security", 1)
    first = document.add_paragraph(FACTS["rotation"])
    document.add_paragraph("Report lost laptops at once", style="List Bullet")
    document.add_heading("Storage", 1)
    document.add_heading("Backups", 2)
    document.add_paragraph(FACTS["backups"])
    table = document.add_table(rows=1, cols=3)
    for cell, text in zip(table.rows[0].cells, ("Server", "Region", "Owner"), strict=True):
        cell.text = text
    for index in range(rows):
        cells = table.add_row().cells
        cells[0].text, cells[1].text, cells[2].text = (
            f"srv-{index:04d}",
            f"region-{index % 7}",
            f"team {index}",
        )
    if comment:
        document.add_comment(first.runs, text="reviewer remark", author="rev")
    if tracked:
        _tracked_paragraph(document)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _tracked_paragraph(document: object) -> None:
    """A paragraph with a tracked insertion ("approved") and deletion ("rejected")."""
    from docx.oxml import parse_xml

    w = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    change = "w:author='a' w:date='2024-01-01T00:00:00Z'"
    xml = (
        f"<w:p {w}><w:r><w:t xml:space='preserve'>Budget status: </w:t></w:r>"
        f"<w:ins w:id='1' {change}><w:r><w:t>approved</w:t></w:r></w:ins>"
        f"<w:del w:id='2' {change}><w:r><w:delText>rejected</w:delText></w:r></w:del>"
        "</w:p>"
    )
    document.element.body.append(parse_xml(xml))  # type: ignore[attr-defined]


def pptx_bytes(slides: int = 3) -> bytes:
    """Titled slides with bullets and notes; slide 2 holds a table; the last has no title."""
    import pptx
    from pptx.util import Inches

    deck = pptx.Presentation()
    for number in range(1, slides + 1):
        if number == slides and slides > 1:
            slide = deck.slides.add_slide(deck.slide_layouts[6])
            box = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(6), Inches(1))
            box.text_frame.text = f"Closing words on slide {number}."
            continue
        slide = deck.slides.add_slide(deck.slide_layouts[1] if number != 2 else deck.slide_layouts[5])
        slide.shapes.title.text = "Key rotation" if number == 1 else f"Slide title {number}"
        if number == 2:
            table = slide.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(6), Inches(2)).table
            for r, row in enumerate((("Metric", "Value"), ("uptime", "99.9"), ("latency", "42 ms"))):
                for c, text in enumerate(row):
                    table.cell(r, c).text = text
        else:
            body = slide.placeholders[1].text_frame
            body.text = FACTS["rotation"] if number == 1 else f"Body text of slide {number}"
            extra = body.add_paragraph()
            extra.text, extra.level = "Old keys are retired after a day", 1
        slide.notes_slide.notes_text_frame.text = f"Speaker notes for slide {number}"
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def xlsx_bytes(rows: int = 5) -> bytes:
    """Two sheets: ``Servers`` (header + ``rows`` rows, a formula column) and ``Owners``."""
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Servers"
    sheet.append(["Host", "Cores", "Memory GB", "Total"])
    for index in range(rows):
        row = index + 2
        sheet.append([f"host-{index:04d}", 4 + index % 4, 16, f"=B{row}*C{row}"])
    owners = book.create_sheet("Owners")
    owners.append(["Team", "Contact"])
    owners.append(["platform", "ops@example.org"])
    out = io.BytesIO()
    book.save(out)
    return _with_cached_values(out.getvalue(), rows)


def _with_cached_values(data: bytes, rows: int) -> bytes:
    """openpyxl writes formulas without results; add the values Excel would have cached."""
    import zipfile

    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            body = source.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                text = body.decode().replace("<v></v>", "").replace("<v />", "")
                for index in range(rows):
                    row = index + 2
                    value = (4 + index % 4) * 16
                    text = text.replace(f"<f>B{row}*C{row}</f>", f"<f>B{row}*C{row}</f><v>{value}</v>", 1)
                body = text.encode()
            target.writestr(item, body)
    return out.getvalue()


def uncalculated_xlsx_bytes() -> bytes:
    """A budget as openpyxl writes it: formulas (a plain one, one over another sheet, an
    array formula) with no cached values, as no spreadsheet application ever calculated them."""
    import openpyxl
    from openpyxl.worksheet.formula import ArrayFormula

    book = openpyxl.Workbook()
    budget = book.active
    budget.title = "Budget"
    budget.append(["Item", "Cost"])
    budget.append(["Cranes", 18450])
    budget.append(["Pallets", 920])
    budget.append(["Total", "=SUM(B2:B3)"])
    budget["C1"] = "Doubled"
    budget["C2"] = ArrayFormula("C2:C3", "=B2:B3*2")
    summary = book.create_sheet("Summary")
    summary.append(["Measure", "Value"])
    summary.append(["Budget total", "=Budget!B4"])
    summary.append(["Owner", "Marta Quintero"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def csv_bytes(rows: int = 4, delimiter: str = ",") -> bytes:
    lines = [delimiter.join(("city", "country", "population"))]
    lines += [delimiter.join((f"city{index}", "Freedonia", str(1000 + index))) for index in range(rows)]
    return ("\n".join(lines) + "\n").encode()


def text_image(lines: list[str], *, size: int = 40, width: int = 1700) -> object:
    """A Pillow image of ``lines`` in DejaVu Sans (Debian's fonts-dejavu), black on white."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype("DejaVuSans.ttf", size)
    height = 120 + len(lines) * int(size * 1.6)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    for index, line in enumerate(lines):
        draw.text((60, 60 + index * int(size * 1.6)), line, font=font, fill=0)
    return image


def png_bytes(lines: list[str]) -> bytes:
    out = io.BytesIO()
    text_image(lines).save(out, format="PNG")  # type: ignore[attr-defined]
    return out.getvalue()


def scanned_pdf(pages: list[list[str] | str]) -> bytes:
    """A PDF whose ``list`` pages are images of text (scans) and ``str`` pages real text."""
    doc = pymupdf.open()
    for content in pages:
        page = doc.new_page()
        if isinstance(content, str):
            page.insert_text((72, 100), content, fontsize=11)
            continue
        png = png_bytes(content)
        page.insert_image(
            pymupdf.Rect(36, 36, page.rect.width - 36, 36 + (page.rect.width - 72) * 0.4), stream=png
        )
    return doc.tobytes()


def epub_bytes(chapters: int = 3) -> bytes:
    """An EPUB 3 of ``chapters`` chapters; chapter 2 has no heading of its own (its title is
    in the table of contents only) and a table."""
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("urn:test:book")
    book.set_title("The Lighthouse Manual")
    book.set_language("en")
    items = []
    for number in range(1, chapters + 1):
        item = epub.EpubHtml(title=f"Chapter {number} title", file_name=f"ch{number}.xhtml", lang="en")
        if number == 2:
            item.content = (
                "<html><body><p>The lamp is cleaned every morning.</p>"
                "<table><tr><th>Part</th><th>Interval</th></tr><tr><td>lens</td><td>daily</td></tr></table>"
                "</body></html>"
            )
        else:
            item.content = (
                f"<html><body><h1>Chapter {number}: Keepers</h1><p>Chapter {number} tells of the keepers.</p>"
                "</body></html>"
            )
        book.add_item(item)
        items.append(item)
    book.toc = tuple(epub.Link(i.file_name, i.title, f"id{n}") for n, i in enumerate(items))
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *items]
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()


def eml_bytes(*, attachments: bool = True) -> bytes:
    """A message with plain and HTML alternatives, a DOCX, a CSV and a ZIP attached."""
    from email.message import EmailMessage

    message = EmailMessage()
    message["Subject"] = "Quarterly audit results"
    message["From"] = "Alice Auditor <alice@example.org>"
    message["To"] = "ops@example.org"
    message["Date"] = "Tue, 01 Dec 2026 09:30:00 +0000"
    message.set_content("Plain body: the audit found two issues.")
    message.add_alternative(
        "<html><body><p>HTML body: the audit found <b>two issues</b>.</p>"
        "<table><tr><th>Issue</th><th>Severity</th></tr><tr><td>stale keys</td><td>high</td></tr></table>"
        "</body></html>",
        subtype="html",
    )
    if attachments:
        message.add_attachment(
            docx_bytes(),
            maintype="application",
            subtype="vnd.openxmlformats-officedocument.wordprocessingml.document",
            filename="handbook.docx",
        )
        message.add_attachment(csv_bytes(rows=2), maintype="text", subtype="csv", filename="cities.csv")
        message.add_attachment(b"PK\x03\x04zip", maintype="application", subtype="zip", filename="bundle.zip")
    return message.as_bytes()


def _odf_bytes(document: Any) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _odf_table(rows: list[list[str]], *, header: bool = True) -> Any:
    from odf import table, text

    grid = table.Table(name="Table1")
    grid.addElement(table.TableColumn(numbercolumnsrepeated=len(rows[0])))
    target = table.TableHeaderRows() if header else grid
    for index, values in enumerate(rows):
        row = table.TableRow()
        for value in values:
            cell = table.TableCell(valuetype="string")
            cell.addElement(text.P(text=value))
            row.addElement(cell)
        target.addElement(row)
        if index == 0 and header:
            grid.addElement(target)
            target = grid
    return grid


def odt_bytes(*, rows: int = 3, comment: bool = False, tracked: bool = False) -> bytes:
    """The DOCX of ``docx_bytes`` as ODT, written by odfpy: a title, outline-level headings, a
    bullet with a nested one, a table of ``rows`` rows (header in ``table-header-rows``), a
    page header, a footnote and a table of contents (both dropped)."""
    from odf import dc, office, style, text
    from odf.opendocument import OpenDocumentText

    document = OpenDocumentText()
    document.meta.addElement(dc.Title(text="Operations handbook"))
    layout = style.PageLayout(name="Page")
    document.automaticstyles.addElement(layout)
    master = style.MasterPage(name="Standard", pagelayoutname=layout)
    header = style.Header()
    header.addElement(text.P(text="INTERNAL HEADER TEXT"))
    master.addElement(header)
    document.masterstyles.addElement(master)
    contents = text.TableOfContent(name="Contents")
    index = text.IndexBody()
    index.addElement(text.P(text="Security ........ 1"))
    contents.addElement(index)
    document.text.addElement(contents)
    document.text.addElement(text.H(outlinelevel=1, text="Security"))
    first = text.P(text=FACTS["rotation"])
    if comment:
        remark = office.Annotation()
        remark.addElement(text.P(text="reviewer remark"))
        first.addElement(remark)
    document.text.addElement(first)
    bullets, item = text.List(), text.ListItem()
    item.addElement(text.P(text="Report lost laptops at once"))
    nested, inner = text.List(), text.ListItem()
    inner.addElement(text.P(text="to the service desk"))
    nested.addElement(inner)
    item.addElement(nested)
    bullets.addElement(item)
    document.text.addElement(bullets)
    document.text.addElement(text.H(outlinelevel=1, text="Storage"))
    document.text.addElement(text.H(outlinelevel=2, text="Backups"))
    backups = text.P(text=FACTS["backups"])
    note = text.Note(id="ftn1", noteclass="footnote")
    note.addElement(text.NoteCitation(text="1"))
    note_body = text.NoteBody()
    note_body.addElement(text.P(text="FOOTNOTE BODY TEXT"))
    note.addElement(note_body)
    backups.addElement(note)
    document.text.addElement(backups)
    table_rows = [["Server", "Region", "Owner"]]
    table_rows += [[f"srv-{i:04d}", f"region-{i % 7}", f"team {i}"] for i in range(rows)]
    document.text.addElement(_odf_table(table_rows))
    if tracked:
        _odf_tracked_paragraph(document)
    return _odf_bytes(document)


def _odf_tracked_paragraph(document: Any) -> None:
    """A paragraph with a tracked insertion ("approved") and deletion ("rejected"), as
    LibreOffice records them: the inserted text in place between change marks, the deleted
    text only in the change log."""
    from odf import dc, office, text
    from odf.namespaces import TEXTNS, XMLNS

    def region(name: str) -> Any:
        return text.ChangedRegion(qattributes={(XMLNS, "id"): name, (TEXTNS, "id"): name})

    def info() -> Any:
        element = office.ChangeInfo()
        element.addElement(dc.Creator(text="a"))
        element.addElement(dc.Date(text="2024-01-01T00:00:00"))
        return element

    log = text.TrackedChanges()
    inserted = region("ct1")
    insertion = text.Insertion()
    insertion.addElement(info())
    inserted.addElement(insertion)
    deleted = region("ct2")
    deletion = text.Deletion()
    deletion.addElement(info())
    deletion.addElement(text.P(text="rejected"))
    deleted.addElement(deletion)
    log.addElement(inserted)
    log.addElement(deleted)
    document.text.insertBefore(log, document.text.childNodes[0])
    paragraph = text.P(text="Budget status: ")
    paragraph.addElement(text.ChangeStart(changeid="ct1"))
    paragraph.addText("approved")
    paragraph.addElement(text.ChangeEnd(changeid="ct1"))
    paragraph.addElement(text.Change(changeid="ct2"))
    document.text.addElement(paragraph)


def odp_bytes(slides: int = 3) -> bytes:
    """The deck of ``pptx_bytes`` as ODP, written by odfpy: titled slides with an outline
    (a nested bullet) and notes; slide 2 holds a table; the last has no title."""
    from odf import draw, presentation, style, text
    from odf.namespaces import PRESENTATIONNS
    from odf.opendocument import OpenDocumentPresentation

    deck = OpenDocumentPresentation()
    layout = style.PageLayout(name="Slide")
    deck.automaticstyles.addElement(layout)
    master = style.MasterPage(name="Default", pagelayoutname=layout)
    deck.masterstyles.addElement(master)

    def frame(kind: str | None, y: str, *paragraphs: Any) -> Any:
        shape = draw.Frame(x="2cm", y=y, width="20cm", height="3cm")
        if kind:
            shape.setAttrNS(PRESENTATIONNS, "class", kind)
        box = draw.TextBox()
        for paragraph in paragraphs:
            box.addElement(paragraph)
        shape.addElement(box)
        return shape

    for number in range(1, slides + 1):
        page = draw.Page(masterpagename=master, name=f"page{number}")
        deck.presentation.addElement(page)
        if number == slides and slides > 1:
            page.addElement(frame(None, "4cm", text.P(text=f"Closing words on slide {number}.")))
            continue
        title = "Key rotation" if number == 1 else f"Slide title {number}"
        if number == 2:
            grid = draw.Frame(x="2cm", y="5cm", width="20cm", height="6cm")
            grid.addElement(
                _odf_table([["Metric", "Value"], ["uptime", "99.9"], ["latency", "42 ms"]], header=False)
            )
            page.addElement(grid)
        else:
            outline, item = text.List(), text.ListItem()
            item.addElement(text.P(text=FACTS["rotation"] if number == 1 else f"Body text of slide {number}"))
            nested, inner = text.List(), text.ListItem()
            inner.addElement(text.P(text="Old keys are retired after a day"))
            nested.addElement(inner)
            item.addElement(nested)
            outline.addElement(item)
            page.addElement(frame("outline", "5cm", outline))
        page.addElement(frame("title", "1cm", text.P(text=title)))  # written last, placed first
        notes = presentation.Notes()
        notes.addElement(frame("notes", "15cm", text.P(text=f"Speaker notes for slide {number}")))
        page.addElement(notes)
    return _odf_bytes(deck)


def ods_bytes(rows: int = 5) -> bytes:
    """The workbook of ``xlsx_bytes`` as ODS, written by odfpy: ``Servers`` (a formula column
    with cached values whose display strings differ, a date column) and ``Owners``; each sheet
    ends, as LibreOffice saves one, in an empty row repeated to the millionth."""
    from odf import table, text
    from odf.opendocument import OpenDocumentSpreadsheet

    book = OpenDocumentSpreadsheet()

    def cell(shown: object, display: str | None = None, **typed: str) -> Any:
        element = table.TableCell(**typed)
        element.addElement(text.P(text=display if display is not None else str(shown)))
        return element

    def sheet(name: str, rows_of_cells: list[list[Any]]) -> Any:
        grid = table.Table(name=name)
        for cells in rows_of_cells:
            row = table.TableRow()
            for element in cells:
                row.addElement(element)
            row.addElement(table.TableCell(numbercolumnsrepeated=1020))
            grid.addElement(row)
        tail = table.TableRow(numberrowsrepeated=1_048_000)
        tail.addElement(table.TableCell(numbercolumnsrepeated=1024))
        grid.addElement(tail)
        return grid

    header = [cell(name, valuetype="string") for name in ("Host", "Cores", "Memory GB", "Total", "Bought")]
    body = []
    for index in range(rows):
        cores, total = 4 + index % 4, (4 + index % 4) * 16
        body.append(
            [
                cell(f"host-{index:04d}", valuetype="string"),
                cell(cores, valuetype="float", value=str(cores)),
                cell(16, valuetype="float", value="16"),
                cell(
                    total,
                    f"{total}.00 GB",
                    valuetype="float",
                    value=str(total),
                    formula=f"of:=[.B{index + 2}]*[.C{index + 2}]",
                ),
                cell("", "01/12/2026", valuetype="date", datevalue="2026-12-01"),
            ]
        )
    book.spreadsheet.addElement(sheet("Servers", [header, *body]))
    owners = [[cell("Team", valuetype="string"), cell("Contact", valuetype="string")]]
    owners.append([cell("platform", valuetype="string"), cell("ops@example.org", valuetype="string")])
    book.spreadsheet.addElement(sheet("Owners", owners))
    return _odf_bytes(book)
