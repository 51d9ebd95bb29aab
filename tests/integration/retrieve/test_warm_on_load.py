"""A serving node warms the catalog when it loads a version (start-up and every swap), before
the version serves; a failing warm-up serves cold instead of stopping the load or the swap."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg_pool import ConnectionPool

from catalog import indexes as indexes_repo
from catalog.bulk import BulkChunk, BulkDocument, bulk_load
from catalog.changes import current_position
from catalog.warm import WarmResult, prewarm_serving_reads
from index.builder import auto_params, build_version
from index.tokenize import Tokenizer
from retrieve.serving import ServingState
from retrieve.watcher import IndexWatcher
from tests.factories import dense
from wiring.search import serving_warmer

pytestmark = pytest.mark.integration

N_DOCS, PER_DOC, DIM, MODEL = 30, 4, 16, "test-model"


def _catalog(conn: psycopg.Connection) -> tuple[np.ndarray, np.ndarray, list[str]]:
    rows = np.arange(1, N_DOCS * PER_DOC + 1, dtype=np.int64)
    doc_ids = (rows - 1) // PER_DOC + 1
    texts = [f"chunk {r} of document {d} alpha{r % 5}" for r, d in zip(rows, doc_ids, strict=True)]
    vec = np.ones(DIM, dtype="<f4").tobytes()
    bulk_load(
        conn,
        tenant_id="t",
        documents=[
            BulkDocument(d, f"d{d}", None, f"h{d}", PER_DOC, public=True)  # type: ignore[arg-type]  # untitled
            for d in range(1, N_DOCS + 1)
        ],
        chunks=[
            BulkChunk(int(r), f"c{r}", int(d), int(r - 1) % PER_DOC, t, 0, 8, vec)
            for r, d, t in zip(rows, doc_ids, texts, strict=True)
        ],
        model=MODEL,
        dim=DIM,
    )
    return rows, doc_ids, texts


def _publish(
    conn: psycopg.Connection, root: Path, version_id: str, catalog: tuple[np.ndarray, np.ndarray, list[str]]
) -> None:
    rows, doc_ids, texts = catalog
    position = current_position(conn)
    path = root / version_id
    indexes_repo.create_version(
        conn, version_id=version_id, path=str(path), model=MODEL, dim=DIM, n_shards=2, params={}
    )
    vectors = np.random.default_rng(len(version_id)).standard_normal((len(rows), DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    build_version(
        root, version_id, row_ids=rows, doc_ids=doc_ids, tenant_ids=None, texts=list(texts),
        vectors=vectors, n_shards=2, shard_by="document",
        dense_params_for=auto_params(dense(), flat_max=10**6, ivfpq_min=10**9), tokenizer=Tokenizer(),
        model_name=MODEL, catalog_position=position,
    )  # fmt: skip
    indexes_repo.mark_ready(conn, version_id=version_id, chunk_count=len(rows), catalog_position=position)
    indexes_repo.swap_alias(conn, alias="live", version_id=version_id)


def _node(pool: ConnectionPool, warm: Callable[[psycopg.Connection], None]) -> IndexWatcher:
    state = ServingState(model_name=MODEL, dim=DIM, tokenizer=Tokenizer(), warm=warm)
    return IndexWatcher(pool, state, alias="live", poll_seconds=60)


def test_start_up_and_every_swap_warm_before_the_version_serves(
    conn: psycopg.Connection, db_url: str, tmp_path: Path
) -> None:
    catalog = _catalog(conn)
    _publish(conn, tmp_path, "v1", catalog)
    warmed: list[tuple[WarmResult, bool, str | None]] = []
    with ConnectionPool(db_url, min_size=1, max_size=2, open=True) as pool:
        watcher = _node(pool, lambda c: None)

        def warm(c: psycopg.Connection) -> None:
            serving = watcher.state.current.version_id if watcher.state.loaded else None
            warmed.append((prewarm_serving_reads(c, budget_s=30), watcher.state.loaded, serving))

        watcher.state.warm = warm
        watcher.start(watch=False)
        assert watcher.readiness() == "ok" and watcher.state.current.version_id == "v1"
        assert len(warmed) == 1
        result, was_serving, _ = warmed[0]
        assert not was_serving  # warmed before the node was ready
        assert result.complete and result.method == "pg_prewarm" and result.blocks == result.total_blocks > 0

        _publish(conn, tmp_path, "v2", catalog)
        with pool.connection() as c:
            assert watcher.check_alias(c) == "v2"
        assert watcher.state.current.version_id == "v2" and len(warmed) == 2
        assert warmed[1][1:] == (True, "v1")  # the old version served while the new one warmed
        assert warmed[1][0].complete


def test_a_failing_warm_up_serves_cold(conn: psycopg.Connection, db_url: str, tmp_path: Path) -> None:
    catalog = _catalog(conn)
    _publish(conn, tmp_path, "v1", catalog)
    calls: list[int] = []

    def broken(c: psycopg.Connection) -> None:  # fault injection: the database refuses
        calls.append(1)
        c.execute("SELECT pg_prewarm('no_such_relation'::regclass)")

    with ConnectionPool(db_url, min_size=1, max_size=2, open=True) as pool:
        watcher = _node(pool, broken)
        watcher.start(watch=False)
        assert watcher.state.current.version_id == "v1" and watcher.last_swap_error is None
        _publish(conn, tmp_path, "v2", catalog)
        with pool.connection() as c:
            assert watcher.check_alias(c) == "v2"
            c.execute("SELECT 1")  # the connection went back usable: the failed warm-up was rolled back
        assert len(calls) == 2 and watcher.last_swap_error is None


def _samples(method: str, outcome: str) -> float:
    labels = {"method": method, "outcome": outcome}
    return REGISTRY.get_sample_value("ragline_serving_warm_seconds_count", labels) or 0.0


def test_the_wired_warm_up_is_timed_into_a_metric(
    conn: psycopg.Connection, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    _catalog(conn)
    assert serving_warmer(0) is None  # retrieve.warm_seconds = 0 turns it off
    warm = serving_warmer(30)
    assert warm is not None
    before = _samples("pg_prewarm", "complete")
    with caplog.at_level("INFO", logger="wiring.search"):
        warm(conn)
    assert _samples("pg_prewarm", "complete") == before + 1
    assert any("warmed the catalog for serving with pg_prewarm" in r.getMessage() for r in caplog.records)
    failing = _samples("none", "error")
    gone = psycopg.connect(db_url)
    gone.close()  # fault injection: the database connection is lost
    with pytest.raises(psycopg.Error):
        warm(gone)
    assert _samples("none", "error") == failing + 1
