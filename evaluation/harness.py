"""Ingest a BEIR collection through the real pipeline and score every search mode.

The corpus goes through the same job pipeline connectors use, into its own tenant; a second
run finds every content hash unchanged and re-embeds nothing, so all modes share one
embedding pass. Queries run through the same ``SearchService`` as ``/v1/retrieve``; a
document's score is the best (or the sum) of its chunks' scores.
"""

from __future__ import annotations

import getpass
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import psycopg
from psycopg_pool import ConnectionPool

from authz.acl import AclFilter
from catalog import indexes
from catalog.connect import migrated_url
from catalog.fusion import FusionOverride
from catalog.maintenance import live_leaf_count
from core.beir import BeirCollection, load_beir
from core.ir_metrics import doc_scores_from_chunks, evaluate_run
from core.progress import Progress
from core.records import Acl
from core.settings import Settings
from evaluation.report import EvalReport, ModeReport
from index.embedder import Embedder
from jobs.rebuild_job import rebuild, rebuild_advice
from jobs.runner import IngestRunner
from ragline_client.models import canonical_mode
from retrieve.service import Mode, RetrieveRequest, SearchService
from services.caller import Caller
from services.ingest import NewItem, queue_ingest
from wiring import build_search_service, make_runner, rebuild_config

# The API's mode names, each with whether the cross-encoder reranks its candidates.
MODES: dict[str, tuple[Mode, bool]] = {
    "lexical": ("lexical", False),
    "dense": ("dense", False),
    "hybrid": ("hybrid", False),
    "hybrid+rerank": ("hybrid", True),
}
# The index alias eval versions are built under: never the serving ``live`` one.
EVAL_ALIAS = "eval"
EVAL_READER = "service:eval"  # every eval document is public; the filter still needs a reader


def resolve_modes(modes: Sequence[str]) -> list[str]:
    """The modes by their API names (``bm25`` is ``lexical``); SystemExit naming unknown ones."""
    named = [str(canonical_mode(m)) for m in modes]
    unknown = [m for m, n in zip(modes, named, strict=True) if n not in MODES]
    if unknown:
        raise SystemExit(f"unknown modes {unknown}; choose from {list(MODES)} (bm25 = lexical)")
    return list(dict.fromkeys(named))


def ingest_collection(
    collection: BeirCollection, *, tenant: str, url: str, runner: IngestRunner
) -> tuple[str, int]:
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
    caller = Caller(f"operator:{getpass.getuser()}", "eval")
    with psycopg.connect(url) as conn:  # queued (and audited) as any ingest is
        job_id = queue_ingest(
            conn, tenant_id=tenant, caller=caller, items=items, params={"eval": str(collection.root)}
        ).job_id
    progress = Progress(len(items))
    state = runner.run_to_end(job_id, on_progress=progress)
    progress.close()
    return state, len(items)


def run_mode(
    service: SearchService,
    collection: BeirCollection,
    *,
    tenant: str,
    mode: str,
    depth: int,
    agg: Literal["max", "sum"],
    ks: Sequence[int],
    fusion: FusionOverride | None = None,
) -> ModeReport:
    """Every judged query of the collection in one mode, scored at document level."""
    kind, rerank = MODES[mode]
    acl = AclFilter(tenant_id=tenant, readers=frozenset({EVAL_READER}))
    run: dict[str, list[str]] = {}
    latencies, degraded = [], 0
    started = time.monotonic()
    for qid, text in collection.queries.items():
        if qid not in collection.qrels:
            continue
        t = time.perf_counter()
        request = RetrieveRequest(
            query=text, top_k=depth, mode=kind, rerank=rerank, max_context_tokens=0, fusion=fusion
        )
        result = service.retrieve(request, acl)
        latencies.append((time.perf_counter() - t) * 1000)
        degraded += bool(result.degraded)
        run[qid] = doc_scores_from_chunks([(r.detail.external_id, r.score) for r in result.results], agg=agg)
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


def index_eval_version(settings: Settings, url: str, *, tenant: str) -> int:
    """Build and point ``EVAL_ALIAS`` at a new version when the catalog moved on; its chunk count."""
    with psycopg.connect(url) as conn:
        advice = rebuild_advice(
            conn, alias=EVAL_ALIAS, tombstone_ratio=0.2, delta_chunks=1, model=settings.embedding_model
        )
        if advice.needed:
            version = rebuild(url, rebuild_config(settings))
            with conn.transaction():
                indexes.swap_alias(conn, alias=EVAL_ALIAS, version_id=version)
        return live_leaf_count(conn, tenant_id=tenant)


def _score_modes(
    settings: Settings,
    url: str,
    report: EvalReport,
    collection: BeirCollection,
    embedder: Embedder | None,
    *,
    modes: Sequence[str],
    depth: int,
    agg: Literal["max", "sum"],
    ks: Sequence[int],
    fusion: FusionOverride | None,
) -> None:
    """Each mode's report appended to ``report``, through one search service on the eval alias."""
    pool = ConnectionPool(url, min_size=1, max_size=4, open=True)
    service, close = build_search_service(settings, pool, embedder, alias=EVAL_ALIAS, watch=False)
    try:
        for mode in modes:
            if MODES[mode][1] and service.rerank_choice(report.tenant).scorer is None:
                print(
                    f"skipping {mode}: no reranker for tenant {report.tenant} (RAGLINE_RERANK__MODEL,"
                    " or its own: ragline reranker gate)",
                    file=sys.stderr,
                )
                continue
            report.modes.append(
                run_mode(
                    service,
                    collection,
                    tenant=report.tenant,
                    mode=mode,
                    depth=depth,
                    agg=agg,
                    ks=ks,
                    fusion=fusion,
                )
            )
        report.fusion = service.fusion_for(report.tenant, fusion).describe()
    finally:
        close()
        pool.close()


def evaluate(
    settings: Settings,
    dataset: Path,
    *,
    modes: Sequence[str],
    ks: Sequence[int] = (10, 100),
    split: str = "test",
    agg: Literal["max", "sum"] = "max",
    depth: int = 200,
    embedder: Embedder | None = None,
    use_ray: bool = True,
    fusion: FusionOverride | None = None,
) -> EvalReport:
    """Ingest ``dataset`` into tenant ``eval-<name>``, index it and score each of ``modes``.

    ``fusion`` overrides the eval tenant's stored fusion defaults, which apply as to any
    retrieve; the report names the fusion used. ``embedder`` reuses a loaded model.
    """
    modes = resolve_modes(modes)
    collection = load_beir(dataset, split=split)
    tenant = "eval-" + dataset.resolve().name
    url = migrated_url(settings)
    t = time.monotonic()
    runner = make_runner(settings, url, use_ray=use_ray, embedder=embedder)
    state, n_docs = ingest_collection(collection, tenant=tenant, url=url, runner=runner)
    ingest_s = time.monotonic() - t
    t = time.monotonic()
    n_chunks = index_eval_version(settings, url, tenant=tenant)
    report = EvalReport(
        str(dataset), tenant, round(ingest_s, 1), state, n_docs, n_chunks, round(time.monotonic() - t, 1)
    )
    # The model the in-process ingest loaded, if any: the queries reuse it.
    embedder = embedder or getattr(runner, "_embedder", None)
    _score_modes(
        settings, url, report, collection, embedder, modes=modes, depth=depth, agg=agg, ks=ks, fusion=fusion
    )
    return report
