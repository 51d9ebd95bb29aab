"""The parse pool: real worker processes; a crash, a hang, a CPU spin or a memory hog costs
its own document a reason code, and the next document finds a healthy worker.

Faults are injected by ``faulty_parser.parse`` (the content names the fault); everything
else, and the PDF bomb, goes through the real parsers inside the real rlimits.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from core.errors import ParseError
from core.records import Failed, ItemRef, ParsedDocument, Prepared, SourceDocument
from ingest.isolation import InProcessParser, ParseRequest
from ingest.parse_pool import ParsePool
from ingest.pipeline import PrepareRequest, prepare_batch
from tests import hostile_factory
from tests.factories import chunking

FAULTY = "tests.unit.ingest.faulty_parser:parse"
MEMORY_MB = 256
MARKDOWN = b"# Pumps\n\nCheck the seals of the feed pump every month.\n\n- gaskets\n- bearings\n"


def _request(content: bytes, mime: str = "text/plain", timeout: float = 30.0) -> ParseRequest:
    return ParseRequest(SourceDocument("t", "d", mime, content), timeout, 10_000_000)


@pytest.fixture(scope="module")
def pool() -> Iterator[ParsePool]:
    pool = ParsePool(workers=2, memory_mb=MEMORY_MB, target=FAULTY)
    pool.start()
    yield pool
    pool.close()


def _code(result: ParsedDocument | ParseError) -> str:
    return result.code if isinstance(result, ParseError) else "ok"


def test_a_worker_parses_exactly_like_this_process(pool: ParsePool) -> None:
    request = _request(MARKDOWN, "text/markdown")
    [isolated] = pool.parse_all([request])
    assert isolated == InProcessParser().parse_all([request])[0]
    assert isinstance(isolated, ParsedDocument) and isolated.title == "Pumps"


@pytest.mark.parametrize(
    ("fault", "timeout", "code"),
    [
        (b"segv", 30.0, "parse_crashed"),
        (b"exit", 30.0, "parse_crashed"),
        (b"xcpu", 30.0, "parse_timeout"),  # what RLIMIT_CPU sends
        (b"hang", 0.5, "parse_timeout"),  # asleep in one call: the parent's kill
        (b"spin", 1.0, "parse_timeout"),  # RLIMIT_CPU or the kill, whichever comes first
        (b"eat", 30.0, "parse_memory_limit"),
    ],
)
def test_a_fault_costs_its_document_only(pool: ParsePool, fault: bytes, timeout: float, code: str) -> None:
    replaced = pool.replaced
    results = pool.parse_all(
        [_request(b"before " * 20), _request(fault, timeout=timeout), _request(MARKDOWN)]
    )
    assert [_code(r) for r in results] == ["ok", code, "ok"], results
    assert pool.replaced == replaced + 1  # the faulty worker is gone, a fresh one took its place
    assert all(isinstance(r, ParsedDocument) for r in pool.parse_all([_request(b"after " * 20)]))


def test_the_real_pdf_bomb_hits_the_memory_limit(pool: ParsePool) -> None:
    # 64 MiB of one text string from a 70 KB file: ~1.8 GB in MuPDF without a limit.
    results = pool.parse_all(
        [_request(hostile_factory.string_bomb(64), "application/pdf"), _request(MARKDOWN)]
    )
    assert [_code(r) for r in results] == ["parse_memory_limit", "ok"]


def test_workers_are_reused_then_recycled() -> None:
    pool = ParsePool(workers=1, memory_mb=MEMORY_MB, max_documents=3, target=FAULTY)
    pool.start()
    try:
        pids = [
            r.text
            for r in pool.parse_all([_request(b"pid") for _ in range(5)])
            if isinstance(r, ParsedDocument)
        ]
    finally:
        pool.close()
    assert len(pids) == 5
    assert pids[0] == pids[1] == pids[2] != pids[3] == pids[4]  # one worker per 3 documents


def test_prepare_batch_on_a_pool_fails_only_the_bad_document(pool: ParsePool) -> None:
    job = uuid.uuid4()
    docs = [(b"fine words " * 40, "text/plain"), (b"segv", "text/plain"), (MARKDOWN, "text/markdown")]
    requests = [
        PrepareRequest(ItemRef(job, i), SourceDocument("t", f"d{i}", mime, data))
        for i, (data, mime) in enumerate(docs)
    ]
    outcomes = prepare_batch(
        requests,
        count_tokens=lambda t: len(t.split()),
        config=chunking(chunk_tokens=16, overlap_tokens=2),
        parser=pool,
    )
    assert [type(o) for o in outcomes] == [Prepared, Failed, Prepared]
    failed = outcomes[1]
    assert isinstance(failed, Failed) and failed.code == "parse_crashed" and "SIGSEGV" in failed.message


def test_the_settings_choose_the_parser() -> None:
    from core.settings import Settings
    from ingest.parse_pool import make_parser
    from wiring.ingest import isolation_config

    config = isolation_config(Settings())
    assert config.enabled and config.workers == 1 and config.memory_mb == 1024  # isolated by default
    off = isolation_config(Settings(ingest={"isolate_parsing": False}))
    assert isinstance(make_parser(off), InProcessParser)
    pool = make_parser(isolation_config(Settings(ingest={"parse_workers": 2})))
    try:
        assert isinstance(pool, ParsePool) and len(pool.worker_pids()) == 2
    finally:
        pool.close()
