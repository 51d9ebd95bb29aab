"""Wall time and peak RSS of ``ragline adapt`` on a tenant of N chunks (default 10,000).

The tenant is the cisi and cranfield collections (../shared/data) cut into 40-word chunks in
document order, COPY-loaded (``catalog.bulk``: no ingestion, no embedding; the vectors are
random, ``adapt`` reads only text) into a throwaway local cluster, or ``RAGLINE_DATABASE_URL``
when set (it must be empty). The command then runs as a subprocess, as an operator runs it:

    .venv/bin/python -m bench.adapt --chunks 10000 --max-pairs 4000 --max-seconds 600

It prints one JSON object: the command's wall seconds and peak RSS (``/usr/bin/time -v``), and
from ``adapt.json`` the mined examples by kind and each model's steps (done and planned).
bulk-loaded chunks carry no heading paths, so no ``heading`` examples are mined here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg

from bench.retrieve import database
from catalog.bulk import BulkChunk, BulkDocument, bulk_load
from core.settings import DEFAULT_EMBEDDING_MODEL

TENANT = "bench"
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
WORDS_PER_CHUNK = 40


def passages(limit: int, words_per_chunk: int = WORDS_PER_CHUNK) -> list[tuple[str, list[str]]]:
    """(title, chunks) per document of cisi then cranfield, ``limit`` chunks in all."""
    docs: list[tuple[str, list[str]]] = []
    total = 0
    for name in ("cisi", "cranfield"):
        with (DATA / name / "corpus.jsonl").open() as f:
            for line in f:
                row = json.loads(line)
                words = row["text"].split()
                cut = [
                    " ".join(words[i : i + words_per_chunk]) for i in range(0, len(words), words_per_chunk)
                ][: limit - total]
                if cut:
                    docs.append((row.get("title") or "", cut))
                    total += len(cut)
                if total >= limit:
                    return docs
    return docs


def load(url: str, docs: list[tuple[str, list[str]]]) -> int:
    rng = np.random.default_rng(0)
    rows: list[tuple[int, int, str]] = [
        (d, o, t) for d, (_, cut) in enumerate(docs, 1) for o, t in enumerate(cut)
    ]
    vectors = rng.standard_normal((len(rows), 384)).astype("<f4")

    def documents() -> Iterator[BulkDocument]:
        for d, (title, cut) in enumerate(docs, 1):
            digest = hashlib.sha256(f"doc-{d}".encode()).hexdigest()
            yield BulkDocument(d, f"doc-{d}", title, digest, len(cut), public=True)

    def chunks() -> Iterator[BulkChunk]:
        for row, (d, o, text) in enumerate(rows, 1):
            chunk_id = hashlib.sha256(f"{TENANT}/{d}/1/{o}".encode()).hexdigest()
            yield BulkChunk(
                row, chunk_id, d, o, text, 0, len(text.split()) * 4 // 3, vectors[row - 1].tobytes()
            )

    with psycopg.connect(url) as conn:
        bulk_load(
            conn,
            tenant_id=TENANT,
            documents=documents(),
            chunks=chunks(),
            model=DEFAULT_EMBEDDING_MODEL,
            dim=384,
        )
    return len(rows)


def run_adapt(url: str, out: Path, args: argparse.Namespace) -> dict[str, object]:
    command = [
        "/usr/bin/time", "-v", sys.executable, "-m", "cli.main", "adapt", "--tenant", TENANT,
        "--out", str(out), "--max-pairs", str(args.max_pairs), "--max-seconds", str(args.max_seconds),
        "--device", args.device,
    ]  # fmt: skip
    env = {**os.environ, "RAGLINE_DATABASE_URL": url, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"ragline adapt failed ({done.returncode}):\n{done.stderr[-3000:]}")
    rss_kib = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    report = json.loads((out / "adapt.json").read_text())

    def run(name: str) -> dict[str, object] | None:
        r = report[name]
        keys = ("steps", "planned_steps", "stopped_by_time", "seconds", "first_loss", "final_loss", "device")
        return None if r is None else {k: r.get(k) for k in keys}

    return {
        "wall_s": round(wall, 1),
        "peak_rss_mib": round(int(rss_kib.group(1)) / 1024, 1) if rss_kib else report["peak_rss_mib"],
        "examples": report["examples"],
        "reranker_pairs": report["reranker_pairs"],
        "embedder": run("embedder"),
        "reranker": run("reranker"),
        "adapt_seconds": report["seconds"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--max-pairs", type=int, default=4000)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--words-per-chunk",
        type=int,
        default=WORDS_PER_CHUNK,
        help="chunk length: 40 (default) is short; 200 fills the 256-token training window as an"
        " ingested document's chunks do",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-adapt-") as tmp, database(Path(tmp)) as url:
        chunks = load(url, passages(args.chunks, args.words_per_chunk))
        result = run_adapt(url, Path(tmp) / "out", args)
    print(json.dumps({"chunks": chunks, "cores": os.cpu_count(), **vars(args), **result}, indent=2))


if __name__ == "__main__":
    main()
