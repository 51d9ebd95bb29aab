"""Lexical search cost with shared collection statistics vs each segment's own.

Run: ``python -m bench.lexical --docs 100000 --shards 4 --delta 50 --queries 300``.

Synthetic corpus: documents of 20-60 words drawn from a Zipf-distributed vocabulary of
20k words (seeded), split into ``--shards`` shards plus a ``--delta`` document fresh-writes
segment, as a serving snapshot holds them. Queries are 2-6 words drawn the same way. Both
variants search every segment with ``k=50`` and merge; "local" is the old behaviour (each
segment's own statistics, the baseline), "shared" sums the query terms' statistics over the
segments first and rescores each posting with them. Single thread, wall-clock per query.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.common import print_table
from index.bm25_shards import LexicalShard, LexicalStats
from index.tokenize import Tokenizer


def _texts(rng: np.random.Generator, n: int, lo: int, hi: int, vocab: list[str]) -> list[str]:
    ranks = np.arange(1, len(vocab) + 1)
    p = (1.0 / ranks) / np.sum(1.0 / ranks)
    return [" ".join(rng.choice(vocab, size=int(rng.integers(lo, hi)), p=p)) for _ in range(n)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--delta", type=int, default=50)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    vocab = [f"w{i}x" for i in range(20_000)]
    tok = Tokenizer(stem=False, stop_words=False)
    texts = _texts(rng, args.docs, 20, 60, vocab)
    bounds = np.linspace(0, args.docs, args.shards + 1).astype(int)
    started = time.perf_counter()
    segments = [
        LexicalShard.build(texts[a:b], np.arange(a, b), tok) for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    segments.append(LexicalShard.build(_texts(rng, args.delta, 20, 60, vocab), np.arange(args.delta), tok))
    build_s = time.perf_counter() - started
    queries = _texts(rng, args.queries, 2, 7, vocab)

    def run(shared: bool) -> np.ndarray:
        times = []
        for q in queries:
            t0 = time.perf_counter()
            stats = LexicalStats.total(s.stats(q) for s in segments) if shared else None
            for s in segments:
                s.search(q, 50, allowed=None, stats=stats)
            times.append((time.perf_counter() - t0) * 1000)
        return np.array(times)

    run(False), run(True)  # warm-up
    local, shared = run(False), run(True)
    print(f"{args.docs} docs in {args.shards} shards + {args.delta} delta, built in {build_s:.1f}s")
    rows = [
        [name, f"{np.percentile(t, 50):.2f}", f"{np.percentile(t, 95):.2f}", f"{np.percentile(t, 99):.2f}"]
        for name, t in (("local stats (baseline)", local), ("shared stats", shared))
    ]
    ratio = np.percentile(shared, 95) / np.percentile(local, 95)
    rows.append(["shared / local p95", f"{ratio:.2f}x", "", ""])
    print_table(["variant", "p50 ms", "p95 ms", "p99 ms"], rows)


if __name__ == "__main__":
    main()
