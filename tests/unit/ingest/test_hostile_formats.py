"""Hostile files of the new kinds through real parse workers under their rlimits: each costs
its own document a reason code, and the next document still parses. Every new format also
comes back from a worker exactly as it parses in this process."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from core.errors import ParseError
from core.records import ParsedDocument, SourceDocument
from ingest.isolation import InProcessParser, ParseRequest
from ingest.parse import CSV, DOCX, EML, EPUB, ODP, ODS, ODT, PNG, PPTX, XLSX
from ingest.parse_pool import ParsePool
from tests import hostile_office
from tests.unit.ingest import office_factory

MEMORY_MB = 512


def _request(content: bytes, mime: str, timeout: float = 60.0) -> ParseRequest:
    return ParseRequest(SourceDocument("t", "d", mime, content), timeout, 50_000_000)


@pytest.fixture(scope="module")
def pool() -> Iterator[ParsePool]:
    pool = ParsePool(workers=2, memory_mb=MEMORY_MB)
    pool.start()
    yield pool
    pool.close()


def test_every_new_format_comes_back_from_a_worker_as_parsed_here(pool: ParsePool) -> None:
    requests = [
        _request(office_factory.docx_bytes(), DOCX),
        _request(office_factory.pptx_bytes(), PPTX),
        _request(office_factory.xlsx_bytes(), XLSX),
        _request(office_factory.csv_bytes(), CSV),
        _request(office_factory.epub_bytes(), EPUB),
        _request(office_factory.eml_bytes(), EML),  # carries parsed metadata
        _request(office_factory.odt_bytes(comment=True), ODT),  # carries a warning
        _request(office_factory.odp_bytes(), ODP),
        _request(office_factory.ods_bytes(), ODS),
    ]
    if shutil.which("tesseract"):
        requests.append(_request(office_factory.png_bytes(["Parsed in a worker."]), PNG))
    isolated = pool.parse_all(requests)
    assert all(isinstance(result, ParsedDocument) for result in isolated), isolated
    assert isolated == InProcessParser().parse_all(requests)


CASES = [
    ("docx_zip_bomb_1gb", lambda: hostile_office.zip_bomb(office_factory.docx_bytes()), DOCX, "zip_bomb"),
    ("xlsx_zip_bomb_1gb", lambda: hostile_office.zip_bomb(office_factory.xlsx_bytes()), XLSX, "zip_bomb"),
    (
        "docx_billion_laughs",
        lambda: hostile_office.entity_part(office_factory.docx_bytes()),
        DOCX,
        "unsafe_xml",
    ),
    (
        "docx_external_entity",
        lambda: hostile_office.entity_part(office_factory.docx_bytes(), hostile_office.XXE),
        DOCX,
        "unsafe_xml",
    ),
    (
        "docx_password",
        lambda: hostile_office.encrypted(office_factory.docx_bytes()),
        DOCX,
        "encrypted_document",
    ),
    ("csv_1m_cells", hostile_office.million_cell_csv, CSV, "too_many_cells"),
    (
        "odt_zip_bomb_1gb",
        lambda: hostile_office.zip_bomb(office_factory.odt_bytes(), name="Pictures/zeros.bin"),
        ODT,
        "zip_bomb",
    ),
    (
        "odt_billion_laughs",
        lambda: hostile_office.entity_part(office_factory.odt_bytes(), part="content.xml"),
        ODT,
        "unsafe_xml",
    ),
    (
        "ods_external_entity",
        lambda: hostile_office.entity_part(
            office_factory.ods_bytes(), hostile_office.XXE, part="content.xml"
        ),
        ODS,
        "unsafe_xml",
    ),
    (
        "odt_password",
        lambda: hostile_office.encrypted_odf(office_factory.odt_bytes()),
        ODT,
        "encrypted_document",
    ),
    ("ods_1m_cells", hostile_office.million_cell_ods, ODS, "too_many_cells"),
    ("ods_row_repeated_1m_times", hostile_office.repeated_row_ods, ODS, "too_many_cells"),
    ("png_20000x20000", hostile_office.huge_png, PNG, "image_too_large"),
    ("eml_1000_nested_parts", hostile_office.nested_mime, EML, "mime_too_complex"),
]


@pytest.mark.parametrize(("name", "build", "mime", "code"), CASES, ids=[c[0] for c in CASES])
def test_hostile_file_costs_its_own_document(pool: ParsePool, name: str, build, mime: str, code: str) -> None:
    hostile, after = pool.parse_all([_request(build(), mime), _request(office_factory.docx_bytes(), DOCX)])
    assert isinstance(hostile, ParseError) and hostile.code == code, (name, hostile)
    assert isinstance(after, ParsedDocument) and office_factory.FACTS["rotation"] in after.text
