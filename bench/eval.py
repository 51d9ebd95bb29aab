"""``ragline eval``: ingest a BEIR collection through the real pipeline and score every mode.

The corpus goes through the same job pipeline connectors use, into its own tenant; a second
run finds every content hash unchanged and re-embeds nothing, so all modes share one
embedding pass. Queries run through the same ``SearchService`` as ``/v1/retrieve``; a
document's score is the best (or the sum) of its chunks' scores.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psycopg

from authz.acl import AclFilter
from bench.metrics import BeirCollection, doc_scores_from_chunks, evaluate_run, load_beir
from catalog import jobs as jobs_repo
from catalog.fusion import FusionOverride
from catalog.jobs import NewItem
from catalog.maintenance import live_leaf_count
from catalog.principals import ensure_tenant
from core.records import Acl
from core.settings import Settings
from ragline_client.models import canonical_mode
from retrieve.service import Mode, RetrieveRequest, SearchService

MODES: dict[str, tuple[Mode, bool]] = {
    "lexical": ("lexical", False),
    "dense": ("dense", False),
    "hybrid": ("hybrid", False),
    "hybrid+rerank": ("hybrid", True),
}


def resolve_modes(modes: Sequence[str]) -> list[str]:
    """The modes by their API names (``bm25`` is ``lexical``); SystemExit naming unknown ones."""
    named = [str(canonical_mode(m)) for m in modes]
    unknown = [m for m, n in zip(modes, named, strict=True) if n not in MODES]
    if unknown:
        raise SystemExit(f"unknown modes {unknown}; choose from {list(MODES)} (bm25 = lexical)")
    return list(dict.fromkeys(named))


@dataclass(frozen=True, slots=True)
class ModeReport:
    mode: str
    metrics: dict[str, float]
    evaluated: int
    skipped: int
    latency_ms_p50: float
    latency_ms_p95: float
    degraded: int
    seconds: float


@dataclass(slots=True)
class EvalReport:
    dataset: str
    tenant: str
    ingest_seconds: float
    ingest_state: str | None
    documents: int
    chunks: int
    index_seconds: float
    modes: list[ModeReport] = field(default_factory=list)
    fusion: dict[str, Any] | None = None  # what the modes fused with (the tenant's default included)

    def as_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def ingest_collection(
    collection: BeirCollection, *, tenant: str, url: str, runner: Any
) -> tuple[str | None, int]:
    """One job over the whole corpus (unchanged documents are skipped by content hash)."""
    items = [
        NewItem(
            external_id=d.doc_id,
            mime_type="text/plain",
            title=d.title or None,
            payload=("\n\n".join(p for p in (d.title, d.text) if p)).encode(),
            acl=Acl((), True),
            byte_size=len(d.text),
        )
        for d in collection.iter_corpus()
    ]
    with psycopg.connect(url) as conn:
        ensure_tenant(conn, tenant_id=tenant)
        job_id = jobs_repo.create_job(
            conn, tenant_id=tenant, kind="ingest", items=items, params={"eval": str(collection.root)}
        )
    from core.progress import Progress

    progress = Progress(len(items))
    state = runner.run_job(job_id, on_progress=progress)
    progress.close()
    return state, len(items)


def run_mode(
    service: SearchService,
    collection: BeirCollection,
    *,
    tenant: str,
    mode: str,
    depth: int,
    agg: str,
    ks: Sequence[int],
    fusion: FusionOverride | None = None,
) -> ModeReport:
    kind, rerank = MODES[mode]
    acl = AclFilter(tenant_id=tenant, readers=frozenset({"service:eval"}))
    run: dict[str, list[str]] = {}
    latencies, degraded = [], 0
    started = time.monotonic()
    for qid, text in collection.queries.items():
        if qid not in collection.qrels:
            continue
        t = time.perf_counter()
        result = service.retrieve(
            RetrieveRequest(
                query=text, top_k=depth, mode=kind, rerank=rerank, max_context_tokens=0, fusion=fusion
            ),
            acl,
        )
        latencies.append((time.perf_counter() - t) * 1000)
        degraded += bool(result.degraded)
        hits = [(r.detail.external_id, r.score) for r in result.results]
        run[qid] = doc_scores_from_chunks(hits, agg=agg)  # type: ignore[arg-type]
    scored = evaluate_run(run, collection.qrels, ks)
    lat = sorted(latencies)
    return ModeReport(
        mode,
        {k: round(v, 4) for k, v in scored.table().items()},
        scored.num_evaluated,
        scored.num_skipped,
        round(statistics.median(lat), 2),
        round(lat[int(0.95 * (len(lat) - 1))], 2),
        degraded,
        round(time.monotonic() - started, 1),
    )


def evaluate(
    settings: Settings,
    dataset: Path,
    *,
    modes: Sequence[str],
    ks: Sequence[int] = (10, 100),
    split: str = "test",
    agg: Literal["max", "sum"] = "max",
    depth: int = 200,
    embedder: Any = None,
    use_ray: bool = True,
    fusion: FusionOverride | None = None,
) -> EvalReport:
    """``fusion`` overrides the eval tenant's stored fusion defaults, which apply as to any
    retrieve; the report names the fusion used."""
    from psycopg_pool import ConnectionPool

    from catalog.connect import database_url
    from catalog.db import apply_migrations
    from jobs.rebuild_job import rebuild, rebuild_advice
    from wiring import build_search_service, make_runner, rebuild_config

    modes = resolve_modes(modes)
    collection = load_beir(dataset, split=split)
    tenant = "eval-" + dataset.resolve().name
    url = database_url(settings)
    apply_migrations(url)
    t = time.monotonic()
    runner = make_runner(settings, url, use_ray=use_ray, embedder=embedder)
    state, n_docs = ingest_collection(collection, tenant=tenant, url=url, runner=runner)
    ingest_s = time.monotonic() - t
    t = time.monotonic()
    alias = "eval"
    with psycopg.connect(url) as conn:
        advice = rebuild_advice(
            conn, alias=alias, tombstone_ratio=0.2, delta_chunks=1, model=settings.embedding_model
        )
        if advice.needed:
            from catalog import indexes

            version = rebuild(url, rebuild_config(settings))
            with conn.transaction():
                indexes.swap_alias(conn, alias=alias, version_id=version)
        n_chunks = live_leaf_count(conn, tenant_id=tenant)
    index_s = time.monotonic() - t
    report = EvalReport(
        str(dataset),
        tenant,
        round(ingest_s, 1),
        state,
        n_docs,
        n_chunks,
        round(index_s, 1),
    )
    pool = ConnectionPool(url, min_size=1, max_size=4, open=True)
    embedder = embedder or getattr(runner, "_embedder", None)
    service, close = build_search_service(settings, pool, embedder, alias=alias, watch=False)
    try:
        for mode in modes:
            if MODES[mode][1] and service.reranker is None:
                print(f"skipping {mode}: no reranker configured (RAGLINE_RERANK__MODEL)", file=sys.stderr)
                continue
            report.modes.append(
                run_mode(
                    service, collection, tenant=tenant, mode=mode, depth=depth, agg=agg, ks=ks, fusion=fusion
                )
            )
        report.fusion = service.fusion_for(tenant, fusion).describe()
    finally:
        close()
        pool.close()
    return report


def format_table(report: EvalReport) -> str:
    keys = sorted(
        {k for m in report.modes for k in m.metrics}, key=lambda k: (k.split("@")[0], int(k.split("@")[1]))
    )
    head = ["mode", *keys, "p50 ms", "p95 ms", "queries"]
    rows = [
        [
            m.mode,
            *(f"{m.metrics[k]:.4f}" for k in keys),
            f"{m.latency_ms_p50:.1f}",
            f"{m.latency_ms_p95:.1f}",
            str(m.evaluated),
        ]
        for m in report.modes
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    out = [
        f"{report.dataset}: {report.documents} documents, {report.chunks} chunks;"
        f" ingest {report.ingest_seconds}s ({report.ingest_state}), index {report.index_seconds}s",
        *([f"fusion: {json.dumps(report.fusion, sort_keys=True)}"] if report.fusion else []),
        line(head),
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
        *map(line, rows),
    ]
    return "\n".join(out)


def write_json(report: EvalReport, path: Path) -> None:
    path.write_text(json.dumps(report.as_json(), indent=2))
