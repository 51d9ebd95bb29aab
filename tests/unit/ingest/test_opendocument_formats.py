"""ODT, ODP and ODS parsing on files odfpy writes in the test, and their hostile variants."""

from __future__ import annotations

import io
import zipfile

import pytest

from core.errors import ParseError
from core.records import ParsedDocument, SectionKind, SourceDocument
from ingest import odp, ods, odt, opendocument
from ingest.chunking import chunk_document
from ingest.files import MIME_BY_SUFFIX
from ingest.parse import ODP, ODS, ODT, parse_document, sniff_mime
from ragline_client.models import MIME_TYPES, mime_for_name
from tests import hostile_office
from tests.unit.ingest import office_factory


def _offsets_exact(parsed: ParsedDocument) -> None:
    for section in parsed.sections:
        assert parsed.text[section.char_start : section.char_end] == section.text


def _doc(content: bytes, mime: str) -> SourceDocument:
    return SourceDocument(tenant_id="t", external_id="e", mime_type=mime, content=content)


def _code(content: bytes, mime: str) -> str:
    with pytest.raises(ParseError) as caught:
        parse_document(_doc(content, mime))
    return caught.value.code


def test_odt_headings_lists_tables_and_title() -> None:
    parsed = odt.parse(office_factory.odt_bytes(rows=3))
    _offsets_exact(parsed)
    assert parsed.title == "Operations handbook"
    by_text = {s.text: s for s in parsed.sections}
    assert by_text[office_factory.FACTS["rotation"]].heading_path == ("Security",)
    assert by_text[office_factory.FACTS["backups"]].heading_path == ("Storage", "Backups")
    bullets = by_text["- Report lost laptops at once\n  - to the service desk"]
    assert bullets.kind is SectionKind.LIST
    (table,) = [s for s in parsed.sections if s.kind is SectionKind.TABLE]
    assert table.text.splitlines() == [
        "| Server | Region | Owner |",
        "|---|---|---|",
        "| srv-0000 | region-0 | team 0 |",
        "| srv-0001 | region-1 | team 1 |",
        "| srv-0002 | region-2 | team 2 |",
    ]
    assert table.heading_path == ("Storage", "Backups")
    # Page headers (styles.xml), footnote bodies and the generated table of contents are
    # not the body's text; the footnote's citation mark does not stick to the sentence.
    for dropped in ("INTERNAL HEADER", "FOOTNOTE BODY", "........"):
        assert dropped not in parsed.text
    assert by_text[office_factory.FACTS["backups"]].text.endswith("thirty five days.")


def test_odt_comments_dropped_and_tracked_changes_read_as_accepted() -> None:
    parsed = odt.parse(office_factory.odt_bytes(comment=True, tracked=True))
    assert "reviewer remark" not in parsed.text
    assert parsed.warnings == ("comments_dropped: 1",)
    # The text after the comment stays in its paragraph.
    assert office_factory.FACTS["rotation"] in {s.text for s in parsed.sections}
    assert "Budget status: approved" in parsed.text
    assert "rejected" not in parsed.text


def test_odt_title_falls_back_to_title_style_then_top_heading() -> None:
    from odf import style, text
    from odf.opendocument import OpenDocumentText

    def build(with_title_style: bool) -> bytes:
        document = OpenDocumentText()
        if with_title_style:
            base = style.Style(name="Title", family="paragraph")
            document.styles.addElement(base)
            derived = style.Style(name="P1", family="paragraph", parentstylename=base)
            document.automaticstyles.addElement(derived)
            document.text.addElement(text.P(stylename=derived, text="Harbour   rules"))
        document.text.addElement(text.H(outlinelevel=2, text="Mooring"))
        document.text.addElement(text.H(outlinelevel=1, text="Pilotage"))
        document.text.addElement(text.P(text="Pilots board at the outer buoy."))
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    assert odt.parse(build(True)).title == "Harbour rules"
    assert odt.parse(build(False)).title == "Pilotage"


def test_odt_spaces_tabs_and_breaks_are_the_authors() -> None:
    from odf import text
    from odf.opendocument import OpenDocumentText

    document = OpenDocumentText()
    paragraph = text.P(text="a")
    paragraph.addElement(text.S(c=3))
    paragraph.addText("b")
    paragraph.addElement(text.Tab())
    paragraph.addText("c")
    paragraph.addElement(text.LineBreak())
    paragraph.addText("d   e")
    document.text.addElement(paragraph)
    out = io.BytesIO()
    document.save(out)
    assert odt.parse(out.getvalue()).text == "a   b\tc\nd e"


def test_long_odt_table_repeats_its_header_in_every_group() -> None:
    parsed = odt.parse(office_factory.odt_bytes(rows=200))
    tables = [s for s in parsed.sections if s.kind is SectionKind.TABLE]
    assert len(tables) > 5
    assert all(t.text.startswith("| Server | Region | Owner |\n|---|---|---|\n") for t in tables)
    rows = [line for t in tables for line in t.text.splitlines()[2:]]
    assert rows == [f"| srv-{i:04d} | region-{i % 7} | team {i} |" for i in range(200)]


def test_odp_one_section_per_slide_with_notes_and_tables() -> None:
    parsed = odp.parse(office_factory.odp_bytes(slides=3))
    _offsets_exact(parsed)
    assert parsed.page_count == 3 and parsed.title == "Key rotation"
    headings = [(s.text, s.page_start) for s in parsed.sections if s.kind is SectionKind.HEADING]
    assert headings == [("Key rotation", 1), ("Slide title 2", 2), ("Slide 3", 3)]
    body = next(s for s in parsed.sections if office_factory.FACTS["rotation"] in s.text)
    assert body.heading_path == ("Key rotation",) and body.page_start == 1
    assert body.kind is SectionKind.LIST
    assert body.text.splitlines() == [
        f"- {office_factory.FACTS['rotation']}",
        "  - Old keys are retired after a day",
    ]
    notes = [s for s in parsed.sections if s.text.startswith("Notes: ")]
    assert [(n.text, n.page_start) for n in notes] == [
        ("Notes: Speaker notes for slide 1", 1),
        ("Notes: Speaker notes for slide 2", 2),
    ]
    (table,) = [s for s in parsed.sections if s.kind is SectionKind.TABLE]
    assert table.page_start == 2 and "| uptime | 99.9 |" in table.text
    assert table.heading_path == ("Slide title 2",)


def test_odp_shapes_read_by_position_and_groups_in_place() -> None:
    from odf import draw, style, text
    from odf.opendocument import OpenDocumentPresentation

    deck = OpenDocumentPresentation()
    layout = style.PageLayout(name="Slide")
    deck.automaticstyles.addElement(layout)
    master = style.MasterPage(name="Default", pagelayoutname=layout)
    deck.masterstyles.addElement(master)
    page = draw.Page(masterpagename=master)
    deck.presentation.addElement(page)

    def box(y: str, words: str, x: str = "1cm") -> object:
        frame = draw.Frame(x=x, y=y, width="5cm", height="1cm")
        inner = draw.TextBox()
        inner.addElement(text.P(text=words))
        frame.addElement(inner)
        return frame

    page.addElement(box("3in", "bottom"))
    group = draw.G()
    group.addElement(box("40mm", "group lower"))
    group.addElement(box("2cm", "group upper"))
    page.addElement(group)
    page.addElement(box("10mm", "top right", x="10cm"))
    page.addElement(box("10mm", "top left"))
    out = io.BytesIO()
    deck.save(out)
    parsed = odp.parse(out.getvalue())
    assert [s.text for s in parsed.sections] == [
        "Slide 1",
        "top left",
        "top right",
        "group upper",
        "group lower",
        "bottom",
    ]


def test_ods_one_section_per_sheet_with_cached_values() -> None:
    parsed = ods.parse(office_factory.ods_bytes(rows=3))
    _offsets_exact(parsed)
    assert parsed.page_count == 2 and parsed.warnings == ()
    tables = [s for s in parsed.sections if s.kind is SectionKind.TABLE]
    assert [(t.heading_path, t.page_start) for t in tables] == [(("Servers",), 1), (("Owners",), 2)]
    # The formula column gives its cached office:value, not the display string "64.00 GB";
    # the date its office:date-value; the 1,048,000 empty rows of the tail nothing.
    assert tables[0].text.splitlines() == [
        "| Host | Cores | Memory GB | Total | Bought |",
        "|---|---|---|---|---|",
        "| host-0000 | 4 | 16 | 64 | 2026-12-01 |",
        "| host-0001 | 5 | 16 | 80 | 2026-12-01 |",
        "| host-0002 | 6 | 16 | 96 | 2026-12-01 |",
    ]
    assert tables[1].text.splitlines()[2] == "| platform | ops@example.org |"


def test_ods_formulas_never_calculated_read_as_formulas_with_a_warning() -> None:
    """As XLSX's: a formula cell with neither a cached value nor text (odfpy writes what it
    is given, and no application calculated it) reads as its formula, counted in a warning;
    a calculated one reads as its value and is not counted."""
    from odf import table, text
    from odf.opendocument import OpenDocumentSpreadsheet

    def cell(shown: str | None = None, **attributes: str) -> table.TableCell:
        element = table.TableCell(**attributes)
        if shown is not None:
            element.addElement(text.P(text=shown))
        return element

    book = OpenDocumentSpreadsheet()
    grid = table.Table(name="Budget")
    for cells in (
        [cell("Item", valuetype="string"), cell("Cost", valuetype="string")],
        [cell("Cranes", valuetype="string"), cell("18,450", valuetype="float", value="18450")],
        [
            cell("Doubled", valuetype="string"),
            cell("36,900", formula="of:=[.B2]*2", valuetype="float", value="36900"),
        ],
        [cell("Total", valuetype="string"), cell(formula="of:=SUM([.B2:.B3])")],
    ):
        row = table.TableRow()
        for element in cells:
            row.addElement(element)
        grid.addElement(row)
    book.spreadsheet.addElement(grid)
    out = io.BytesIO()
    book.save(out)
    parsed = parse_document(_doc(out.getvalue(), ODS))
    (sheet,) = [s for s in parsed.sections if s.kind is SectionKind.TABLE]
    assert sheet.text.splitlines()[2:] == [
        "| Cranes | 18450 |",
        "| Doubled | 36900 |",
        "| Total | =SUM([.B2:.B3]) |",
    ]
    assert parsed.warnings == ("formulas_without_values: 1 (Budget: 1)",)


def test_ods_cell_values_by_type() -> None:
    namespaces = " ".join(f'xmlns:{prefix}="{uri}"' for prefix, uri in opendocument.NS.items())

    def value(display: str, attributes: str = "") -> str:
        xml = f"<table:table-cell {namespaces} {attributes}><text:p>{display}</text:p></table:table-cell>"
        return ods.cell_value(opendocument.SafeET.fromstring(xml), opendocument.Notes())

    assert value("25%", 'office:value-type="percentage" office:value="0.25"') == "0.25"
    assert value("1.50 €", 'office:value-type="currency" office:value="1.5" office:currency="EUR"') == "1.5"
    assert value("12:30", 'office:value-type="time" office:time-value="PT12H30M00S"') == "12:30:00"
    assert value("Yes", 'office:value-type="boolean" office:boolean-value="true"') == "TRUE"
    assert (
        value("1 Dec", 'office:value-type="date" office:date-value="2026-12-01T10:15:00"')
        == "2026-12-01T10:15:00"
    )
    assert value("shown", 'office:value-type="string" office:string-value="cached"') == "cached"
    assert value("not a number", 'office:value-type="float" office:value="x"') == "not a number"
    assert value("plain text") == "plain text"


def test_repeated_rows_and_columns_expand_when_they_hold_values() -> None:
    rows = (
        '<table:table-row table:number-rows-repeated="2"><table:table-cell office:value-type="string">'
        '<text:p>a</text:p></table:table-cell><table:table-cell table:number-columns-repeated="2"/>'
        '<table:table-cell table:number-columns-repeated="2" office:value-type="float" office:value="3"/>'
        "</table:table-row>"
    )
    parsed = ods.parse(
        hostile_office._ods_with_sheet(
            '<table:table-row><table:table-cell office:value-type="string"><text:p>h</text:p>'
            "</table:table-cell></table:table-row>" + rows
        )
    )
    (table,) = [s for s in parsed.sections if s.kind is SectionKind.TABLE]
    assert table.text.splitlines()[2:] == ["| a |  |  | 3 | 3 |", "| a |  |  | 3 | 3 |"]


def test_long_ods_sheet_chunks_each_start_with_the_header_row() -> None:
    parsed = ods.parse(office_factory.ods_bytes(rows=400))
    chunks = chunk_document(
        parsed,
        tenant_id="t",
        external_id="x",
        version=1,
        count_tokens=lambda text: len(text) * 2 // 5,
        chunk_tokens=256,
        overlap_tokens=32,
    )
    servers = [c for c in chunks if c.level == 0 and c.heading_path == ("Servers",)]
    assert len(servers) > 10
    for chunk in servers:
        body = chunk.text.removeprefix("Servers\n\n")
        assert body.startswith("| Host | Cores | Memory GB | Total | Bought |\n|---|---|---|---|---|\n"), (
            chunk.text[:80]
        )
        assert all(line.startswith("|") and line.endswith("|") for line in body.splitlines())
    assert {c.page_start for c in servers} == {1}


@pytest.mark.parametrize(
    ("build", "mime"),
    [(office_factory.odt_bytes, ODT), (office_factory.odp_bytes, ODP), (office_factory.ods_bytes, ODS)],
    ids=["odt", "odp", "ods"],
)
def test_odf_files_are_sniffed_whatever_is_declared(build, mime: str) -> None:
    data = build()
    assert sniff_mime(data, "application/octet-stream") == mime
    parsed = parse_document(_doc(data, "text/plain"))
    assert f"mislabelled_content: declared text/plain, parsed as {mime}" in parsed.warnings


def test_odf_types_are_accepted_by_suffix_and_mime_type() -> None:
    for suffix, mime in ((".odt", ODT), (".odp", ODP), (".ods", ODS)):
        assert MIME_BY_SUFFIX[suffix] == mime and mime in MIME_TYPES
        assert mime_for_name(f"report{suffix.upper()}") == mime


@pytest.mark.parametrize(
    ("build", "mime", "code"),
    [
        (lambda: hostile_office.encrypted_odf(office_factory.odt_bytes()), ODT, "encrypted_document"),
        (
            lambda: hostile_office.encrypted_odf(office_factory.ods_bytes()),
            "application/octet-stream",
            "encrypted_document",
        ),
        (
            lambda: hostile_office.zip_bomb(office_factory.odp_bytes(), name="Pictures/zeros.bin"),
            ODP,
            "zip_bomb",
        ),
        (
            lambda: hostile_office.entity_part(office_factory.odt_bytes(), part="content.xml"),
            ODT,
            "unsafe_xml",
        ),
        (
            lambda: hostile_office.entity_part(
                office_factory.ods_bytes(), hostile_office.XXE, part="content.xml"
            ),
            ODS,
            "unsafe_xml",
        ),
        (hostile_office.repeated_row_ods, ODS, "too_many_cells"),
        (
            lambda: hostile_office._replace_part(
                office_factory.odt_bytes(), "content.xml", b"<office:document-content"
            ),
            ODT,
            "corrupt_document",
        ),
    ],
    ids=[
        "encrypted-odt",
        "encrypted-ods-undeclared",
        "odp-zip-bomb",
        "odt-billion-laughs",
        "ods-external-entity",
        "ods-repeated-row",
        "truncated-content",
    ],
)
def test_hostile_odf_files_get_reason_codes(build, mime: str, code: str) -> None:
    assert _code(build(), mime) == code


def test_a_package_with_the_wrong_body_is_corrupt() -> None:
    sheet_as_text = hostile_office._replace_part(office_factory.ods_bytes(), "mimetype", ODT.encode())
    assert _code(sheet_as_text, ODT) == "corrupt_document"
    text_as_sheet = hostile_office._replace_part(office_factory.odt_bytes(), "mimetype", ODS.encode())
    assert _code(text_as_sheet, ODS) == "corrupt_document"


def test_entities_past_the_prologue_check_are_refused_by_the_parser_too() -> None:
    """Defence in depth: a part read without the container's prologue check still cannot
    expand entities."""
    data = hostile_office.entity_part(office_factory.odt_bytes(), part="content.xml")
    with zipfile.ZipFile(io.BytesIO(data)) as archive, pytest.raises(ParseError) as caught:
        opendocument.parse_part(archive, "content.xml")
    assert caught.value.code == "unsafe_xml"


def test_a_deck_past_the_slide_cap_is_refused() -> None:
    from ingest.pptx import MAX_SLIDES

    pages = '<draw:page xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"/>' * (MAX_SLIDES + 1)
    content = (
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0">'
        f"<office:body><office:presentation>{pages}</office:presentation></office:body></office:document-content>"
    )
    deck = hostile_office._replace_part(office_factory.odp_bytes(1), "content.xml", content.encode())
    assert _code(deck, ODP) == "too_many_slides"
