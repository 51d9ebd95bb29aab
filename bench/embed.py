"""Embedding backends on CPU: PyTorch (sentence-transformers) against ONNX Runtime.

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.embed

Two workloads, each measured for every backend and thread count in the same run:
- query: one short text per call (the /v1/retrieve path); p50/p95 wall ms over ``--queries``
  calls after ``--warmup`` calls.
- batch: ``--passages`` passages of ~``--words`` words, ``embed`` at ``--batch-size``
  (the ingest path); passages/s over the whole set, after one warm-up batch.
Texts come from the CISI collection in ``--data-dir`` when present (titles as queries,
abstracts cut to ``--words`` words as passages), else from a fixed synthetic vocabulary.
``min cos`` is the smallest cosine to the PyTorch vector over every query and passage plus a
few unicode and over-length probes. Ratios are against torch at 2 threads, measured here.
torch's thread count is process-wide, so its rows share one model and re-set it.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bench.common import print_table
from index.embedder import Embedder, OnnxEmbedder, SentenceTransformerEmbedder
from index.onnx_export import PROBE_TEXTS, onnx_cache_dir

REPO = Path(__file__).resolve().parents[1]
MODEL = "bundled:all-MiniLM-L6-v2"
VOCAB = (
    "retrieval index shard vector query passage document tenant permission filter latency cache "
    "throughput model token batch search ranking score fusion lexical dense hybrid cluster node "
    "the a of and to in for on with by from as at is are was were be this that which it its "
    "system data user access control policy network storage memory process thread request "
    "response error result value report analysis method study library catalogue journal"
).split()


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--onnx-dir", type=Path, default=None, help="export folder (default: a temp dir)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--passages", type=int, default=256)
    parser.add_argument("--words", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    return parser.parse_args()


def _texts(data_dir: Path, n_queries: int, n_passages: int, words: int) -> tuple[list[str], list[str], str]:
    corpus = data_dir / "cisi" / "corpus.jsonl"
    if corpus.is_file():
        docs = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
        queries = [d["title"] for d in docs if d.get("title")][:n_queries]
        long_docs = [d["text"].split() for d in docs if len(d["text"].split()) >= words]
        passages = [" ".join(w[:words]) for w in long_docs][:n_passages]
        if len(queries) == n_queries and len(passages) == n_passages:
            return queries, passages, f"CISI ({corpus})"
    rng = random.Random(0)
    queries = [" ".join(rng.choices(VOCAB, k=rng.randint(4, 10))) for _ in range(n_queries)]
    passages = [" ".join(rng.choices(VOCAB, k=words)) for _ in range(n_passages)]
    return queries, passages, "synthetic vocabulary"


def _query_latency(embedder: Embedder, queries: Sequence[str], warmup: int) -> tuple[float, float]:
    for text in queries[:warmup]:
        embedder.embed([text])
    times = []
    for text in queries:
        started = time.perf_counter()
        embedder.embed([text])
        times.append((time.perf_counter() - started) * 1000)
    cuts = statistics.quantiles(times, n=20)
    return statistics.median(times), cuts[18]


def _throughput(embedder: Embedder, passages: Sequence[str], batch_size: int) -> float:
    embedder.embed(passages[:batch_size])
    started = time.perf_counter()
    embedder.embed(passages)
    return len(passages) / (time.perf_counter() - started)


def _run(
    name: str,
    embedder: Embedder,
    before: Callable[[], None],
    texts: tuple[list[str], list[str]],
    reference: np.ndarray,
    args: argparse.Namespace,
) -> dict[str, float | str]:
    queries, passages = texts
    before()
    p50, p95 = _query_latency(embedder, queries, args.warmup)
    per_second = _throughput(embedder, passages, args.batch_size)
    probes = [*queries, *passages, *PROBE_TEXTS]
    cosine = float(np.min(np.sum(embedder.embed(probes) * reference, axis=1)))
    print(f"  {name}: p50 {p50:.2f} ms, p95 {p95:.2f} ms, {per_second:.1f} passages/s, min cos {cosine:.6f}")
    return {"name": name, "p50": p50, "p95": p95, "rate": per_second, "cosine": cosine}


def main() -> None:
    args = _args()
    logging.basicConfig(level=logging.WARNING)
    queries, passages, source = _texts(args.data_dir, args.queries, args.passages, args.words)
    import torch

    torch_embedder = SentenceTransformerEmbedder(MODEL, device="cpu", batch_size=args.batch_size)
    tokens = np.mean([torch_embedder.count_tokens(p) for p in passages])
    print(f"texts: {source}; {len(queries)} queries, {len(passages)} passages (~{tokens:.0f} tokens each)")
    probes = [*queries, *passages, *PROBE_TEXTS]
    reference = torch_embedder.embed(probes)

    with tempfile.TemporaryDirectory() as tmp:
        onnx_dir = args.onnx_dir or onnx_cache_dir(Path(tmp), MODEL)
        started = time.perf_counter()
        OnnxEmbedder(MODEL, onnx_dir=onnx_dir)  # export (or reuse) outside the timings
        print(f"ONNX export/reuse: {time.perf_counter() - started:.1f} s in {onnx_dir}")
        results = []
        for threads in args.threads:
            results.append(
                _run(
                    f"torch {threads}t",
                    torch_embedder,
                    functools.partial(torch.set_num_threads, threads),
                    (queries, passages),
                    reference,
                    args,
                )
            )
        for threads in args.threads:
            onnx = OnnxEmbedder(MODEL, onnx_dir=onnx_dir, batch_size=args.batch_size, threads=threads)
            results.append(_run(f"onnx {threads}t", onnx, lambda: None, (queries, passages), reference, args))

    base = results[0]
    rows = [
        (
            r["name"],
            r["p50"],
            r["p95"],
            float(base["p50"]) / float(r["p50"]),
            r["rate"],
            float(r["rate"]) / float(base["rate"]),
            f"{float(r['cosine']):.6f}",
        )
        for r in results
    ]
    print()
    print_table(
        [
            "backend",
            "query p50 ms",
            "query p95 ms",
            "query speedup",
            "passages/s",
            "batch speedup",
            "min cos",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
