"""The int8 query encoder against fp32: its cost per query and its retrieval quality (issue 26).

    RAGLINE_DATA_DIR=/tmp/qp_bench/data OPENBLAS_NUM_THREADS=1 \\
        python -m bench.query_precision ../shared/data/cranfield ../shared/data/cisi

Two parts, both in one run, per BEIR collection given:

- encoder: every query of the collection embedded alone (``OnnxEmbedder.embed([q])``, one
  intra-op thread, as a serving node runs it), by the fp32 export and by its int8 copy
  (``RAGLINE_EMBEDDING_QUERY_PRECISION=int8``), in ``--rounds`` alternating blocks so drift
  falls on both; CPU ms per query from the process's own counter (``time.process_time``),
  wall p50, and the cosine of each int8 vector to its fp32 one;
- quality: the collection ingested once through the real pipeline (``evaluation.evaluate``,
  as ``ragline eval``), then every judged query answered through the real search service
  with fp32 queries and with int8 queries (passages are fp32 in both); nDCG@10 per mode.

The admission rule the README states: int8 may serve only when, on every collection,
its nDCG@10 is at most ``--tolerance`` (0.005) below fp32's in every mode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import print_table
from core.beir import load_beir
from core.settings import Settings
from evaluation import evaluate
from index.embedder import OnnxEmbedder
from index.onnx_export import onnx_cache_dir

MODES = ("dense", "hybrid")


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("datasets", type=Path, nargs="+", help="BEIR collection folders")
    parser.add_argument("--rounds", type=int, default=4, help="alternating encoder blocks per variant")
    parser.add_argument("--tolerance", type=float, default=0.005, help="nDCG@10 loss allowed")
    parser.add_argument("--skip-quality", action="store_true", help="the encoder part only")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    for dataset in args.datasets:
        if not (dataset / "queries.jsonl").is_file():
            parser.error(f"{dataset} is not a BEIR collection (no queries.jsonl)")
    return args


def _block(embedder: OnnxEmbedder, queries: list[str]) -> tuple[float, list[float]]:
    """CPU seconds for the block and each query's wall ms."""
    walls = []
    cpu = time.process_time()
    for text in queries:
        t = time.perf_counter()
        embedder.embed([text])
        walls.append((time.perf_counter() - t) * 1000)
    return time.process_time() - cpu, walls


def encoder_costs(dataset: Path, settings: Settings, rounds: int) -> dict[str, Any]:
    queries = list(load_beir(dataset, split="test").queries.values())
    onnx_dir = onnx_cache_dir(settings.data_dir.resolve(), settings.embedding_model)
    encoders = {
        p: OnnxEmbedder(settings.embedding_model, onnx_dir=onnx_dir, threads=1, precision=p)
        for p in ("fp32", "int8")
    }
    fp32 = encoders["fp32"].embed(queries)
    int8 = encoders["int8"].embed(queries)
    cosines = np.sum(fp32 * int8, axis=1)
    cpu: dict[str, float] = {p: 0.0 for p in encoders}
    walls: dict[str, list[float]] = {p: [] for p in encoders}
    for r in range(rounds):
        for p in ("fp32", "int8") if r % 2 == 0 else ("int8", "fp32"):
            seconds, wall = _block(encoders[p], queries)
            cpu[p] += seconds
            walls[p] += wall
    per_query = {p: cpu[p] * 1000 / (rounds * len(queries)) for p in encoders}
    return {
        "collection": dataset.name,
        "queries": len(queries),
        "cpu_ms": {p: round(v, 3) for p, v in per_query.items()},
        "cpu_ratio": round(per_query["int8"] / per_query["fp32"], 3),
        "wall_p50_ms": {p: round(statistics.median(w), 3) for p, w in walls.items()},
        "cosine_min": round(float(cosines.min()), 4),
        "cosine_mean": round(float(cosines.mean()), 4),
    }


def quality(dataset: Path, settings: Settings, tolerance: float) -> dict[str, Any]:
    ndcg: dict[str, dict[str, float]] = {}
    for precision in ("fp32", "int8"):
        run = settings.model_copy(update={"embedding_query_precision": precision})
        report = evaluate(run, dataset, modes=MODES, ks=(10,), use_ray=False)
        ndcg[precision] = {m.mode: float(m.metrics["ndcg@10"]) for m in report.modes}
    diffs = {m: round(ndcg["int8"][m] - ndcg["fp32"][m], 4) for m in MODES}
    return {
        "collection": dataset.name,
        "ndcg": ndcg,
        "diff": diffs,
        "admitted": all(d >= -tolerance for d in diffs.values()),
    }


def main() -> None:
    args = _args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    settings = Settings(embedding_backend="onnx")
    costs = [encoder_costs(d, settings, args.rounds) for d in args.datasets]
    print()
    print_table(
        [
            "collection",
            "queries",
            "fp32 CPU ms/q",
            "int8 CPU ms/q",
            "int8/fp32",
            "wall p50 fp32 -> int8",
            "cos min",
            "cos mean",
        ],
        [
            (
                c["collection"],
                c["queries"],
                c["cpu_ms"]["fp32"],
                c["cpu_ms"]["int8"],
                c["cpu_ratio"],
                f"{c['wall_p50_ms']['fp32']:.2f} -> {c['wall_p50_ms']['int8']:.2f}",
                c["cosine_min"],
                c["cosine_mean"],
            )
            for c in costs
        ],
    )
    results: dict[str, Any] = {"encoder": costs}
    if not args.skip_quality:
        scored = [quality(d, settings, args.tolerance) for d in args.datasets]
        results["quality"] = scored
        print()
        print_table(
            ["collection", "mode", "nDCG@10 fp32", "nDCG@10 int8", "diff", "admitted"],
            [
                (
                    q["collection"],
                    mode,
                    f"{q['ndcg']['fp32'][mode]:.4f}",
                    f"{q['ndcg']['int8'][mode]:.4f}",
                    f"{q['diff'][mode]:+.4f}",
                    "yes" if q["diff"][mode] >= -args.tolerance else "NO",
                )
                for q in scored
                for mode in MODES
            ],
        )
        verdict = all(q["admitted"] for q in scored)
        results["admitted"] = verdict
        print(f"\nint8 query encoder {'admitted' if verdict else 'REFUSED'} (tolerance {args.tolerance})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
