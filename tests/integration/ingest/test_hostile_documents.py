"""Hostile documents through the real API, ingest runner, parse workers and PostgreSQL.

A normal document is indexed first; then each case is pushed as its own job. Every case
must end in a per-document outcome (a reason code, or indexed where the input is
legitimately fine), the first document must still be searchable after it, and the API
process's peak RSS growth during the case (``VmHWM`` after resetting it, Linux) must stay
under the parse workers' memory limit: the bombs cost a worker, never the server. The
table of peaks is printed (``-s`` not needed) and recorded in docs/benchmarks.md.

The cases are run once for the module (the big PDFs are built once, in milliseconds:
see ``tests/hostile_factory.py``); the tests below check what each one recorded.
"""

from __future__ import annotations

import base64
import dataclasses
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from api.app import ServiceHook, create_app
from api.services import ingest_hook, search_hook
from core.settings import Settings
from ingest.parse import DOCX, EML, ODP, ODS, ODT, PNG, PPTX, XLSX
from tests import hostile_factory, hostile_office
from tests.conftest import truncate_all
from tests.integration.api.conftest import make_key, wait_job
from tests.unit.ingest import office_factory

pytestmark = pytest.mark.integration

MEMORY_MB = 512
TIMEOUT_S = 60.0
BOMB_TIMEOUT_S = 4.0  # the whitespace bomb would lex for minutes inside one MuPDF call
# Large chunks: 100k paragraphs still parse and chunk as 100k sections, but embed as ~50
# chunks instead of ~450 (the suite is about parsing; embedding would dominate its time).
CHUNK_TOKENS = 2048
INDEXED = "indexed"
BASELINE = ("baseline", "albatross")


@dataclass(frozen=True)
class Doc:
    external_id: str
    content: bytes
    mime_type: str
    expect: str  # INDEXED, a job reason code, or "rejected:<code>" at the push
    word: str = ""  # a word only this document has: a lexical search must find it


@dataclass(frozen=True)
class Case:
    name: str
    docs: tuple[Doc, ...]
    timeout_s: float = TIMEOUT_S
    upload: bool = False  # multipart upload (staged file) instead of a JSON push


def _cases() -> list[Case]:
    ids = [
        Doc("x" * 512, b"A page about the osprey.", "text/plain", INDEXED, "osprey"),
        Doc("y" * 513, b"Too long an id.", "text/plain", "rejected:invalid_document"),
        Doc("a/b/../c", b"Notes about the heron.", "text/plain", INDEXED, "heron"),
        Doc("..", b"Notes about the egret.", "text/plain", INDEXED, "egret"),
        Doc("../../etc/passwd", b"Notes about the bittern.", "text/plain", INDEXED, "bittern"),
        Doc("文档-ü-🚀/ñ", b"Notes about the kestrel.", "text/plain", INDEXED, "kestrel"),
    ]
    nested = b"<html><body>" + b"<div>" * 100_000 + b"deep kingfisher text" + b"</div>" * 100_000
    return [
        Case(
            "pdf_2000_pages",
            (
                Doc(
                    "pages.pdf",
                    hostile_factory.many_pages(2000, "zebrafinch"),
                    "application/pdf",
                    INDEXED,
                    "zebrafinch",
                ),
            ),
            upload=True,
        ),
        Case(
            "pdf_100mb_image_stream",
            (
                Doc(
                    "image.pdf",
                    hostile_factory.huge_image(100, "otters"),
                    "application/pdf",
                    INDEXED,
                    "otters",
                ),
            ),
        ),
        Case(
            "pdf_string_bomb_64mb",
            (Doc("strbomb.pdf", hostile_factory.string_bomb(64), "application/pdf", "parse_memory_limit"),),
        ),
        Case(
            "pdf_flate_bomb_4gb",
            (
                Doc(
                    "wsbomb.pdf",
                    hostile_factory.whitespace_bomb(4096, "void"),
                    "application/pdf",
                    "parse_timeout",
                ),
            ),
            timeout_s=BOMB_TIMEOUT_S,
        ),
        Case("html_nested_100k", (Doc("nested.html", nested, "text/html", INDEXED, "kingfisher"),)),
        Case(
            "paragraphs_100k",
            (Doc("paras.txt", b"a\n\n" * 100_000 + b"pelican", "text/plain", INDEXED, "pelican"),),
        ),
        Case(
            "invalid_utf8",
            (
                Doc(
                    "bad.txt",
                    b"Valve \xff\xfe\xc3( notes on the cormorant. " * 200,
                    "text/plain",
                    INDEXED,
                    "cormorant",
                ),
            ),
        ),
        Case(
            "utf16_bom",
            (
                Doc(
                    "wide.txt",
                    "Ünïcödé manual about the flamingo.\n".encode("utf-16"),
                    "text/plain",
                    INDEXED,
                    "flamingo",
                ),
            ),
        ),
        Case(
            "nul_bytes",
            (
                Doc("nuls.txt", b"\x00" * 100_000 + b"text", "text/plain", "binary_content"),
                Doc(
                    "stray-nul.txt",
                    b"Pump \x00notes about the puffin. " * 20,
                    "text/plain",
                    INDEXED,
                    "puffin",
                ),
            ),
        ),
        Case("external_ids", tuple(ids)),
        *_new_kinds(),
    ]


def _new_kinds() -> list[Case]:
    """Office, spreadsheet, image and e-mail files (tests/hostile_office.py)."""
    docx = office_factory.docx_bytes()
    return [
        Case("docx_zip_bomb_1gb", (Doc("bomb.docx", hostile_office.zip_bomb(docx), DOCX, "zip_bomb"),)),
        Case(
            "docx_billion_laughs", (Doc("laughs.docx", hostile_office.entity_part(docx), DOCX, "unsafe_xml"),)
        ),
        Case(
            "docx_password", (Doc("locked.docx", hostile_office.encrypted(docx), DOCX, "encrypted_document"),)
        ),
        Case(
            "xlsx_1m_cells",
            (Doc("cells.xlsx", hostile_office.million_cell_xlsx(), XLSX, "too_many_cells"),),
        ),
        Case("pptx_500_slides", (Doc("deck.pptx", office_factory.pptx_bytes(500), PPTX, INDEXED, "ninety"),)),
        Case("png_20000x20000", (Doc("huge.png", hostile_office.huge_png(), PNG, "image_too_large"),)),
        Case(
            "eml_1000_nested_parts",
            (Doc("nested.eml", hostile_office.nested_mime(1000), EML, "mime_too_complex"),),
        ),
        *_opendocument_kinds(),
    ]


def _opendocument_kinds() -> list[Case]:
    """ODT, ODP and ODS files: the same bombs, and the caps XLSX and PPTX files hit."""
    odt = office_factory.odt_bytes()
    bomb = hostile_office.zip_bomb(odt, name="Pictures/zeros.bin")
    laughs = hostile_office.entity_part(odt, part="content.xml")
    xxe = hostile_office.entity_part(office_factory.ods_bytes(), hostile_office.XXE, part="content.xml")
    return [
        Case("odt_zip_bomb_1gb", (Doc("bomb.odt", bomb, ODT, "zip_bomb"),)),
        Case("odt_billion_laughs", (Doc("laughs.odt", laughs, ODT, "unsafe_xml"),)),
        Case("ods_external_entity", (Doc("xxe.ods", xxe, ODS, "unsafe_xml"),)),
        Case(
            "odt_password", (Doc("locked.odt", hostile_office.encrypted_odf(odt), ODT, "encrypted_document"),)
        ),
        Case("ods_1m_cells", (Doc("cells.ods", hostile_office.million_cell_ods(), ODS, "too_many_cells"),)),
        Case(
            "ods_row_repeated_1m_times",
            (Doc("repeated.ods", hostile_office.repeated_row_ods(), ODS, "too_many_cells"),),
        ),
        Case("odp_500_slides", (Doc("deck.odp", office_factory.odp_bytes(500), ODP, INDEXED, "ninety"),)),
    ]


CASES = _cases()


@dataclass
class Row:
    case: str
    outcomes: dict[str, str]  # external id -> what happened
    growth_mb: float  # peak RSS of this process during the case, above its RSS before
    seconds: float
    baseline_found: bool
    found: dict[str, bool]  # indexed documents of the case: found by their word right after


@dataclass
class Run:
    client: TestClient
    query_key: str
    rows: dict[str, Row] = field(default_factory=dict)
    peak_method: str = "VmHWM (reset per case)"
    lost: list[str] = field(default_factory=list)  # indexed documents not found after every case
    deleted: tuple[int, bool, bool] = (0, True, False)  # status, deleted found, neighbour found


def _status_mb(name: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    raise LookupError(name)


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def _found(run: Run, word: str, external_id: str) -> bool:
    body = {"query": word, "mode": "lexical", "top_k": 10}
    resp = run.client.post("/v1/retrieve", json=body, headers={"Authorization": f"Bearer {run.query_key}"})
    assert resp.status_code == 200, resp.text
    return external_id in {r["document_external_id"] for r in resp.json()["results"]}


def _push(client: TestClient, token: str, case: Case) -> tuple[str | None, dict[str, str]]:
    auth = {"Authorization": f"Bearer {token}"}
    if case.upload:
        [doc] = case.docs
        resp = client.post(
            "/v1/documents:upload",
            headers=auth,
            files={"file": ("f", doc.content, doc.mime_type)},
            data={"external_id": doc.external_id, "mime_type": doc.mime_type, "acl": '{"public": true}'},
        )
    else:
        docs = [
            {
                "external_id": d.external_id,
                "content_base64": base64.b64encode(d.content).decode(),
                "mime_type": d.mime_type,
                "acl": {"public": True},
            }
            for d in case.docs
        ]
        resp = client.post("/v1/documents", json={"documents": docs}, headers=auth)
    assert resp.status_code == 202, resp.text
    body = resp.json()
    return body["job_id"], {r["external_id"]: f"rejected:{r['code']}" for r in body["rejections"]}


def _run_case(run: Run, ingest_key: str, case: Case) -> Row:
    runner = run.client.app.state.runner  # type: ignore[attr-defined]
    runner.config = dataclasses.replace(
        runner.config,
        chunking=dataclasses.replace(runner.config.chunking, parse_timeout_seconds=case.timeout_s),
    )
    before = _status_mb("VmRSS")
    max_rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    exact = _reset_peak()
    started = time.monotonic()
    job_id, outcomes = _push(run.client, ingest_key, case)
    job = wait_job(run.client, ingest_key, job_id, timeout=300) if job_id else {"errors": []}
    seconds = time.monotonic() - started
    if exact:
        growth = _status_mb("VmHWM") - before
    else:  # no clear_refs: the lifetime peak's growth (a lower bound of the case's own peak)
        run.peak_method = "ru_maxrss growth"
        growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - max_rss_before
    failed = {e["external_id"]: e["code"] for e in job["errors"]}
    for doc in case.docs:
        outcomes.setdefault(doc.external_id, failed.get(doc.external_id, INDEXED))
    found = {d.external_id: _found(run, d.word, d.external_id) for d in case.docs if d.word}
    return Row(case.name, outcomes, growth, seconds, _found(run, *reversed(BASELINE)), found)


@pytest.fixture(scope="module")
def run(pg_url: str, embedder, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    truncate_all(pg_url)
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("hostile"),
        database_url=pg_url,
        ingest={
            "parse_memory_mb": MEMORY_MB,
            "parse_timeout_seconds": TIMEOUT_S,
            "chunk_tokens": CHUNK_TOKENS,
        },
    )
    hooks: list[ServiceHook] = [
        partial(ingest_hook, embedder=embedder),
        partial(search_hook, embedder=embedder),
    ]
    with TestClient(create_app(settings, hooks=hooks)) as client:
        runner = client.app.state.runner  # type: ignore[attr-defined]
        runner.config = dataclasses.replace(runner.config, use_ray=False)
        ingest_key = make_key(pg_url, "acme", ["ingest"])
        state = Run(client, make_key(pg_url, "acme", ["query"], principal="user:reader"))
        baseline = Case(
            "baseline", (Doc(BASELINE[0], b"# Birds\n\nThe albatross glides.", "text/markdown", INDEXED),)
        )
        state.rows["baseline"] = _run_case(state, ingest_key, baseline)
        for case in CASES:
            state.rows[case.name] = _run_case(state, ingest_key, case)
        indexed = [d for c in CASES for d in c.docs if d.expect == INDEXED and d.word]
        state.lost = [d.external_id for d in indexed if not _found(state, d.word, d.external_id)]
        state.deleted = _delete_by_path(state, ingest_key, "a/b/../c")
        yield state


def _delete_by_path(run: Run, token: str, external_id: str) -> tuple[int, bool, bool]:
    """Delete ``a/b/../c`` through its quoted path: is it gone, and is ``..`` still there?"""
    auth = {"Authorization": f"Bearer {token}"}
    resp = run.client.delete(f"/v1/documents/{quote(external_id, safe='')}", headers=auth)
    assert resp.json()["external_id"] == external_id, resp.text
    return resp.status_code, _found(run, "heron", external_id), _found(run, "egret", "..")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_case_has_its_own_outcome_and_loses_nothing(run: Run, case: Case) -> None:
    row = run.rows[case.name]
    assert row.outcomes == {d.external_id: d.expect for d in case.docs}
    assert row.baseline_found, f"the first document is no longer searchable after {case.name}"
    indexed = {d.external_id for d in case.docs if d.expect == INDEXED and d.word}
    assert {ext for ext, found in row.found.items() if found} == indexed


def test_every_indexed_document_is_still_searchable_at_the_end(run: Run) -> None:
    assert run.lost == []


def test_ids_with_slashes_and_dots_are_deleted_by_their_path(run: Run) -> None:
    assert run.deleted == (200, False, True)


def test_the_api_process_rss_stays_under_the_worker_memory_limit(
    run: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    with capsys.disabled():
        print(
            f"\nhostile documents: API process peak RSS growth per case ({run.peak_method}),"
            f" parse worker limit {MEMORY_MB} MB"
        )
        print(f"{'case':<26} {'peak growth MB':>14} {'seconds':>8}  outcomes")
        for row in run.rows.values():
            outcomes = ", ".join(sorted(set(row.outcomes.values())))
            print(f"{row.case:<26} {row.growth_mb:>14.1f} {row.seconds:>8.1f}  {outcomes}")
    if run.peak_method != "VmHWM (reset per case)":
        # a lifetime peak's growth is only a lower bound of a case's own (often 0): no check
        pytest.skip("needs /proc/self/clear_refs to measure each case's own peak RSS")
    assert all(row.growth_mb < MEMORY_MB for row in run.rows.values()), run.rows
