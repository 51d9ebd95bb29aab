"""Issue 17: cancellation stops at the next batch boundary, and tenants share the runner.

The big document is "big" relative to tiny chunks and encode batches set through the
runner's config, so it takes many encode calls in a second or two of real embedding.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from catalog import jobs as jobs_repo
from catalog.jobs import NewItem
from catalog.principals import ensure_tenant
from core.records import Acl
from index.embedder import Embedder
from jobs.runner import IngestRunner, RunnerConfig
from testkit.embedders import HookedEmbedder
from tests import factories

pytestmark = pytest.mark.integration

EMBED_BATCH = 4
# Words the small documents never use: an encode call holding one is the big document's.
BIG_WORDS = "zebra yak walrus vulture urchin tapir salamander raven quokka panther ocelot newt".split()
SMALL_WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()


def _big_text() -> str:
    return "\n\n".join(
        " ".join(BIG_WORDS[(p + w) % len(BIG_WORDS)] for w in range(50)) + "." for p in range(30)
    )


def _small_text(i: int) -> str:
    return " ".join(SMALL_WORDS[(i + w) % len(SMALL_WORDS)] for w in range(20)) + "."


def _is_big(texts: Sequence[str]) -> bool:
    return any(BIG_WORDS[0] in t for t in texts)


def _config(db_url: str, tmp_path: Path, **overrides: Any) -> RunnerConfig:
    return factories.runner(
        db_url,
        tmp_path,
        use_ray=False,
        embed_batch=EMBED_BATCH,
        chunking=factories.chunking(chunk_tokens=32, overlap_tokens=4),
        **overrides,
    )


def _job(db_url: str, tenant: str, docs: Sequence[tuple[str, str]]) -> uuid.UUID:
    with psycopg.connect(db_url) as conn:
        ensure_tenant(conn, tenant_id=tenant)
        items = [
            NewItem(external_id=ext, mime_type="text/plain", payload=text.encode(), acl=Acl((), True))
            for ext, text in docs
        ]
        return jobs_repo.create_job(conn, tenant_id=tenant, kind="ingest", items=items)


def _assert_consistent(conn: psycopg.Connection, tenant: str, present: set[str]) -> None:
    """Exactly ``present`` exist, each with one whole version: chunks, leaf vectors, change."""
    docs = conn.execute(
        "SELECT external_id, current_version, state FROM documents WHERE tenant_id = %s", (tenant,)
    ).fetchall()
    assert {d[0] for d in docs} == present and all(d[1] == 1 and d[2] == "active" for d in docs)
    rows = conn.execute(
        "SELECT d.external_id, v.chunk_count, count(c.chunk_row),"
        " count(c.chunk_row) FILTER (WHERE c.level = 0), count(e.chunk_row)"
        " FROM documents d JOIN document_versions v ON v.doc_id = d.doc_id"
        " LEFT JOIN chunks c ON c.doc_id = d.doc_id AND c.version = v.version"
        " LEFT JOIN chunk_embeddings e ON e.chunk_row = c.chunk_row"
        " WHERE d.tenant_id = %s GROUP BY d.external_id, v.chunk_count",
        (tenant,),
    ).fetchall()
    assert {r[0] for r in rows} == present
    for _, expected, chunks, leaves, vectors in rows:
        assert chunks == expected and vectors == leaves > 0
    orphans = conn.execute(
        "SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.doc_id = c.doc_id)"
    ).fetchone()
    assert orphans == (0,)
    changes = conn.execute(
        "SELECT count(*) FROM catalog_changes WHERE tenant_id = %s AND kind = 'version'", (tenant,)
    ).fetchone()
    assert changes == (len(present),)


def _assert_counts_honest(conn: psycopg.Connection, job_id: uuid.UUID) -> None:
    job = jobs_repo.get_job(conn, job_id=job_id)
    assert job is not None
    items = jobs_repo.items(conn, job_id=job_id)
    finished = [i for i in items if i.state not in ("pending", "cancelled")]
    assert job.documents_done == len(finished)
    assert job.chunks == sum(i.chunks for i in finished)


def test_cancel_during_a_big_document_stops_at_the_next_encode_batch(
    db_url: str, tmp_path: Path, embedder: Embedder
) -> None:
    job_id = _job(
        db_url,
        "acme",
        [("s0", _small_text(0)), ("s1", _small_text(1)), ("big", _big_text()), ("s3", _small_text(3))],
    )
    cancel_at = 3
    seen_at_cancel: list[int] = []

    def cancel_on_third_big_call(texts: Sequence[str]) -> None:
        if _is_big(texts) and wrapped.calls_with(BIG_WORDS[0]) == cancel_at and not seen_at_cancel:
            seen_at_cancel.append(len(wrapped.calls))
            with psycopg.connect(db_url, autocommit=True) as conn:
                jobs_repo.request_cancel(conn, job_id=job_id, tenant_id="acme")

    wrapped = HookedEmbedder(embedder, cancel_on_third_big_call)
    runner = IngestRunner(_config(db_url, tmp_path, batch_documents=2), lambda: wrapped)
    assert runner.run_job(job_id) == "cancelled"

    # The encode call during which the cancel came was the last one: the next boundary stopped it.
    assert seen_at_cancel and len(wrapped.calls) == seen_at_cancel[0]
    assert wrapped.calls_with(BIG_WORDS[0]) == cancel_at
    with psycopg.connect(db_url) as conn:
        # The big document had many more batches to go: it was stopped inside, not after.
        states = {i.external_id: i.state for i in jobs_repo.items(conn, job_id=job_id)}
        assert states == {"s0": "succeeded", "s1": "succeeded", "big": "cancelled", "s3": "cancelled"}
        _assert_consistent(conn, "acme", {"s0", "s1"})
        _assert_counts_honest(conn, job_id)
        job = jobs_repo.get_job(conn, job_id=job_id)
        assert job is not None and job.state == "cancelled" and job.documents_done == 2
        # Cancelled items are resumable: the rest of the job completes exactly once.
        assert jobs_repo.reopen_job(conn, job_id=job_id, tenant_id="acme") is not None
        conn.commit()
    wrapped.before = None
    assert runner.run_job(job_id) == "succeeded"
    assert wrapped.calls_with(BIG_WORDS[0]) > cancel_at + 2  # the whole big document needed many more batches
    with psycopg.connect(db_url) as conn:
        _assert_consistent(conn, "acme", {"s0", "s1", "big", "s3"})
        _assert_counts_honest(conn, job_id)


def _orphan(db_url: str, job_id: uuid.UUID, *, cancel: bool) -> None:
    """Make a job look like one a dead process was running (lease long expired)."""
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "UPDATE jobs SET state = 'running', owner = 'deadhost:1:abc',"
            " started_at = now() - interval '2 hours',"
            " heartbeat_at = now() - interval '1 hour', cancel_requested = %s WHERE job_id = %s",
            (cancel, job_id),
        )


def test_cancel_requested_job_at_start_up_is_settled_not_resumed(
    db_url: str, tmp_path: Path, embedder: Embedder
) -> None:
    doomed = _job(db_url, "acme", [("d0", "doomed " + _small_text(0)), ("d1", "doomed " + _small_text(1))])
    _orphan(db_url, doomed, cancel=True)
    behind = _job(db_url, "acme", [("n0", "survivor " + _small_text(5))])  # same tenant, queued behind it
    wrapped = HookedEmbedder(embedder)
    runner = IngestRunner(_config(db_url, tmp_path), lambda: wrapped)
    finished: list[tuple[uuid.UUID, str]] = []
    runner.on_finished = lambda conn, job_id, state: finished.append((job_id, state))
    runner.start(resume=True)
    try:
        assert runner.wait_idle(timeout=120)
    finally:
        runner.close()
    assert sorted(finished) == sorted([(doomed, "cancelled"), (behind, "succeeded")])
    # The cancelled job's documents were never even embedded.
    texts = [t for call in wrapped.calls for t in call]
    assert any("survivor" in t for t in texts) and not any("doomed" in t for t in texts)
    with psycopg.connect(db_url) as conn:
        assert {i.state for i in jobs_repo.items(conn, job_id=doomed)} == {"cancelled"}
        _assert_consistent(conn, "acme", {"n0"})
        _assert_counts_honest(conn, doomed)
        _assert_counts_honest(conn, behind)


def test_another_tenants_small_job_finishes_while_a_big_job_runs(
    db_url: str, tmp_path: Path, embedder: Embedder
) -> None:
    big_started, small_done = threading.Event(), threading.Event()
    waited_for_small: list[bool] = []

    def hold_big_until_small_is_done(texts: Sequence[str]) -> None:
        if _is_big(texts) and not waited_for_small:
            big_started.set()
            # A sequential runner never gets to the small job: this wait would time out.
            waited_for_small.append(small_done.wait(timeout=60))

    wrapped = HookedEmbedder(embedder, hold_big_until_small_is_done)
    runner = IngestRunner(_config(db_url, tmp_path, concurrent_jobs=2), lambda: wrapped)
    order: list[uuid.UUID] = []

    def on_finished(conn: psycopg.Connection, job_id: uuid.UUID, state: str) -> None:
        order.append(job_id)
        if job_id == small:
            small_done.set()

    runner.on_finished = on_finished
    small = uuid.uuid4()  # replaced below; on_finished reads it when the small job ends
    runner.start(resume=False)
    try:
        big = _job(db_url, "tenant-a", [("big", _big_text())])
        runner.submit(big)
        assert big_started.wait(timeout=60)
        small = _job(db_url, "tenant-b", [("one", _small_text(2))])
        runner.submit(small)
        assert runner.wait_idle(timeout=120)
    finally:
        runner.close()
    assert waited_for_small == [True]
    assert order == [small, big]
    with psycopg.connect(db_url) as conn:
        for job_id in (small, big):
            job = jobs_repo.get_job(conn, job_id=job_id)
            assert job is not None and job.state == "succeeded"
        _assert_consistent(conn, "tenant-a", {"big"})
        _assert_consistent(conn, "tenant-b", {"one"})


def test_claims_are_fair_one_running_job_per_tenant(db_url: str) -> None:
    a1 = _job(db_url, "ta", [("x", "x")])
    a2 = _job(db_url, "ta", [("y", "y")])
    b1 = _job(db_url, "tb", [("z", "z")])
    with psycopg.connect(db_url, autocommit=True) as conn:
        claim = lambda owner: jobs_repo.claim_next(conn, owner=owner, lease_seconds=60)  # noqa: E731
        assert claim("w1") == a1
        assert claim("w2") == b1  # not a2: tenant ta already has a running job
        assert claim("w3") is None
        assert jobs_repo.renew_lease(conn, job_id=a1, owner="w1") == "held"
        assert jobs_repo.renew_lease(conn, job_id=a1, owner="w9") == "lost"
        jobs_repo.finish_job(conn, job_id=a1)
        assert claim("w3") == a2
        # w2 died: once its lease ran out, its job is taken over (and its tenant not blocked).
        conn.execute("UPDATE jobs SET heartbeat_at = now() - interval '1 hour' WHERE job_id = %s", (b1,))
        b2 = _job(db_url, "tb", [("q", "q")])
        # The process running b1 (a slow batch, not dead) neither takes it over nor starts b2.
        assert jobs_repo.claim_next(conn, owner="w2", lease_seconds=60, exclude=[b1]) is None
        assert claim("w4") == b1
        assert jobs_repo.renew_lease(conn, job_id=b1, owner="w2") == "lost"
        assert claim("w5") is None  # b2 waits for b1's new owner
        jobs_repo.request_cancel(conn, job_id=b1, tenant_id="tb")
        assert jobs_repo.renew_lease(conn, job_id=b1, owner="w4") == "cancel"
        b2_row = jobs_repo.get_job(conn, job_id=b2)
        assert b2_row is not None and b2_row.state == "queued"  # never started behind b1


def test_concurrent_claims_never_start_two_jobs_of_one_tenant(db_url: str) -> None:
    for tenant in ("ta", "tb"):
        for i in range(4):
            _job(db_url, tenant, [(f"{tenant}{i}", "text")])
    claimed: list[uuid.UUID] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def claim(n: int) -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            start.wait()
            job = jobs_repo.claim_next(conn, owner=f"replica{n}", lease_seconds=60)
            if job is not None:
                with lock:
                    claimed.append(job)

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    with psycopg.connect(db_url) as conn:
        tenants = conn.execute(
            "SELECT tenant_id FROM jobs WHERE state = 'running' ORDER BY tenant_id"
        ).fetchall()
    assert len(claimed) == 2 and [t[0] for t in tenants] == ["ta", "tb"]


@pytest.mark.slow
def test_cancel_on_the_ray_path_commits_nothing_after_the_cancel(
    db_url: str, tmp_path: Path, ray_local: None
) -> None:
    n, per_batch = 12, 4
    job_id = _job(db_url, "rayco", [(f"r{i}", _small_text(i)) for i in range(n)])
    config = factories.runner(
        db_url,
        tmp_path,
        inline_max_documents=0,
        use_ray=True,
        embed_actors=1,
        batch_documents=per_batch,
        embed_batch=EMBED_BATCH,
        embedding=factories.embedding(backend="torch"),  # no ONNX export in the test
    )
    runner = IngestRunner(config, lambda: pytest.fail("the Ray path must not load an in-process embedder"))
    committed: list[int] = []

    def cancel_after_first_batch(documents: int, chunks: int) -> None:
        committed.append(documents)
        with psycopg.connect(db_url, autocommit=True) as conn:
            jobs_repo.request_cancel(conn, job_id=job_id, tenant_id="rayco")

    assert runner.run_job(job_id, on_progress=cancel_after_first_batch) == "cancelled"
    assert len(committed) == 1  # no batch was committed after the cancel
    with psycopg.connect(db_url) as conn:
        items = jobs_repo.items(conn, job_id=job_id)
        done = {i.external_id for i in items if i.state == "succeeded"}
        assert len(done) == committed[0] and {i.state for i in items} == {"succeeded", "cancelled"}
        _assert_consistent(conn, "rayco", done)
        _assert_counts_honest(conn, job_id)


def test_a_cancel_after_the_last_item_cancelled_nothing(db_url: str) -> None:
    # The issue: a fully indexed job was shown ``cancelled``; it ends as what it did.
    job_id = _job(db_url, "acme", [("x", "x")])
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert jobs_repo.claim_next(conn, owner="w1", lease_seconds=60) == job_id
        assert jobs_repo.finish_item(conn, job_id=job_id, item_no=0, state="succeeded", chunks=1)
        jobs_repo.request_cancel(conn, job_id=job_id, tenant_id="acme")
        assert jobs_repo.finish_job(conn, job_id=job_id) == "succeeded"
