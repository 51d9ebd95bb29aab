"""Train a reranker on one collection's qrels, then measure its quality and CPU latency.

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.rerank --collection cranfield
    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.rerank --latency-only --model DIR --backends torch,onnx

Queries are split by id parity: odd ids give the training pairs (judged positives and BM25
hard negatives), even ids are held out. On the held-out queries the BM25 top ``--depth`` is
reranked (with the first of ``--backends``) and nDCG@10 is compared with BM25 alone and with
an RRF blend of both rankings. ``--latency-only`` skips training and evaluation.

Latency is the wall time of ``score`` for one query and N candidates drawn from the corpus,
the same candidates for every backend; the backends take turns within each of ``--repeats``
rounds so that load from other processes hits them alike. ``x torch`` is the median latency
over torch's at the same N; ``max |diff|`` the largest difference of a raw logit from
torch's. Both backends run on ``--threads`` threads.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from bench.common import print_table
from core.backends import BackendChoice
from core.ir_metrics import ndcg_at_k
from rerank import (
    BeirCollection,
    TrainReport,
    load_beir,
    load_reranker,
    pairs_from_qrels,
    train_reranker,
    write_model_card,
)
from rerank.data import tokenize
from rerank.scoring import BatchedCrossEncoder

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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-training", action="store_true", help="reuse the model in --out-dir")
    parser.add_argument(
        "--latency-only", action="store_true", help="no training or evaluation: time --model only"
    )
    parser.add_argument("--model", type=Path, default=None, help="reranker folder (default: --out-dir)")
    parser.add_argument("--backends", default="torch,onnx", help="comma-separated: torch, onnx")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of every backend")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per backend and N")
    parser.add_argument("--candidates", default="20,50,100", help="comma-separated candidate counts")
    parser.add_argument("--cache-dir", type=Path, default=None, help="ONNX export cache (default: temp)")
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
    reranker: BatchedCrossEncoder,
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
    rerankers: dict[str, BatchedCrossEncoder],
    collection: BeirCollection,
    counts: Sequence[int],
    repeats: int,
    seed: int,
) -> list[list[object]]:
    rng = random.Random(seed)
    texts = list(collection.corpus.values())
    query = rng.choice(sorted(collection.queries.values()))
    print(f"latency query: {query!r}; candidates drawn from {len(texts)} {collection.name} documents")
    for reranker in rerankers.values():
        reranker.score(query, texts[:8])  # warm-up: lazy allocations, first-call overhead
    rows: list[list[object]] = []
    for n in counts:
        candidates = rng.sample(texts, n)
        times: dict[str, list[float]] = {name: [] for name in rerankers}
        scores: dict[str, list[float]] = {}
        for _ in range(repeats):
            for name, reranker in rerankers.items():
                started = time.perf_counter()
                scores[name] = reranker.score(query, candidates)
                times[name].append(time.perf_counter() - started)
        base = statistics.median(times["torch"]) if "torch" in times else None
        for name in rerankers:
            median = statistics.median(times[name])
            diff = (
                f"{max(abs(a - b) for a, b in zip(scores[name], scores['torch'], strict=True)):.1e}"
                if "torch" in scores
                else "-"
            )
            ratio = f"{median / base:.2f}" if base else "-"
            rows.append([n, name, median * 1000, n / median, ratio, diff])
    return rows


def _load(args: argparse.Namespace, model: Path, cache: Path) -> dict[str, BatchedCrossEncoder]:
    import torch

    # Equal footing: torch's pool is process-wide, the ONNX session takes its own count.
    torch.set_num_threads(args.threads)
    rerankers: dict[str, BatchedCrossEncoder] = {}
    for name in args.backends.split(","):
        if name not in ("torch", "onnx"):
            raise SystemExit(f"unknown backend {name!r}; choose torch and/or onnx")
        started = time.perf_counter()
        rerankers[name] = load_reranker(
            str(model),
            device="cpu",
            max_length=args.max_length,
            backend=cast(BackendChoice, name),
            data_dir=cache,
            threads=args.threads,
        )
        note = " (exported to ONNX unless cached)" if name == "onnx" else ""
        print(f"loaded {name} in {time.perf_counter() - started:.1f} s{note}")
    return rerankers


def main() -> None:
    args = _args()
    logging.basicConfig(level=logging.WARNING)
    import bm25s  # noqa: F401 - it sets its logger to DEBUG on import; quiet it after that

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    collection = load_beir(args.data_dir / args.collection)
    train_qrels, held_out = _split(collection)
    report: TrainReport | None = None
    if not (args.skip_training or args.latency_only):
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
    with tempfile.TemporaryDirectory() as tmp:
        model = args.out_dir if report is not None else (args.model or args.out_dir)
        rerankers = _load(args, model, args.cache_dir or Path(tmp))
        if not args.latency_only:
            quality = _evaluate(next(iter(rerankers.values())), collection, held_out, args.depth)
            print_table(["run", "nDCG@10 (held-out)"], [[name, value] for name, value in quality.items()])
            if report is not None:
                write_model_card(
                    report,
                    eval_results={
                        f"{args.collection} held-out {k}": {"ndcg@10": v} for k, v in quality.items()
                    },
                )
            print()
        counts = [int(n) for n in args.candidates.split(",")]
        rows = _latency(rerankers, collection, counts, args.repeats, args.seed)
    print_table(["candidates", "backend", "median ms", "pairs/s", "x torch", "max |diff| vs torch"], rows)


if __name__ == "__main__":
    main()
