"""Why a trained reranker lowers nDCG@10: what blending costs when the reranker knows nothing
(a random score), what it gains when it knows everything (the judgements), and where a real
model sits between them; how well it separates relevant from non-relevant candidates (AUC,
beside the first stage's own order), on the collection's queries and on the task it was
trained on (a title finding its document); and how long the queries are against the model's
``max_length``.

Run (the collection ingested and indexed first by ``ragline eval``, the model trained by
``ragline reranker train``, both under the same ``RAGLINE_DATA_DIR``)::

    ragline eval --dataset ../shared/data/cisi --modes hybrid
    ragline reranker train --out /tmp/cisi-mined --mine eval-cisi --max-pairs 700 --max-length 128
    python -m bench.rerank_diagnosis --dataset ../shared/data/cisi --model /tmp/cisi-mined

The blend is the serving path's (``RAGLINE_RERANK__BLEND=rrf``: ``1/(k + fused rank) +
1/(k + rerank rank)`` over the top ``--depth`` fused chunks), scored at document level as
``ragline eval`` scores.
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from psycopg_pool import ConnectionPool

from authz.acl import AclFilter
from bench.common import print_table
from catalog.connect import migrated_url
from core.beir import BeirCollection, load_beir
from core.ir_metrics import doc_scores_from_chunks, ndcg_at_k
from core.settings import get_settings
from evaluation.harness import EVAL_ALIAS, EVAL_READER
from rerank.data import _Bm25, _pseudo_query
from retrieve.service import RetrieveRequest
from wiring import build_search_service

Ranked = list[tuple[str, str]]  # (document id, chunk text), best first


def first_stage(collection: BeirCollection, tenant: str, depth: int) -> dict[str, Ranked]:
    """Every judged query's hybrid top ``depth`` chunks, no rerank, as the eval tenant's reader."""
    settings = get_settings()
    pool = ConnectionPool(migrated_url(settings), min_size=1, max_size=2, open=True)
    service, close = build_search_service(settings, pool, None, alias=EVAL_ALIAS, watch=False)
    acl = AclFilter(tenant_id=tenant, readers=frozenset({EVAL_READER}))
    runs: dict[str, Ranked] = {}
    try:
        for qid, text in collection.queries.items():
            if qid in collection.qrels:
                req = RetrieveRequest(
                    query=text, top_k=depth, mode="hybrid", rerank=False, max_context_tokens=0
                )
                runs[qid] = [
                    (r.detail.external_id, r.detail.text) for r in service.retrieve(req, acl).results
                ]
    finally:
        close()
        pool.close()
    return runs


def blended(ids: Sequence[str], scores: Sequence[float], k: int) -> list[str]:
    """The serving blend: RRF of the fused order and the order by ``scores`` (stable)."""
    by_score = sorted(range(len(ids)), key=lambda i: (-scores[i], i))
    rerank_rank = {i: r for r, i in enumerate(by_score, start=1)}
    fused = [1 / (k + i + 1) + 1 / (k + rerank_rank[i]) for i in range(len(ids))]
    return [ids[i] for i in sorted(range(len(ids)), key=lambda i: -fused[i])]


def by_scores(ids: Sequence[str], scores: Sequence[float]) -> list[str]:
    return [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-scores[i], i))]


def auc(scores: Sequence[float], relevant: Sequence[bool]) -> float | None:
    """P(a relevant candidate outscores a non-relevant one), ties counted half."""
    pos = np.array([s for s, r in zip(scores, relevant, strict=True) if r])
    neg = np.array([s for s, r in zip(scores, relevant, strict=True) if not r])
    if not len(pos) or not len(neg):
        return None
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


class Study:
    def __init__(self, collection: BeirCollection, runs: dict[str, Ranked], k: int) -> None:
        self.c, self.runs, self.k = collection, runs, k

    def ndcg(self, order: Callable[[str, list[str], Ranked], list[str]]) -> float:
        """Mean nDCG@10 over the judged queries of the documents ``order`` ranks."""
        values = []
        for qid, ranked in self.runs.items():
            ids = order(qid, [d for d, _ in ranked], ranked)
            docs = doc_scores_from_chunks([(d, -float(i)) for i, d in enumerate(ids)], agg="max")
            values.append(ndcg_at_k(docs, self.c.qrels[qid], 10))
        return statistics.mean(values)

    def relevant(self, qid: str, ids: Sequence[str]) -> list[bool]:
        return [self.c.qrels[qid].get(d, 0) > 0 for d in ids]


def _model_rows(
    study: Study, model: str, max_length: int, samples: int
) -> tuple[list[list[object]], list[str]]:
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(model, max_length=max_length, device="cpu")
    scores = {
        qid: [float(x) for x in ce.predict([(study.c.queries[qid], t) for _, t in ranked], batch_size=32)]
        for qid, ranked in study.runs.items()
    }
    model_aucs = [auc(scores[q], study.relevant(q, [d for d, _ in r])) for q, r in study.runs.items()]
    first_aucs = [
        auc([-float(i) for i in range(len(r))], study.relevant(q, [d for d, _ in r]))
        for q, r in study.runs.items()
    ]
    rows: list[list[object]] = [
        ["the model alone", study.ndcg(lambda q, ids, _: by_scores(ids, scores[q]))],
        ["the model blended (rrf)", study.ndcg(lambda q, ids, _: blended(ids, scores[q], study.k))],
    ]
    own = _own_task_auc(study.c, ce, samples)
    lengths = [len(ce.tokenizer(study.c.queries[q])["input_ids"]) for q in study.runs]
    facts = [
        f"AUC within the candidates: model {_mean(model_aucs):.3f},"
        f" first-stage order {_mean(first_aucs):.3f}",
        f"AUC on its training task (a title finds its document among its BM25 top 20): {own:.3f}",
        f"query length in word pieces: mean {statistics.mean(lengths):.1f}, max {max(lengths)};"
        f" {sum(n > max_length // 2 for n in lengths) / len(lengths):.0%} over half of"
        f" max_length {max_length}",
    ]
    return rows, facts


def _own_task_auc(collection: BeirCollection, ce: object, samples: int) -> float:
    """The mined pairs' own task on sampled documents: title -> its body among BM25 neighbours."""
    docs = list(collection.iter_corpus())
    pairs = [_pseudo_query(d.title, d.text) for d in docs]
    bodies = [body for _, body in pairs]
    bm25 = _Bm25(bodies)
    values = []
    for i in random.Random(1).sample(range(len(docs)), min(samples, len(docs))):
        query, body = pairs[i]
        if not query or not body:
            continue
        candidates = [j for j in bm25.top(query, 20) if j != i][:19] + [i]
        got = ce.predict([(query, bodies[j]) for j in candidates], batch_size=32)  # type: ignore[attr-defined]
        values.append(auc([float(x) for x in got], [j == i for j in candidates]) or 0.0)
    return statistics.mean(values)


def _mean(values: Sequence[float | None]) -> float:
    return statistics.mean(v for v in values if v is not None)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--dataset", type=Path, required=True)
    p.add_argument("--model", help="a trained cross-encoder folder (omit for the null/oracle bounds only)")
    p.add_argument("--depth", type=int, default=50, help="fused candidates the reranker sees")
    p.add_argument("--rrf-k", type=int, default=60)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--samples", type=int, default=150, help="documents for the training-task AUC")
    args = p.parse_args(argv)
    collection = load_beir(args.dataset)
    study = Study(
        collection, first_stage(collection, "eval-" + args.dataset.resolve().name, args.depth), args.rrf_k
    )
    rng = random.Random(0)

    def noise(q: str, ids: list[str], _: Ranked) -> list[str]:
        return blended(ids, [rng.random() for _ in ids], study.k)

    def oracle(q: str, ids: list[str], _: Ranked) -> list[str]:
        return blended(ids, [collection.qrels[q].get(d, 0) + 1e-3 * rng.random() for d in ids], study.k)

    rows: list[list[object]] = [
        ["hybrid (first stage)", study.ndcg(lambda q, ids, _: ids)],
        ["blended with a random reranker", statistics.mean(study.ndcg(noise) for _ in range(args.seeds))],
        ["blended with the judgements (oracle)", study.ndcg(oracle)],
    ]
    facts: list[str] = []
    if args.model:
        more, facts = _model_rows(study, args.model, args.max_length, args.samples)
        rows += more
    print(
        f"{args.dataset.name}: {len(study.runs)} judged queries,"
        f" top {args.depth} fused chunks, rrf k={args.rrf_k}"
    )
    print_table(["ranking", "nDCG@10"], rows)
    for line in facts:
        print(line)


if __name__ == "__main__":
    main()
