"""Train a reranker on one collection's qrels, then measure its quality and CPU latency.

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.rerank --collection cranfield

Queries are split by id parity: odd ids give the training pairs (judged positives and BM25
hard negatives), even ids are held out. On the held-out queries the BM25 top ``--depth`` is
reranked and nDCG@10 is compared with BM25 alone and with an RRF blend of both rankings.
Latency is the wall time of ``CrossEncoderReranker.score`` for one query and N candidates.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time
from pathlib import Path

from bench.common import print_table
from bench.metrics import ndcg_at_k
from rerank import (
    BeirCollection,
    TrainReport,
    load_beir,
    load_reranker,
    pairs_from_qrels,
    train_reranker,
    write_model_card,
)
from rerank.cross_encoder import CrossEncoderReranker
from rerank.data import tokenize

REPO = Path(__file__).resolve().parents[1]
RRF_K = 60  # Cormack et al. 2009


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--collection", default="cranfield")
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--out-dir", type=Path, default=REPO / ".ragline" / "bench-reranker")
    parser.add_argument("--max-pairs", type=int, default=2000)
    parser.add_argument("--negatives", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--depth", type=int, default=20, help="BM25 candidates reranked per held-out query")
    parser.add_argument("--latency-queries", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-training", action="store_true", help="reuse the model in --out-dir")
    return parser.parse_args()


def _split(collection: BeirCollection) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    judged = {q: r for q, r in collection.qrels.items() if q in collection.queries and any(r.values())}
    train = {q: r for q, r in judged.items() if int(q) % 2 == 1}
    held_out = {q: r for q, r in judged.items() if int(q) % 2 == 0}
    return train, held_out


def _bm25_runs(collection: BeirCollection, qids: list[str], depth: int) -> dict[str, list[str]]:
    import bm25s

    corpus = collection.corpus
    doc_ids = list(corpus)
    index = bm25s.BM25(k1=0.9, b=0.4)
    index.index([tokenize(corpus[d]) for d in doc_ids], show_progress=False)
    runs = {}
    for qid in qids:
        docs, _ = index.retrieve([tokenize(collection.queries[qid])], k=depth, show_progress=False)
        runs[qid] = [doc_ids[int(i)] for i in docs[0]]
    return runs


def _rrf(*rankings: list[str]) -> list[str]:
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, 1):
            fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(fused, key=lambda d: -fused[d])


def _evaluate(
    reranker: CrossEncoderReranker,
    collection: BeirCollection,
    held_out: dict[str, dict[str, int]],
    depth: int,
) -> dict[str, float]:
    corpus = collection.corpus
    runs = _bm25_runs(collection, sorted(held_out), depth)
    scores: dict[str, list[float]] = {"bm25": [], "reranked": [], "rrf(bm25, reranked)": []}
    started = time.perf_counter()
    for qid, ranking in runs.items():
        ce = reranker.score(collection.queries[qid], [corpus[d] for d in ranking])
        reranked = [d for _, d in sorted(zip(ce, ranking, strict=True), key=lambda t: -t[0])]
        for name, run in (
            ("bm25", ranking),
            ("reranked", reranked),
            ("rrf(bm25, reranked)", _rrf(ranking, reranked)),
        ):
            scores[name].append(ndcg_at_k(run, held_out[qid], 10))
    seconds = time.perf_counter() - started
    print(f"held-out eval: {len(runs)} queries x {depth} candidates in {seconds:.1f}s")
    return {name: statistics.fmean(values) for name, values in scores.items()}


def _latency(
    reranker: CrossEncoderReranker, collection: BeirCollection, n_queries: int, seed: int
) -> list[list[object]]:
    rng = random.Random(seed)
    texts = list(collection.corpus.values())
    queries = rng.sample(sorted(collection.queries.values()), n_queries)
    reranker.score(queries[0], texts[:8])  # warm-up: lazy allocations, first-call overhead
    rows: list[list[object]] = []
    for n in (20, 50, 100):
        times = []
        for query in queries:
            candidates = rng.sample(texts, n)
            started = time.perf_counter()
            reranker.score(query, candidates)
            times.append(time.perf_counter() - started)
        mean = statistics.fmean(times)
        rows.append([n, len(queries), mean * 1000, max(times) * 1000, n / mean])
    return rows


def main() -> None:
    args = _args()
    logging.basicConfig(level=logging.WARNING)
    import bm25s  # noqa: F401 - it sets its logger to DEBUG on import; quiet it after that

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    collection = load_beir(args.data_dir / args.collection)
    train_qrels, held_out = _split(collection)
    report: TrainReport | None = None
    if not args.skip_training:
        pairs = pairs_from_qrels(
            collection.corpus,
            collection.queries,
            train_qrels,
            negatives_per_positive=args.negatives,
            seed=args.seed,
        )[: args.max_pairs]
        report = train_reranker(
            out_dir=args.out_dir,
            pairs=pairs,
            epochs=args.epochs,
            batch_size=args.batch_size,
            max_length=args.max_length,
            lr=args.lr,
            seed=args.seed,
            device="cpu",
            data=f"{args.collection} qrels, odd query ids ({len(train_qrels)} queries), BM25 hard negatives",
        )
        print(
            f"trained: {report.pairs} pairs ({report.positives} pos), "
            f"{report.steps} steps in {report.seconds}s; "
            f"loss {report.first_loss:.3f} -> {report.final_loss:.3f}"
        )
    reranker = load_reranker(str(args.out_dir), device="cpu", max_length=args.max_length)
    quality = _evaluate(reranker, collection, held_out, args.depth)
    print_table(["run", "nDCG@10 (held-out)"], [[name, value] for name, value in quality.items()])
    if report is not None:
        write_model_card(
            report,
            eval_results={f"{args.collection} held-out {k}": {"ndcg@10": v} for k, v in quality.items()},
        )
    print()
    rows = _latency(reranker, collection, args.latency_queries, args.seed)
    print_table(["candidates", "queries", "mean ms/query", "max ms", "pairs/s"], rows)


if __name__ == "__main__":
    main()
