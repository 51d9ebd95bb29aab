"""The gate a model migration's target version must pass before it serves.

1. completeness: the version holds exactly the catalog's live leaf chunks at its position
   (per-shard counts, ``ragline index verify``'s reconciliation);
2. index quality: recall@10 of each built ANN shard against exact search, with a sample of
   the shard's own stored vectors as queries;
3. retrieval quality (when a BEIR-layout dataset is configured): nDCG@10 of the target
   minus the live version, both through the real search path;
4. a sample of real queries answered by both, each with its own principal's ACL (a query
   file, or the last retrieves of the audit log when it stores query text): the top-10 overlap.

Label-free checks that run on every migration, with or without a gate dataset (a small or
easy gate set can pass a broken model: bag-of-token overlap alone scores well on it):

5. structure: each sampled document's own title (or heading path), asked as its ACL allows,
   must find that document in the top 10 (dense mode), about as often as on the live version;
6. agreement: the top-10 overlap of both versions on those same label-free queries;
7. space health: the mean cosine similarity of chunks from different documents; a collapsed
   space (random weights, broken pooling) puts everything close to everything. Measured on
   the bundled tests' corpus: live MiniLM 0.08, its CLS-pooling variant (anisotropic, still
   reasonable) 0.56, random weights 0.96.

A target fails "structure" when its hit rate is below the live one by more than
``structure_tolerance``; "space_health" when its unrelated pairs leave less room to identical
(``1 - cos``) than ``health_spread_ratio`` times the live version's (0.2: five times closer
to identical than live's); "agreement" only when it also disagrees with the live
version (mean overlap below ``agreement_floor``) without finding its own structure better.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import psycopg

from authz.acl import AclFilter, build_acl_filter
from authz.principals import Principal
from catalog import audit, gate_probes
from catalog import principals as principals_repo
from catalog.indexes import VersionRow
from core.beir import load_beir
from core.ir_metrics import ndcg_at_k
from index.builder import load_version
from index.faiss_shards import exact_search
from jobs.index_verify import reconcile
from retrieve.service import RetrieveRequest, SearchService

K = 10
GATE_READER = "service:reembed-gate"

# An ACL filter and a query text, answered by both versions.
SampleQuery = tuple[AclFilter, str]
# Opens a search service over one index version (by id) for the length of the block.
SearchOpener = Callable[[str], AbstractContextManager[SearchService]]


@dataclass(frozen=True, slots=True)
class GateConfig:
    recall_floor: float
    recall_sample: int
    dataset: Path | None
    dataset_tenant: str | None
    tolerance: float
    mode: Literal["dense", "hybrid"]
    query_file: Path | None
    query_sample: int
    audit_queries: bool  # no query file: sample the audit log's retrieves (audit.store_query_text)
    structure_probes: int = 200
    structure_tolerance: float = 0.1
    health_pairs: int = 500
    health_spread_ratio: float = 0.2
    agreement_floor: float = 0.2


def completeness(conn: psycopg.Connection, target: VersionRow, *, live_chunks: int) -> dict[str, Any]:
    """Per-shard counts against the live chunks at the build position, and reconciliation."""
    version = load_version(Path(target.path))
    shards = [int(s.dense.ntotal) for s in version.shards]
    rec = reconcile(conn, target)
    passed = sum(shards) == live_chunks and rec.ok
    return {
        "passed": passed,
        "shard_vectors": shards,
        "vectors": sum(shards),
        "live_chunks_at_position": live_chunks,
        "catalog_position": target.catalog_position,
        "reconcile": rec.as_json(),
    }


def index_recall(target: VersionRow, *, sample: int, floor: float, seed: int = 0) -> dict[str, Any]:
    """recall@10 of each shard's ANN search against exact search over the same vectors."""
    version = load_version(Path(target.path))
    rng = np.random.default_rng(seed)
    per_shard: list[dict[str, Any]] = []
    for shard in version.shards:
        dense = shard.dense
        n = int(dense.ntotal)
        if n == 0:
            continue
        picks = np.sort(rng.choice(n, size=min(sample, n), replace=False))
        queries = np.asarray(dense.vectors[picks], dtype=np.float32)
        k = min(K, n)
        _, exact = exact_search(dense.vectors, queries, k)
        _, ann = dense.search(queries, k, allowed=None, strategy="unfiltered")
        hits = sum(len(set(a[a >= 0]) & set(e[e >= 0])) for a, e in zip(ann, exact, strict=True))
        per_shard.append(
            {"kind": dense.kind, "vectors": n, "recall_at_10": round(hits / (k * len(picks)), 4)}
        )
    worst = min((s["recall_at_10"] for s in per_shard), default=1.0)
    return {"passed": worst >= floor, "floor": floor, "min_recall_at_10": worst, "shards": per_shard}


def ndcg_at_10(ranked: Sequence[str], qrels: Mapping[str, int]) -> float:
    """nDCG@10 with linear gains (Järvelin & Kekäläinen 2002), as trec_eval's ``ndcg_cut.10``:
    the same definition ``ragline eval`` scores with (``core.ir_metrics``)."""
    return ndcg_at_k(ranked, qrels, K)


def _ranked_docs(service: SearchService, query: str, acl: AclFilter, mode: str) -> tuple[list[str], str, str]:
    result = service.retrieve(
        RetrieveRequest(query=query, top_k=3 * K, mode=mode, max_context_tokens=0, rerank=False),  # type: ignore[arg-type]
        acl,
    )
    docs = list(dict.fromkeys(r.detail.external_id for r in result.results))
    return docs, result.index_version, result.embedding_model


def retrieval_quality(
    live: SearchService, target: SearchService, config: GateConfig
) -> dict[str, Any] | None:
    """nDCG@10 of both versions over the gate dataset; None when no dataset is configured."""
    if config.dataset is None or config.dataset_tenant is None:
        return None
    collection = load_beir(config.dataset)
    acl = AclFilter(tenant_id=config.dataset_tenant, readers=frozenset({GATE_READER}))
    scores: dict[str, list[float]] = {"live": [], "target": []}
    for qid, text in collection.queries.items():
        qrels = collection.qrels.get(qid)
        if not qrels:
            continue
        for name, service in (("live", live), ("target", target)):
            docs, _, _ = _ranked_docs(service, text, acl, config.mode)
            scores[name].append(ndcg_at_10(docs, qrels))
    n = len(scores["live"])
    live_ndcg = sum(scores["live"]) / n if n else 0.0
    target_ndcg = sum(scores["target"]) / n if n else 0.0
    delta = target_ndcg - live_ndcg
    return {
        "passed": n > 0 and delta >= -config.tolerance,
        "queries": n,
        "mode": config.mode,
        "live_ndcg_at_10": round(live_ndcg, 4),
        "target_ndcg_at_10": round(target_ndcg, 4),
        "delta": round(delta, 4),
        "tolerance": config.tolerance,
    }


def read_query_file(path: Path, limit: int) -> list[tuple[str, frozenset[str], str]]:
    """``tenant<TAB>query`` or ``tenant<TAB>reader,reader<TAB>query`` lines; # comments skipped."""
    out: list[tuple[str, frozenset[str], str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) == 2:
            out.append((parts[0], frozenset({GATE_READER}), parts[1]))
        elif len(parts) == 3:
            readers = frozenset(r.strip() for r in parts[1].split(",") if r.strip()) or {GATE_READER}
            out.append((parts[0], frozenset(readers), parts[2]))
        if len(out) >= limit:
            break
    return out


def _audited_queries(conn: psycopg.Connection, limit: int) -> tuple[list[SampleQuery], int]:
    """The last retrieves from the audit log, each with the ACL of the principal who asked it.

    The filter is built as the search path builds it (``build_acl_filter`` over the principal
    with its groups read now), so a sample query never sees more than its principal may read
    today. Queries that carried document filters are skipped (counted), not widened.
    """
    logged = audit.recent_queries(conn, limit=limit)
    out: list[SampleQuery] = []
    for q in logged:
        if q.filtered:
            continue
        groups = principals_repo.groups_of(conn, tenant_id=q.tenant_id, principal_id=q.principal_id)
        principal = Principal(
            tenant_id=q.tenant_id,
            principal_id=q.principal_id,
            groups=groups,
            roles=frozenset({"query"}),
            key_id=GATE_READER,
        )
        out.append((build_acl_filter(principal), q.query))
    conn.commit()
    return out, len(logged) - len(out)


def query_overlap(
    live: SearchService, target: SearchService, config: GateConfig, conn: psycopg.Connection
) -> dict[str, Any] | None:
    """Mean top-10 overlap (shared documents / 10) of sample queries answered by both versions:
    the operator's query file, else (``audit.store_query_text``) the last logged retrieves.

    Only counts are reported: never a query's text, principal or results.
    """
    skipped = 0
    if config.query_file is not None:
        source = "query_file"
        queries = [
            (AclFilter(tenant_id=tenant, readers=readers), text)
            for tenant, readers, text in read_query_file(config.query_file, config.query_sample)
        ]
    elif config.audit_queries:
        source = "audit_log"
        queries, skipped = _audited_queries(conn, config.query_sample)
    else:
        return None
    overlaps = []
    for acl, text in queries:
        a, _, _ = _ranked_docs(live, text, acl, "hybrid")
        b, _, _ = _ranked_docs(target, text, acl, "hybrid")
        overlaps.append(len(set(a[:K]) & set(b[:K])) / K)
    mean = sum(overlaps) / len(overlaps) if overlaps else 0.0
    return {
        "source": source,
        "queries": len(overlaps),
        "skipped_with_filters": skipped,
        "mean_top10_overlap": round(mean, 4),
        "min_top10_overlap": round(min(overlaps, default=0.0), 4),
    }


def structure_and_agreement(
    live: SearchService, target: SearchService, config: GateConfig, conn: psycopg.Connection
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Checks 5 and 6: titles and heading paths as queries (dense mode, each as its document's
    readers), the share that finds its own document in the top 10 on each version, and the
    top-10 overlap of the two versions on them. Only counts are reported."""
    probes = gate_probes.structure_probes(conn, limit=config.structure_probes)
    conn.commit()
    hits = {"live": 0, "target": 0}
    overlaps: list[float] = []
    for p in probes:
        acl = AclFilter(tenant_id=p.tenant_id, readers=frozenset(p.readers) | {GATE_READER})
        ranked = {}
        for name, service in (("live", live), ("target", target)):
            ranked[name], _, _ = _ranked_docs(service, p.query, acl, "dense")
            hits[name] += p.external_id in ranked[name][:K]
        both = min(K, len(ranked["live"]), len(ranked["target"]))
        if both:
            overlaps.append(len(set(ranked["live"][:both]) & set(ranked["target"][:both])) / both)
    n = len(probes)
    live_rate = hits["live"] / n if n else 0.0
    target_rate = hits["target"] / n if n else 0.0
    structure = {
        "passed": n == 0 or target_rate >= live_rate - config.structure_tolerance,
        "probes": n,
        "live_hit_at_10": round(live_rate, 4),
        "target_hit_at_10": round(target_rate, 4),
        "tolerance": config.structure_tolerance,
    }
    mean = sum(overlaps) / len(overlaps) if overlaps else 1.0
    agreement = {
        "passed": not overlaps or mean >= config.agreement_floor or target_rate > live_rate,
        "queries": len(overlaps),
        "mean_top10_overlap": round(mean, 4),
        "floor": config.agreement_floor,
    }
    return structure, agreement


def _unrelated_similarity(
    conn: psycopg.Connection, version_row: VersionRow, pairs: int, seed: int
) -> tuple[float, int] | None:
    """Mean cosine similarity of up to ``pairs`` random pairs of stored chunk vectors from
    different documents, and how many pairs; None when there are not two documents."""
    version = load_version(Path(version_row.path))
    shards = [s for s in version.shards if int(s.dense.ntotal) > 0]
    if not shards:
        return None
    sizes = np.array([int(s.dense.ntotal) for s in shards])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, offsets[-1], size=(2, 4 * pairs))

    def locate(i: int) -> tuple[int, int]:
        shard = int(np.searchsorted(offsets, i, side="right") - 1)
        return shard, int(i - offsets[shard])

    def row_of(i: int) -> int:
        shard, pos = locate(i)
        return int(shards[shard].row_ids[pos])

    docs = gate_probes.documents_of_rows(conn, sorted({row_of(int(i)) for i in np.concatenate([a, b])}))
    conn.commit()
    sims: list[float] = []
    for i, j in zip(a, b, strict=True):
        di, dj = docs.get(row_of(int(i))), docs.get(row_of(int(j)))
        if di is None or dj is None or di == dj:
            continue
        (si, pi), (sj, pj) = locate(int(i)), locate(int(j))
        u = np.asarray(shards[si].dense.vectors[pi], dtype=np.float64)
        v = np.asarray(shards[sj].dense.vectors[pj], dtype=np.float64)
        norm = float(np.linalg.norm(u) * np.linalg.norm(v))
        if norm > 0:
            sims.append(float(u @ v) / norm)
        if len(sims) >= pairs:
            break
    return (math.fsum(sims) / len(sims), len(sims)) if sims else None


def space_health(
    conn: psycopg.Connection, live: VersionRow | None, target: VersionRow, config: GateConfig, seed: int = 0
) -> dict[str, Any]:
    """Check 7: the unrelated-pair similarity of the target against the live version's."""
    got = _unrelated_similarity(conn, target, config.health_pairs, seed)
    base = _unrelated_similarity(conn, live, config.health_pairs, seed) if live is not None else None
    if got is None or base is None:
        return {"passed": True, "pairs": 0 if got is None else got[1], "skipped": "fewer than two documents"}
    return {
        # The room left to identical (1 - cos), not the raw similarity: anisotropic but sound
        # models sit well above live's mean, a collapsed space leaves almost no room at all.
        "passed": 1.0 - got[0] >= config.health_spread_ratio * (1.0 - base[0]),
        "pairs": got[1],
        "live_mean_unrelated_cosine": round(base[0], 4),
        "target_mean_unrelated_cosine": round(got[0], 4),
        "spread_ratio": config.health_spread_ratio,
    }
