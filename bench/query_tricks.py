"""Query-time tricks against today's hybrid, cross-validated (issue 22).

For each BEIR collection: ingest it into a tenant (``ragline tune``'s own ingestion,
``evaluation.tuning.judged_queries``), then per judged query fetch the two candidate legs
through the real ``SearchService`` (``candidate_legs``) and, through the same snapshot, ACL
masks and searcher, run each trick:

- ``rm3``: RM3 expansion of the BM25 leg (``retrieve.feedback.rm3_query`` over the lexical
  leg's top readable candidates, analysed by the shard's tokenizer), searched again with
  ``HybridSearcher.lexical_terms`` (the real shards' weighted BM25, the tenant's statistics);
- ``rocchio``: Rocchio on the dense leg (``retrieve.feedback.rocchio`` over the dense leg's top
  candidates' stored vectors, ``HybridSearcher.vectors_of``), searched again with
  ``HybridSearcher.dense`` (FAISS under the same masks);
- ``title``: a third RRF list, BM25 over document titles alone (a ``LexicalShard`` built from
  the tenant's catalog titles) mapped onto the request's readable candidates, with its weight;
- ``neighbour``: ``retrieve.feedback.neighbour_boost`` of the fused list (same-document
  neighbouring chunks among the candidates).

Each trick's variants and today's hybrid (fused by ``retrieve.service.fuse_lists``, as
``/v1/retrieve`` fuses) are scored per query (nDCG@10, recall@100, documents by their best
chunk), then ``evaluation.cv.cross_validate`` picks each fold's parameters on the other four
folds (the trick always on: the current setting is not a choice) and scores them held out,
with the 95% paired bootstrap interval.

    RAGLINE_DATA_DIR=/tmp/tricks_bench/data OPENBLAS_NUM_THREADS=1 nice -n 15 \\
        python -m bench.query_tricks ../shared/data/cranfield ../shared/data/cisi
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg_pool import ConnectionPool

from authz.acl import AclFilter
from bench.common import print_table
from catalog.connect import migrated_url
from catalog.serving import ChunkDetail, chunk_details
from core.ir_metrics import doc_scores_from_chunks, ndcg_at_k, recall_at_k
from core.records import Hit
from core.settings import Settings
from evaluation import cv
from evaluation.tuning import JudgedQuery, judged_queries
from index.bm25_shards import LexicalShard
from retrieve.feedback import FeedbackDoc, neighbour_boost, rm3_query, rocchio
from retrieve.fusion import FusedHit
from retrieve.hybrid import StageLog, build_masks
from retrieve.service import FusionConfig, RetrieveRequest, SearchService, fuse_lists
from wiring import build_search_service

TOP_K = 100  # results per scored request, as ``ragline tune`` scores
RM3_GRID = [
    {"fb_docs": d, "fb_terms": t, "original_weight": w}
    for d in (5, 10)
    for t in (10, 20)
    for w in (0.3, 0.5, 0.7)
]
ROCCHIO_GRID = [{"fb_docs": d, "alpha": 1.0, "beta": b} for d in (3, 5, 10) for b in (0.25, 0.5, 1.0)]
TITLE_GRID = [{"title_weight": w} for w in (0.25, 0.5, 1.0)]
CHECKS: Counter[str] = Counter()  # sanity checks over every query gathered
NEIGHBOUR_GRID = [{"neighbour_weight": w} for w in (0.1, 0.25, 0.5)]


@dataclass(slots=True)
class Query:
    judged: JudgedQuery
    dense: list[Hit]
    lexical: list[Hit]
    details: dict[int, ChunkDetail]  # readable candidates (SQL re-check), by row
    variants: dict[str, list[list[FusedHit]]]  # trick -> one ranking per grid point


def _hits_from(rows_scores: Sequence[tuple[int, float]], source: str) -> list[Hit]:
    return [Hit(r, s, source) for r, s in rows_scores]


def _fused(
    dense: list[Hit], lexical: list[Hit], config: FusionConfig, extra: list[Hit] | None = None, w: float = 0.0
) -> list[FusedHit]:
    lists = [dense[: config.depth("dense", TOP_K)], lexical[: config.depth("lexical", TOP_K)]]
    weights = [config.dense_weight, config.lexical_weight]
    if extra:
        lists.append(extra)
        weights.append(w)
    return fuse_lists(lists, weights, config)


def gather(
    service: SearchService, queries: Sequence[JudgedQuery], tenant: str, url: str
) -> tuple[list[Query], FusionConfig]:
    config = service.fusion_for(tenant)
    snap = service.state.current
    shards = snap.version.shards if snap.version else ()
    tokenizer = shards[0].lexical.tokenizer
    title_docs = _title_shard(url, tenant, tokenizer)
    embedder = service.embedders.get(snap.model)
    out = []
    checks = CHECKS
    for q in queries:
        acl = AclFilter(tenant_id=tenant, readers=q.readers)
        request = RetrieveRequest(
            query=q.text, top_k=TOP_K, mode="hybrid", rerank=False, max_context_tokens=0
        )
        legs = service.candidate_legs(request, acl)
        masks = build_masks(service.state, snap, acl)
        depth_d, depth_l = config.depth("dense", TOP_K), config.depth("lexical", TOP_K)
        slog = StageLog()
        vec = embedder.submit(q.text).result()
        variants: dict[str, list[list[FusedHit]]] = {}
        # Feedback only from this request's own readable candidates (SQL re-checked).
        feedback_rows = sorted({h.chunk_id for h in (*legs.dense, *legs.lexical)})
        with service.read_pool.connection() as conn:
            details = chunk_details(conn, rows=feedback_rows, tenant_id=tenant, readers=sorted(q.readers))
        readable_lex = [h for h in legs.lexical if h.chunk_id in details]
        readable_dense = [h for h in legs.dense if h.chunk_id in details]
        q_terms = tokenizer.tokenize(q.text)
        # Sanity: the weighted search with the query's own term counts is the lexical leg.
        same = service.searcher.lexical_terms(snap, masks, Counter(q_terms), depth_l, slog)
        checks["identity_queries"] += 1
        checks["identity_differs"] += [h.chunk_id for h in same] != [h.chunk_id for h in legs.lexical]
        rm3 = []
        for p in RM3_GRID:
            fb = [
                FeedbackDoc(tokenizer.tokenize(details[h.chunk_id].text), h.score)
                for h in readable_lex[: int(p["fb_docs"])]
            ]
            weights = rm3_query(
                q_terms, fb, fb_terms=int(p["fb_terms"]), original_weight=p["original_weight"]
            )
            lexical = service.searcher.lexical_terms(snap, masks, weights, depth_l, slog)
            rm3.append(_fused(legs.dense, lexical, config))
        variants["rm3"] = rm3
        stored = service.searcher.vectors_of(snap, [h.chunk_id for h in readable_dense[:10]])
        roc = []
        for p in ROCCHIO_GRID:
            fb_vecs = [
                stored[h.chunk_id] for h in readable_dense[: int(p["fb_docs"])] if h.chunk_id in stored
            ]
            moved = rocchio(vec, fb_vecs, alpha=p["alpha"], beta=p["beta"])
            dense = service.searcher.dense(snap, masks, moved, depth_d, slog)
            roc.append(_fused(dense, legs.lexical, config))
        variants["rocchio"] = roc
        if title_docs is not None:
            shard, doc_ids = title_docs
            scores, pos = shard.search(q.text, len(doc_ids), allowed=None)
            by_doc = {int(doc_ids[p]): float(s) for s, p in zip(scores, pos, strict=True)}
            titled = sorted(
                ((row, by_doc[d.doc_id]) for row, d in details.items() if d.doc_id in by_doc),
                key=lambda x: (-x[1], x[0]),
            )
            extra = _hits_from(titled, "title")
            variants["title"] = [
                _fused(legs.dense, legs.lexical, config, extra, p["title_weight"]) for p in TITLE_GRID
            ]
        base = _fused(legs.dense, legs.lexical, config)
        spans = {row: (d.doc_id, d.char_start) for row, d in details.items()}
        variants["neighbour"] = [
            neighbour_boost(base, spans, weight=p["neighbour_weight"]) for p in NEIGHBOUR_GRID
        ]
        variants["current"] = [base]
        out.append(Query(q, legs.dense, legs.lexical, details, variants))
    return out, config


def _title_shard(url: str, tenant: str, tokenizer: Any) -> tuple[LexicalShard, np.ndarray] | None:
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT doc_id, title FROM documents WHERE tenant_id = %s AND state = 'active'"
            " AND coalesce(title, '') <> '' ORDER BY doc_id",
            (tenant,),
        ).fetchall()
    if not found:
        return None
    ids = np.asarray([d for d, _ in found], dtype=np.int64)
    return LexicalShard.build([t for _, t in found], ids, tokenizer), ids


def _metrics(q: Query, hits: list[FusedHit]) -> tuple[float, float]:
    """nDCG@10 and recall@100 of the first ``TOP_K`` readable hits, documents by best chunk."""
    kept = [h for h in hits if h.chunk_id in q.details][:TOP_K]
    docs = doc_scores_from_chunks([(q.details[h.chunk_id].external_id, h.score) for h in kept])
    qrels = q.judged.qrels
    return ndcg_at_k(docs, qrels, 10), recall_at_k(docs, qrels, 100)


GRIDS: dict[str, list[dict[str, float]]] = {
    "rm3": RM3_GRID, "rocchio": ROCCHIO_GRID, "title": TITLE_GRID, "neighbour": NEIGHBOUR_GRID,
}  # fmt: skip


def evaluate_trick(queries: list[Query], trick: str) -> dict[str, Any]:
    rows_n: list[list[float]] = [[], *([] for _ in GRIDS[trick])]
    rows_r: list[list[float]] = [[], *([] for _ in GRIDS[trick])]
    for q in queries:
        for row, hits in enumerate([*q.variants["current"], *q.variants[trick]]):
            n, r = _metrics(q, hits)
            rows_n[row].append(n)
            rows_r[row].append(r)
    ids = [q.judged.query_id for q in queries]
    res = cv.cross_validate(rows_n, rows_r, 0, ids, k=5, seed=0, choices=range(1, len(rows_n)))
    # The trick as a tunable setting instead (a fold may also choose "off", row 0).
    with_off = cv.cross_validate(rows_n, rows_r, 0, ids, k=5, seed=0)
    total = len(ids)
    held_n = sum(f.ndcg * f.queries for f in res.folds) / total
    cur_n = sum(f.current_ndcg * f.queries for f in res.folds) / total
    held_r = sum(f.recall * f.queries for f in res.folds) / total
    cur_r = sum(f.current_recall * f.queries for f in res.folds) / total
    return {
        "trick": trick,
        "queries": total,
        "ndcg_current": round(cur_n, 4),
        "ndcg_trick": round(held_n, 4),
        "ndcg_diff": round(cv.mean(res.ndcg_differences), 4),
        "ndcg_ci": [round(x, 4) for x in res.interval],
        "recall_current": round(cur_r, 4),
        "recall_trick": round(held_r, 4),
        "recall_diff": round(cv.mean(res.recall_differences), 4),
        "recall_ci": [round(x, 4) for x in res.recall_interval],
        "chosen": [GRIDS[trick][f.chosen - 1] for f in res.folds],
        "off_allowed_ndcg_diff": round(cv.mean(with_off.ndcg_differences), 4),
        "off_allowed_ndcg_ci": [round(x, 4) for x in with_off.interval],
        "off_allowed_folds_on": sum(f.chosen != 0 for f in with_off.folds),
        "final": GRIDS[trick][res.final - 1],
    }


def run(dataset: Path, settings: Settings) -> list[dict[str, Any]]:
    url = migrated_url(settings)
    tenant = "tricks-" + dataset.resolve().name
    t = time.monotonic()
    queries, _, alias, embedder = judged_queries(
        settings,
        url,
        tenant,
        dataset=dataset,
        from_feedback=False,
        split="test",
        use_ray=False,
        embedder=None,
    )
    prepared = time.monotonic() - t
    pool = ConnectionPool(url, min_size=1, max_size=4, open=True)
    service, close = build_search_service(settings, pool, embedder, alias=alias, watch=False)
    try:
        t = time.monotonic()
        gathered, config = gather(service, queries, tenant, url)
        searched = time.monotonic() - t
    finally:
        close()
        pool.close()
    t = time.monotonic()
    out = [evaluate_trick(gathered, trick) for trick in GRIDS if trick in gathered[0].variants]
    for row in out:
        seconds = {
            "prepare": round(prepared, 1),
            "search": round(searched, 1),
            "cv": round(time.monotonic() - t, 1),
        }
        row.update(collection=dataset.name, fusion=config.describe(), seconds=seconds)
    return out


HEADERS = [
    "collection",
    "trick",
    "queries",
    "nDCG@10 current -> trick",
    "diff [95% CI]",
    "recall@100 current -> trick",
    "diff [95% CI]",
    "chosen per fold",
    "nDCG diff if a fold may choose off",
]


def _ci(diff: float, ci: Sequence[float]) -> str:
    return f"{diff:+.4f} [{ci[0]:+.4f}, {ci[1]:+.4f}]"


def _table_row(r: dict[str, Any]) -> list[object]:
    return [
        r["collection"],
        r["trick"],
        r["queries"],
        f"{r['ndcg_current']:.4f} -> {r['ndcg_trick']:.4f}",
        _ci(r["ndcg_diff"], r["ndcg_ci"]),
        f"{r['recall_current']:.4f} -> {r['recall_trick']:.4f}",
        _ci(r["recall_diff"], r["recall_ci"]),
        "; ".join(",".join(f"{v:g}" for v in c.values()) for c in r["chosen"]),
        f"{_ci(r['off_allowed_ndcg_diff'], r['off_allowed_ndcg_ci'])} (on in {r['off_allowed_folds_on']}/5)",
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    if missing := [str(d) for d in args.datasets if not (d / "corpus.jsonl").is_file()]:
        parser.error(f"not a BEIR collection (no corpus.jsonl): {', '.join(missing)}")
    print(f"load average before: {os.getloadavg()}")
    settings = Settings()
    rows = [row for d in args.datasets for row in run(d, settings)]
    print(f"load average after: {os.getloadavg()}")
    print(f"weighted BM25 with the query's own term counts ranks as the lexical leg: {dict(CHECKS)}")
    print_table(HEADERS, [_table_row(r) for r in rows])
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
