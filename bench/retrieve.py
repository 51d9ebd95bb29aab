"""Retrieval latency under open-loop load, through the real HTTP server.

Run: ``python -m bench.retrieve --chunks 100000 --rates 5,10,20 --duration 20``; with
``--query-precisions fp32,int8`` one server per query encoder precision, in turn, same corpus;
``--stacks asyncio/h11,uvloop/httptools`` likewise per uvicorn event loop / HTTP parser,
``--workers 1,2`` per number of worker processes, and
``--rounds N`` runs the whole list of servers N times, alternating (host speed drifts).

Goal (from the issue): p95 <= 50 ms at 20 requests/s on 2 CPU cores, hybrid without rerank,
over >= 100k chunks. Steps:

1. A throwaway PostgreSQL (or ``RAGLINE_DATABASE_URL``, which must hold no documents).
2. ``--chunks`` synthetic chunks written straight into the catalog with COPY: documents
   (70% public, the rest split over four groups), versions, chunks and 384-d clustered
   random unit vectors. Embedding 100k chunks with the model would take an hour on 2 cores
   and measures ingestion, not retrieval.
3. An index version built from them (``index.builder.build_version``), marked ready and
   made the ``live`` alias, exactly what a rebuild publishes.
4. ``ragline serve`` as a subprocess; a query key for a user in one group.
5. bench.load at each rate; p95 ratios are against the lowest rate.

Query texts are drawn from the synthetic vocabulary (a cluster's topic words), so BM25 has
real postings to score; the query is embedded by the real model, so the dense stage pays
the real embedding cost (its neighbours are meaningless, its cost is not). The load
generator shares the machine with the server: on 2 cores its CPU counts against the goal.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import psycopg

from bench.http import Reply
from bench.load import LoadConfig, LoadResult, RequestSpec, print_results, run_rates
from catalog import indexes as indexes_repo
from catalog.bulk import BulkChunk, BulkDocument, bulk_load
from catalog.changes import current_position
from catalog.db import apply_migrations
from core.errors import ConflictError
from core.settings import DEFAULT_EMBEDDING_MODEL, Settings
from index.builder import auto_params, build_version
from retrieve.delta import lexical_text
from testkit.ports import free_port
from testkit.server import ServerNotReady, serve_command, server_env, wait_ready
from wiring import dense_params, lexical_tokenizer

TENANT = "bench"
PRINCIPAL = "user:bench"
GROUPS = ("group:eng", "group:sales", "group:hr", "group:legal")
DIM = 384
WORDS_PER_CHUNK = 48
READY_TIMEOUT_S = 900.0  # the server maps every chunk row to its document at start-up


@dataclass(frozen=True, slots=True)
class Corpus:
    """Synthetic chunks: texts and vectors share a topic per chunk, so both stages have structure."""

    texts: list[str]
    vectors: np.ndarray  # (n, DIM) float32, L2-normalised
    topics: np.ndarray  # (n,) topic of each chunk
    topic_words: list[list[str]]


def _vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    syllables = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ar", "en", "ol")]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables, size=int(rng.integers(2, 4)))))
    return sorted(words)


def synthetic_corpus(n: int, *, topics: int = 500, vocab: int = 20_000, seed: int = 0) -> Corpus:
    """``n`` chunks: ~40% topic words, the rest Zipf-distributed background vocabulary."""
    rng = np.random.default_rng(seed)
    words = np.array(_vocabulary(vocab, rng))
    topic_words = [list(rng.choice(words, size=25, replace=False)) for _ in range(topics)]
    background = 1.0 / np.arange(1, vocab + 1) ** 1.05
    background /= background.sum()
    topic_of = rng.integers(0, topics, size=n)
    n_topic = WORDS_PER_CHUNK * 2 // 5
    # One vectorised draw each: per-chunk rng.choice with p= costs minutes at 100k chunks.
    topical = np.array(topic_words)[topic_of[:, None], rng.integers(0, 25, size=(n, n_topic))]
    common = rng.choice(words, size=(n, WORDS_PER_CHUNK - n_topic), p=background)
    mixed = rng.permuted(np.concatenate([topical, common], axis=1), axis=1)
    texts = [" ".join(row) for row in mixed.tolist()]
    centres = rng.standard_normal((topics, DIM), dtype=np.float32)
    vectors = centres[topic_of] + 0.8 * rng.standard_normal((n, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return Corpus(texts, vectors, topic_of, topic_words)


def _doc_acl(doc: int, rng: np.random.Generator) -> tuple[list[str], bool]:
    if rng.random() < 0.7:
        return [], True
    return [GROUPS[doc % len(GROUPS)]], False


def load_catalog(
    url: str, corpus: Corpus, *, chunks_per_doc: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """COPY documents, versions, chunks and embeddings; returns (row_ids, doc_ids) per chunk."""
    n = len(corpus.texts)
    n_docs = (n + chunks_per_doc - 1) // chunks_per_doc
    doc_ids = np.arange(1, n_docs + 1, dtype=np.int64).repeat(chunks_per_doc)[:n]
    row_ids = np.arange(1, n + 1, dtype=np.int64)
    rng = np.random.default_rng(seed + 7)
    counts = np.bincount(doc_ids)

    def documents() -> Iterator[BulkDocument]:
        for d in range(1, n_docs + 1):
            principals, public = _doc_acl(d, rng)
            source = ("wiki", "drive", "tickets")[d % 3]
            yield BulkDocument(
                doc_id=d,
                external_id=f"doc-{d:07d}",
                title=f"Document {d}",
                content_hash=hashlib.sha256(f"doc-{d}".encode()).hexdigest(),
                chunk_count=int(counts[d]),
                source=source,
                metadata={"source": source, "team": f"team-{d % 12}"},
                principals=principals,
                public=public,
            )

    vecs = np.ascontiguousarray(corpus.vectors, dtype="<f4")

    def chunks() -> Iterator[BulkChunk]:
        for i, text in enumerate(corpus.texts):
            ordinal = i % chunks_per_doc
            yield BulkChunk(
                row=int(row_ids[i]),
                chunk_id=hashlib.sha256(f"{TENANT}/{doc_ids[i]}/1/{ordinal}".encode()).hexdigest(),
                doc_id=int(doc_ids[i]),
                ordinal=ordinal,
                text=text,
                char_start=ordinal * (len(text) + 1),
                token_count=len(text.split()) * 4 // 3,
                vector=vecs[i].tobytes(),
            )

    with psycopg.connect(url) as conn:
        try:
            bulk_load(
                conn,
                tenant_id=TENANT,
                documents=documents(),
                chunks=chunks(),
                model=DEFAULT_EMBEDDING_MODEL,
                dim=DIM,
            )
        except ConflictError as exc:
            raise SystemExit(f"bench.retrieve needs an empty database: {exc.message}") from exc
    return row_ids, doc_ids


def build_live_index(
    url: str, index_root: Path, corpus: Corpus, row_ids: np.ndarray, doc_ids: np.ndarray
) -> str:
    """Build a version with the server's default index settings and point ``live`` at it."""
    settings = Settings()
    ix = settings.index
    version_id = f"bench-{int(time.time())}"
    template = dense_params(settings)
    with psycopg.connect(url, autocommit=True) as conn:
        position = current_position(conn)
        path = index_root / version_id
        indexes_repo.create_version(
            conn, version_id=version_id, path=str(path), model=DEFAULT_EMBEDDING_MODEL, dim=DIM,
            n_shards=ix.shards, params={"source": "bench.retrieve"},
        )  # fmt: skip
        build_version(
            index_root, version_id, row_ids=row_ids, doc_ids=doc_ids, tenant_ids=None,
            texts=[lexical_text(t, ()) for t in corpus.texts], vectors=corpus.vectors,
            n_shards=ix.shards, shard_by=ix.shard_by,
            dense_params_for=auto_params(
                template, flat_max=ix.flat_max_vectors, ivfpq_min=ix.ivfpq_min_vectors
            ),
            tokenizer=lexical_tokenizer(settings), model_name=DEFAULT_EMBEDDING_MODEL,
            catalog_position=position,
        )  # fmt: skip
        indexes_repo.mark_ready(
            conn, version_id=version_id, chunk_count=len(row_ids), catalog_position=position
        )
        indexes_repo.swap_alias(conn, alias="live", version_id=version_id)
    return version_id


def create_query_key(url: str) -> str:
    """A query key for ``PRINCIPAL``, a member of the first group."""
    from authz.api_keys import create_key
    from catalog.principals import replace_groups

    with psycopg.connect(url) as conn:
        token = create_key(conn, tenant_id=TENANT, roles=["query"], principal_id=PRINCIPAL).token
        replace_groups(conn, tenant_id=TENANT, principal_id=PRINCIPAL, groups=[GROUPS[0]])
    return token


@contextmanager
def database(tmp: Path, *, keep: bool = False) -> Iterator[str]:
    """``RAGLINE_DATABASE_URL`` when set, else a local cluster under ``tmp``.

    The cluster is destroyed at exit unless ``keep`` (then it is only stopped, and the next
    run with the same folder starts it again on the port recorded there).
    """
    url = os.environ.get("RAGLINE_DATABASE_URL")
    if url:
        apply_migrations(url)
        yield url
        return
    from catalog import embedded

    port_file = tmp / "pg-port"
    port = int(port_file.read_text()) if keep and port_file.exists() else free_port()
    cluster = embedded.cluster_for(tmp, port=port, fsync=False)
    try:
        url = embedded.up(cluster)
        port_file.write_text(str(port))
        apply_migrations(url)
        yield url
    finally:
        if keep:
            embedded.down(cluster)
        else:
            embedded.destroy(cluster)


@contextmanager
def live_catalog(
    tmp: Path, chunks: int, *, queries: int, seed: int = 0
) -> Iterator[tuple[str, str, list[str]]]:
    """``database(tmp)`` holding a synthetic corpus of ``chunks`` chunks, ten to a document, and
    a live index over it under ``tmp/indexes``; yields (URL, a query key, ``queries`` query texts)."""
    with database(tmp) as url:
        corpus = synthetic_corpus(chunks, seed=seed)
        row_ids, doc_ids = load_catalog(url, corpus, chunks_per_doc=10, seed=seed)
        build_live_index(url, tmp / "indexes", corpus, row_ids, doc_ids)
        token = create_query_key(url)
        texts = query_texts(corpus, queries, seed=seed + 1)
        del corpus, row_ids, doc_ids  # the load runs without them
        yield url, token, texts


@contextmanager
def server(
    url: str,
    data_dir: Path,
    workers: int = 1,
    rerank: dict[str, str] | None = None,
    env_extra: dict[str, str] | None = None,
) -> Iterator[tuple[str, int]]:
    """``ragline serve`` as a subprocess (ingestion in-process); yields (URL, pid).

    ``rerank`` holds ``RAGLINE_RERANK__*`` settings (model, candidates, budget); none: no reranker.
    ``env_extra`` adds other settings (``RAGLINE_AUDIT__RETRIEVES``, ``RAGLINE_LIMITS__*``).
    """
    port = free_port()
    env = server_env(url, data_dir, RAGLINE_LOG_LEVEL=os.environ.get("RAGLINE_LOG_LEVEL", "WARNING"))
    env.update({f"RAGLINE_RERANK__{k.upper()}": v for k, v in (rerank or {}).items()})
    env.update(env_extra or {})
    log_path = data_dir / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            serve_command(port, workers=workers), env=env, stdout=log, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_ready(base, proc, log_path, timeout_s=READY_TIMEOUT_S)
        except ServerNotReady as exc:
            raise SystemExit(str(exc)) from None
        yield base, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def retrieve_requests(queries: Sequence[str], token: str, **body: object) -> Callable[[int], RequestSpec]:
    """A load generator's request maker: ``POST /v1/retrieve`` with the next query in turn
    and ``body``'s fields. A counter of its own, not the request index: each rate of a run
    restarts the index at 0 and would repeat its queries."""
    sequence = itertools.count()
    headers = {"Authorization": f"Bearer {token}"}

    def request(_: int) -> RequestSpec:
        return RequestSpec(
            "POST", "/v1/retrieve", {"query": queries[next(sequence) % len(queries)], **body}, headers
        )

    return request


def query_texts(corpus: Corpus, count: int, seed: int = 1) -> list[str]:
    """Queries of 2-4 words of one topic, sometimes with a background word."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        words = list(rng.choice(corpus.topic_words[int(rng.integers(len(corpus.topic_words)))], size=3))
        out.append(
            " ".join(
                words[: int(rng.integers(2, 4))]
                + ([corpus.texts[0].split()[-1]] if rng.random() < 0.3 else [])
            )
        )
    return out


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Retrieval latency under open-loop load (see module docstring).")
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--chunks-per-doc", type=int, default=10)
    p.add_argument("--rates", default="5,10,20", help="comma-separated requests per second")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per rate")
    p.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds before each rate")
    p.add_argument("--target-ms", type=float, default=50.0, help="latency target for goodput")
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--arrival", choices=["poisson", "fixed"], default="poisson")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--workers",
        default="1",
        help="uvicorn worker processes; comma-separated (1,2), one server each in turn",
    )
    p.add_argument("--rerank-model", type=Path, help="a cross-encoder folder: measure hybrid + rerank")
    p.add_argument("--rerank-candidates", type=int, default=20, help="fused candidates reranked per query")
    p.add_argument(
        "--cold",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="instead of the rates: ROUNDS x (warming off, warming on) cold starts, each after a"
        " PostgreSQL restart with the page cache dropped, measuring the first --duration seconds"
        " at the lowest rate (needs --state-dir and the bench's own PostgreSQL; bench/cold.py)",
    )
    p.add_argument(
        "--cold-probe",
        type=int,
        default=0,
        metavar="N",
        help="with --cold: N sequential requests per phase instead of the load windows",
    )
    p.add_argument(
        "--query-precisions",
        default="fp32",
        help="comma-separated RAGLINE_EMBEDDING_QUERY_PRECISION values, one server each in turn"
        " (fp32,int8: the int8 query encoder against fp32 in the same run)",
    )
    p.add_argument(
        "--stacks",
        default="auto/auto",
        help="comma-separated LOOP/HTTP pairs (RAGLINE_API__LOOP, RAGLINE_API__HTTP), one server"
        " each in turn: asyncio/h11,uvloop/httptools measures uvicorn's C stack against the pure one",
    )
    p.add_argument("--rounds", type=int, default=1, help="run the list of servers this many times")
    p.add_argument(
        "--state-dir",
        type=Path,
        help="keep the catalog and index here and reuse them on the next run with the same"
        " --chunks/--chunks-per-doc/--seed (default: a temporary folder, deleted)",
    )
    return p.parse_args()


def _prepare(args: argparse.Namespace, tmp: Path, url: str) -> tuple[Corpus, str]:
    """Catalog + live index + query key; reused from ``tmp/bench-state.json`` when it matches."""
    state_file = tmp / "bench-state.json"
    shape = {"chunks": args.chunks, "chunks_per_doc": args.chunks_per_doc, "seed": args.seed}
    corpus = synthetic_corpus(args.chunks, seed=args.seed)
    if args.state_dir and state_file.exists():
        saved = json.loads(state_file.read_text())
        if saved["shape"] != shape:
            raise SystemExit(
                f"{state_file} was made with {saved['shape']}, not {shape}: use another --state-dir"
            )
        print(f"reusing catalog and index {saved['version']} from {tmp}")
        return corpus, str(saved["token"])
    t = time.perf_counter()
    row_ids, doc_ids = load_catalog(url, corpus, chunks_per_doc=args.chunks_per_doc, seed=args.seed)
    print(f"catalog: {args.chunks:,} chunks in {doc_ids.max():,} documents, {time.perf_counter() - t:.1f}s")
    t = time.perf_counter()
    version = build_live_index(url, tmp / "indexes", corpus, row_ids, doc_ids)
    print(f"index {version}: built in {time.perf_counter() - t:.1f}s")
    token = create_query_key(url)
    if args.state_dir:
        state_file.write_text(json.dumps({"shape": shape, "version": version, "token": token}))
    return corpus, token


def main() -> None:
    args = _args()
    rates = sorted(float(r) for r in args.rates.split(","))
    with ExitStack() as stack:
        if args.state_dir:
            args.state_dir.mkdir(parents=True, exist_ok=True)
            tmp = args.state_dir.resolve()
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ragline-bench-")))
        url = stack.enter_context(database(tmp, keep=args.state_dir is not None))
        corpus, token = _prepare(args, tmp, url)
        if args.cold:
            _cold(args, tmp, corpus, token, rates[0])
            return
        # Enough for every arrival plus the probe: the server's LRU query-embedding cache would
        # otherwise answer repeats without running the model, flattering every rate but the first.
        expected = sum(rate * (args.duration + args.warmup) for rate in rates)
        queries = query_texts(corpus, int(expected * 1.5) + 500, seed=args.seed + 1)
        del corpus  # the server needs the memory more than we do
        rerank = (
            {"model": str(args.rerank_model), "candidates": str(args.rerank_candidates), "budget_ms": "60000"}
            if args.rerank_model
            else None
        )
        runs = []
        variants = [
            (int(workers), precision, *stack.split("/", 1))
            for workers in args.workers.split(",")
            for precision in args.query_precisions.split(",")
            for stack in args.stacks.split(",")
        ]
        for round_ in range(1, args.rounds + 1):
            for workers, precision, loop, http in variants:
                extra = {
                    "RAGLINE_EMBEDDING_QUERY_PRECISION": precision,
                    "RAGLINE_API__LOOP": loop,
                    "RAGLINE_API__HTTP": http,
                }
                label = f"{workers} worker(s), query encoder {precision}, {loop}/{http}, round {round_}"
                runs.append((label, *_measure(args, url, tmp, queries, token, rerank, rates, extra, workers)))
    mode = f"rerank of the top {args.rerank_candidates}" if rerank else "no rerank"
    print(
        f"\nhybrid, {mode}, top_k={args.top_k}, {args.chunks:,} chunks, {args.arrival} arrivals, "
        f"{args.warmup:g}s warm-up + {args.duration:g}s measured per rate, {os.cpu_count()} CPUs"
    )
    for label, results, probe in runs:
        print(f"\n{label}:")
        print_results(results)
        print("sequential probe after the load (30 requests, medians): " + probe)


def _measure(
    args: argparse.Namespace,
    url: str,
    tmp: Path,
    queries: Sequence[str],
    token: str,
    rerank: dict[str, str] | None,
    rates: Sequence[float],
    extra: dict[str, str],
    workers: int = 1,
) -> tuple[list[LoadResult], str]:
    """One server with ``extra`` settings, every rate, then the sequential probe."""
    t = time.perf_counter()
    with server(url, tmp, workers, rerank, env_extra=extra) as (base, pid):
        print(f"server ready in {time.perf_counter() - t:.1f}s ({extra})")
        request = retrieve_requests(
            queries, token, top_k=args.top_k, mode="hybrid", rerank=rerank is not None
        )

        _check(base, request(0))
        configs = [
            LoadConfig(
                rate=r,
                duration_s=args.duration,
                warmup_s=args.warmup,
                timeout_s=args.timeout,
                latency_target_ms=args.target_ms,
                arrival=args.arrival,
                seed=args.seed + i,
            )  # fmt: skip
            for i, r in enumerate(rates)
        ]
        counters = {
            "server CPU ms": lambda: _cpu_seconds(pid) * 1000,
            "load generator CPU ms": lambda: _cpu_seconds(os.getpid(), children=False) * 1000,
        }
        results = asyncio.run(
            run_rates(base, request, configs, server_timings=server_timings, counters=counters)
        )
        probe = _probe(base, request, 30)
    return results, probe


def _cold(args: argparse.Namespace, tmp: Path, corpus: Corpus, token: str, rate: float) -> None:
    """``--cold``: see bench/cold.py."""
    from bench import cold
    from catalog import embedded

    if not args.state_dir or os.environ.get("RAGLINE_DATABASE_URL"):
        raise SystemExit(
            "--cold restarts the bench's own PostgreSQL: give --state-dir, unset RAGLINE_DATABASE_URL"
        )
    cluster = embedded.cluster_for(tmp, port=int((tmp / "pg-port").read_text()), fsync=False)
    url = cluster.url
    phases = [w for _ in range(args.cold) for w in cold.PHASES]
    queries = query_texts(corpus, int(rate * args.duration * len(phases) * 1.5) + 500, seed=args.seed + 1)
    request = retrieve_requests(queries, token, top_k=args.top_k, mode="hybrid")

    window_s = min(args.duration, 10.0)
    windows = [
        LoadConfig(
            rate=rate,
            duration_s=window_s,
            warmup_s=0.0,
            timeout_s=args.timeout,
            latency_target_ms=args.target_ms,
            arrival=args.arrival,
            seed=args.seed + i,
        )  # fmt: skip
        for i in range(max(1, round(args.duration / window_s)))
    ]
    done = []
    for warm in phases:
        phase = cold.run_phase(
            warm, cluster=cluster, roots=[cluster.pgdata, tmp / "indexes"],
            start_server=lambda env: server(url, tmp, int(args.workers.split(",")[0]), env_extra=env),
            request=request, windows=windows, server_timings=server_timings,
            check=lambda base: _check(base, request(0)), probe=args.cold_probe,
        )  # fmt: skip
        print(f"warming {warm}: ready in {phase.ready_s:.1f}s")
        done.append(phase)
    print(
        f"\ncold starts, hybrid, top_k={args.top_k}, {args.chunks:,} chunks, {rate:g}/s {args.arrival},"
        f" the first {args.duration:g}s after /readyz in {window_s:g}s windows, {os.cpu_count()} CPUs,"
        f" load {os.getloadavg()[0]:.1f}"
    )
    cold.print_cold(done)


def _cpu_seconds(pid: int, *, children: bool = True) -> float:
    """CPU seconds (user + system) of a process and, optionally, its children (uvicorn's workers)."""
    import psutil

    proc = psutil.Process(pid)
    total = 0.0
    for p in [proc, *(proc.children(recursive=True) if children else [])]:
        try:
            times = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def server_timings(resp: Reply) -> dict[str, float]:
    """The server's own stage timings plus ``app``, its whole time (the Server-Timing header)."""
    out = {k: float(v) for k, v in resp.json()["timings_ms"].items()}
    for part in resp.headers.get("server-timing", "").split(","):
        name, _, dur = part.strip().partition(";dur=")
        if name and dur:
            out[name] = float(dur)
    return out


def _probe(base: str, request: Callable[[int], RequestSpec], count: int) -> str:
    """Client latency and server stage timings of one request at a time: the floor under load.

    ``request`` must hand out fresh queries, or the embedding stage is a cache hit.
    """
    client_ms: list[float] = []
    stages: dict[str, list[float]] = {}
    with httpx.Client(base_url=base, timeout=30.0) as client:
        for i in range(count):
            spec = request(i)
            t = time.perf_counter()
            r = client.post(spec.path, json=spec.json, headers=spec.headers)
            client_ms.append((time.perf_counter() - t) * 1000)
            for stage, ms in r.json()["timings_ms"].items():
                stages.setdefault(stage, []).append(ms)
    parts = [f"client {np.median(client_ms):.1f} ms"] + [
        f"{stage} {np.median(v):.1f}" for stage, v in stages.items()
    ]
    return ", ".join(parts)


def _check(base: str, spec: RequestSpec) -> None:
    """One request before the load: fail loudly if the setup is wrong, and warm the caches."""
    for _ in range(5):
        r = httpx.post(base + spec.path, json=spec.json, headers=spec.headers, timeout=30.0)
        if r.status_code != 200:
            raise SystemExit(f"retrieve failed: {r.status_code} {r.text[:500]}")
    body = r.json()
    if not body["results"] or body["index_version"].startswith("delta"):
        raise SystemExit(
            f"the live index is not serving: {body['index_version']}, {len(body['results'])} hits"
        )
    print(
        f"check: {len(body['results'])} hits from {body['index_version']},"
        f" server timings {body['timings_ms']}"
    )


if __name__ == "__main__":
    main()
