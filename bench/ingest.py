"""Ingestion throughput against raw embedding, PDF pages/s, and push-to-searchable latency.

Run: ``OPENBLAS_NUM_THREADS=1 HF_HUB_OFFLINE=1 python -m bench.ingest --docs 300``.

For one corpus (``--source cranfield``: the first N non-empty documents of
``../shared/data/cranfield/corpus.jsonl``, title + text as text/plain, copies past its 1,400;
``--source samples``: ``samples/corpus``) it measures:

1. raw encode: the corpus's leaf chunks (made by the pipeline's own ``prepare``) embedded
   with one ``embedder.embed`` call, same model instance and batch size as the inline path;
2. the pipeline end to end (parse + chunk + embed + catalog COPY write) through
   ``IngestRunner.run_job`` on a fresh database of a throwaway PostgreSQL, inline and on
   local Ray Data. Ray is started before the clock; the Ray timing still includes the
   actors' start-up (each embed actor loads the model);
3. pipeline / raw chunks/s (target >= 0.8: embedding dominates, the rest is overhead);
4. PDF pages/s for parsing alone and for parse + chunk (the shared PDFs and a generated
   200-page one);
5. push-to-searchable: the API in-process (``TestClient``), one small document per push via
   ``POST /v1/documents``, then ``POST /v1/retrieve`` polled with the document's unique word.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import psycopg

from bench.common import print_table
from catalog import embedded
from catalog import jobs as jobs_repo
from catalog.db import apply_migrations, create_database
from catalog.jobs import NewItem
from catalog.principals import ensure_tenant
from core.progress import Progress
from core.records import Acl, ItemRef, Prepared, SourceDocument
from core.settings import Settings
from index.embedder import Embedder, load_embedder
from ingest.chunking import chunk_document
from ingest.files import MIME_BY_SUFFIX, walk
from ingest.parse import parse_document
from ingest.pipeline import ChunkingConfig, prepare
from testkit.clusters import stop_ray, throwaway_cluster
from wiring import make_runner
from wiring.embedding import embedding_spec
from wiring.ingest import chunking_config

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
CRANFIELD = SHARED_DATA / "cranfield" / "corpus.jsonl"
PDF_DIR = SHARED_DATA / "pdfs"
SAMPLES = REPO / "samples" / "corpus"
MODEL = "bundled:all-MiniLM-L6-v2"
TENANT = "bench"
READER = "user:bench"
TARGET_RATIO = 0.8
GENERATED_PAGES = 200
PUSH_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Timed:
    """One timed stage: how many chunks it produced or embedded, in how many seconds."""

    name: str
    chunks: int
    seconds: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.chunks / self.seconds if self.seconds > 0 else 0.0


# --- corpus ---------------------------------------------------------------------------------


def cranfield_items(n: int) -> list[NewItem]:
    """The first ``n`` non-empty Cranfield documents, title + text as text/plain.

    Past the collection's 1,400, it starts over with copies (``cranfield-<id>-copy<k>``, the
    text led by "Copy k."), so a job of any size has distinct documents to hash, chunk and embed
    with Cranfield's own length distribution.
    """
    base: list[tuple[str, str, str]] = []
    with CRANFIELD.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            title, text = (row.get("title") or "").strip(), (row.get("text") or "").strip()
            if text:
                base.append((str(row["_id"]), title, text))
            if len(base) == n:
                break
    items: list[NewItem] = []
    for no in range(min(n, len(base) * 1000)):
        doc_id, title, text = base[no % len(base)]
        copy = no // len(base)
        body = f"{title}\n\n{text}" if title else text
        external_id = f"cranfield-{doc_id}"
        if copy:
            body, external_id = f"Copy {copy + 1}. {body}", f"{external_id}-copy{copy + 1}"
        items.append(_item(external_id, "text/plain", body.encode(), title or None))
    return items


def sample_items(n: int) -> list[NewItem]:
    """Up to ``n`` files of ``samples/corpus`` with a supported suffix."""
    return [
        _item(ext_id, MIME_BY_SUFFIX[path.suffix.lower()], path.read_bytes(), None)
        for path, ext_id in walk([SAMPLES]).found[:n]
    ]


def _item(external_id: str, mime: str, data: bytes, title: str | None) -> NewItem:
    return NewItem(
        external_id=external_id,
        mime_type=mime,
        title=title,
        acl=Acl((), True),
        payload=data,
        byte_size=len(data),
    )


def leaf_texts(items: Sequence[NewItem], embedder: Embedder, config: ChunkingConfig) -> list[list[str]]:
    """What the pipeline embeds, per document: ``embedding_text`` of the leaf chunks of ``prepare``."""
    texts: list[list[str]] = []
    job = uuid.uuid4()
    for no, it in enumerate(items):
        source = SourceDocument(TENANT, it.external_id, it.mime_type, it.payload or b"", it.title, acl=it.acl)
        out = prepare(
            ItemRef(job, no),
            source,
            current_hash=None,
            current=None,
            count_tokens=embedder.count_tokens,
            config=config,
        )
        if isinstance(out, Prepared):
            texts.append([c.embedding_text for c in out.chunks if c.level == 0])
    return texts


# --- catalog and pipeline -------------------------------------------------------------------


def fresh_database(cluster: embedded.LocalCluster, name: str) -> str:
    """A new, migrated database in the cluster, so no run sees another's documents."""
    create_database(cluster.url, name)
    url = f"postgresql://{embedded.DB_USER}@/{name}?host={cluster.socket_dir}&port={cluster.port}"
    apply_migrations(url)
    return url


def run_pipeline(
    settings: Settings, url: str, items: Sequence[NewItem], *, use_ray: bool, embedder: Embedder
) -> Timed:
    """Create one job over ``items`` and time ``run_job`` from its start to its end."""
    with psycopg.connect(url) as conn:
        ensure_tenant(conn, tenant_id=TENANT)
        job_id = jobs_repo.create_job(conn, tenant_id=TENANT, kind="ingest", items=items)
    runner = make_runner(settings, url, use_ray=use_ray, embedder=embedder)
    started = time.perf_counter()
    progress = Progress(len(items))
    state = runner.run_job(job_id, on_progress=progress)
    seconds = time.perf_counter() - started
    progress.close()
    with psycopg.connect(url) as conn:
        job = jobs_repo.get_job(conn, job_id=job_id)
    if job is None or state not in ("succeeded", "partially_failed"):
        raise RuntimeError(f"ingest job {job_id} ended {state}: {job.error if job else 'missing'}")
    name = "pipeline, Ray Data" if use_ray else "pipeline, inline"
    note = f"job {state}, {job.documents_done} docs, {job.documents_failed} failed"
    if use_ray:
        note += f"; includes actor start-up ({settings.ingest.workers} embed actors)"
    return Timed(name, job.chunks, seconds, note)


def time_raw_encode(texts: Sequence[str], embedder: Embedder) -> Timed:
    embedder.embed(texts[:8])  # lazy allocations and first-call overhead stay out of the timing
    started = time.perf_counter()
    vectors = embedder.embed(texts)
    seconds = time.perf_counter() - started
    return Timed("raw model.encode", len(vectors), seconds, "embedder.embed over all leaf chunks at once")


def time_batched_encode(by_doc: Sequence[Sequence[str]], embedder: Embedder, batch_documents: int) -> Timed:
    """Encode as the pipeline calls it: one ``embed`` per batch of ``batch_documents`` documents."""
    chunks = 0
    started = time.perf_counter()
    for start in range(0, len(by_doc), batch_documents):
        chunks += len(embedder.embed([t for doc in by_doc[start : start + batch_documents] for t in doc]))
    seconds = time.perf_counter() - started
    note = f"one embed call per {batch_documents} documents, as the job batches them"
    return Timed("diag: encode per job batch", chunks, seconds, note)


def start_ray(data_dir: Path) -> float:
    """Start local Ray; returns the seconds it took."""
    from jobs.ray_runtime import ensure_ray

    started = time.perf_counter()
    ensure_ray(address=None, data_dir=data_dir)
    return time.perf_counter() - started


# --- PDFs -----------------------------------------------------------------------------------


def generated_pdf(pages: int, *, seed: int = 0) -> bytes:
    """A ``pages``-page PDF: a heading and ~40 lines of body text on every page."""
    import pymupdf

    rng = random.Random(seed)
    vocab = (
        "wing flow pressure boundary layer shock wave heat transfer model surface velocity turbulent "
        "laminar nozzle body drag lift angle mach number plate cone jet stream ratio"
    ).split()
    doc = pymupdf.open()
    for number in range(1, pages + 1):
        page = doc.new_page()
        page.insert_text((72, 72), f"Section {number}: {' '.join(rng.choices(vocab, k=4))}", fontsize=16)
        for line in range(40):
            page.insert_text((72, 100 + 16 * line), " ".join(rng.choices(vocab, k=11)), fontsize=10)
    data = doc.tobytes()
    doc.close()
    return bytes(data)


def pdf_sources() -> tuple[list[tuple[str, bytes]], str]:
    found = sorted(PDF_DIR.glob("*.pdf")) if PDF_DIR.is_dir() else []
    note = "" if found else f"note: no PDFs under {PDF_DIR}: only the generated one is measured"
    files = [(p.name, p.read_bytes()) for p in found]
    files.append((f"generated-{GENERATED_PAGES}p.pdf", generated_pdf(GENERATED_PAGES)))
    return files, note


def pdf_rows(embedder: Embedder, config: ChunkingConfig, *, repeats: int = 3) -> list[list[object]]:
    """Pages/s for parsing alone and parse + chunk, best of ``repeats`` runs per file."""
    files, note = pdf_sources()
    if note:
        print(note)
    rows: list[list[object]] = []
    total_pages, total_parse, total_both = 0, 0.0, 0.0
    for name, data in files:
        source = SourceDocument(TENANT, name, "application/pdf", data)
        parse_s = both_s = float("inf")
        pages = chunks = 0
        for _ in range(repeats):
            started = time.perf_counter()
            parsed = parse_document(source)
            parsed_at = time.perf_counter()
            leaves = chunk_document(
                parsed,
                tenant_id=TENANT,
                external_id=name,
                version=1,
                count_tokens=embedder.count_tokens,
                chunk_tokens=config.chunk_tokens,
                overlap_tokens=config.overlap_tokens,
            )
            parse_s = min(parse_s, parsed_at - started)
            both_s = min(both_s, time.perf_counter() - started)
            pages, chunks = parsed.page_count, sum(1 for c in leaves if c.level == 0)
        total_pages, total_parse, total_both = total_pages + pages, total_parse + parse_s, total_both + both_s
        rows.append([name, len(data) // 1024, pages, chunks, parse_s, pages / parse_s, pages / both_s])
    rows.append(
        ["all", "", total_pages, "", total_parse, total_pages / total_parse, total_pages / total_both]
    )
    return rows


# --- push to searchable ---------------------------------------------------------------------


def _word(rng: random.Random) -> str:
    return "zq" + "".join(rng.choices("bcdfghjklmnprstvwxz", k=10))


@contextmanager
def api_client(settings: Settings, embedder: Embedder) -> Iterator[Any]:
    """The whole API in-process on ``embedder``, its runner without Ray (like the tests)."""
    from fastapi.testclient import TestClient

    from api.app import ServiceHook, create_app
    from api.services import ingest_hook, search_hook

    hooks: list[ServiceHook] = [
        partial(ingest_hook, embedder=embedder),
        partial(search_hook, embedder=embedder),
    ]
    app = create_app(settings, hooks=hooks)
    with TestClient(app) as client:
        app.state.runner.config = replace(app.state.runner.config, use_ray=False)
        yield client


def _keys(url: str) -> tuple[dict[str, str], dict[str, str]]:
    from authz.api_keys import create_key

    with psycopg.connect(url) as conn:
        ingest = create_key(conn, tenant_id=TENANT, roles=["ingest"]).token
        query = create_key(conn, tenant_id=TENANT, roles=["query"], principal_id=READER).token
    return {"Authorization": f"Bearer {ingest}"}, {"Authorization": f"Bearer {query}"}


def push_once(client: Any, ingest: dict[str, str], query: dict[str, str], no: int, word: str) -> float:
    """Seconds from the push to the first retrieve that returns the pushed document."""
    ext_id = f"push-{no}-{word}"
    doc = {
        "external_id": ext_id,
        "title": f"Bench note {no}",
        "text": f"The {word} procedure: check the gauges, log the reading, and file note {no}.",
        "acl": {"public": True},
    }
    started = time.perf_counter()
    resp = client.post("/v1/documents", json={"documents": [doc]}, headers=ingest)
    if resp.status_code != 202:
        raise RuntimeError(f"push failed: {resp.status_code} {resp.text}")
    while time.perf_counter() - started < PUSH_TIMEOUT_S:
        found = client.post("/v1/retrieve", json={"query": word, "top_k": 5}, headers=query)
        if found.status_code != 200:
            raise RuntimeError(f"retrieve failed: {found.status_code} {found.text}")
        if any(r["document_external_id"] == ext_id for r in found.json()["results"]):
            return time.perf_counter() - started
        time.sleep(0.02)
    raise RuntimeError(f"document {ext_id} not searchable after {PUSH_TIMEOUT_S:.0f}s")


def push_latencies(
    settings: Settings, url: str, embedder: Embedder, pushes: int
) -> tuple[float, list[float]]:
    """(cold first push, then ``pushes`` warm ones), each a new document and a new word."""
    ingest, query = _keys(url)
    rng = random.Random(uuid.uuid4().int)
    with api_client(settings, embedder) as client:
        cold = push_once(client, ingest, query, 0, _word(rng))
        return cold, [push_once(client, ingest, query, no, _word(rng)) for no in range(1, pushes + 1)]


# --- report ---------------------------------------------------------------------------------


def machine_line() -> str:
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (
        f"machine: {cores} usable CPU cores (os.cpu_count {os.cpu_count()}), {memory:.1f} GiB memory, "
        f"GPU: {gpu} (torch.cuda.is_available() = {torch.cuda.is_available()}), "
        f"torch threads {torch.get_num_threads()}; {load_line()}"
    )


def load_line() -> str:
    """Other processes share the cores: the load average says how much the timings can be trusted."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min)"


def command_line() -> str:
    env = [f"{k}={os.environ[k]}" for k in ("OPENBLAS_NUM_THREADS", "HF_HUB_OFFLINE") if k in os.environ]
    return shlex.join([*env, "python", "-m", "bench.ingest", *sys.argv[1:]])


def throughput_rows(raw: Timed, runs: Sequence[Timed], diagnostics: Sequence[Timed]) -> list[list[object]]:
    """The reference row, the pipeline rows judged against the target, then diagnostic rows."""
    rows: list[list[object]] = [[raw.name, raw.chunks, raw.seconds, raw.rate, "1.00", "-", raw.note]]
    judged = [(run, True) for run in runs] + [(diag, False) for diag in diagnostics]
    for run, judge in judged:
        ratio = run.rate / raw.rate if raw.rate else 0.0
        verdict = ("ok" if ratio >= TARGET_RATIO else "below") if judge else "-"
        rows.append([run.name, run.chunks, run.seconds, run.rate, f"{ratio:.2f}", verdict, run.note])
    return rows


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=300, help="documents to ingest (default 300)")
    parser.add_argument("--source", choices=["cranfield", "samples"], default="cranfield")
    parser.add_argument(
        "--ray", action=argparse.BooleanOptionalAction, default=True, help="also run Ray Data"
    )
    parser.add_argument(
        "--inline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the inline pipeline (--no-inline: raw encode against Ray alone, on a long job)",
    )
    parser.add_argument(
        "--diagnostics",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the prepare-only and per-batch encode rows, the PDF table and push-to-searchable",
    )
    parser.add_argument(
        "--raw",
        choices=["torch", "configured"],
        default="torch",
        help="the raw encode's embedder: torch (the bundled model on PyTorch, its default threads;"
        " the inline run uses it too) or configured (the embedding settings the Ray actors load,"
        " ONNX where installed, with one intra-op thread per core: what the actors' model can do"
        " on this machine)",
    )
    parser.add_argument("--pushes", type=int, default=5, help="measured push-to-searchable pushes")
    args = parser.parse_args(argv)
    if args.docs < 1 or args.pushes < 1:
        parser.error("--docs and --pushes must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    if args.source == "cranfield" and not CRANFIELD.exists():
        raise SystemExit(f"bench.ingest: {CRANFIELD} is absent; try --source samples")
    items = cranfield_items(args.docs) if args.source == "cranfield" else sample_items(args.docs)
    if not items:
        raise SystemExit(f"bench.ingest: no documents found for --source {args.source}")
    print(machine_line())
    print(f"command: {command_line()}")
    with throwaway_cluster("ragline-bench-ingest-") as (cluster, tmp):
        _run(args, items, cluster, tmp)
        print(f"\nat the end: {load_line()}")
    return 0


def _run(args: argparse.Namespace, items: list[NewItem], cluster: embedded.LocalCluster, tmp: Path) -> None:
    settings = Settings(data_dir=tmp, log_level="WARNING")
    config = chunking_config(settings)
    if args.raw == "configured":
        spec = embedding_spec(settings)
        embedder = replace(spec, model_name=MODEL, threads=os.cpu_count() or 1).load()
    else:
        embedder = load_embedder(MODEL, batch_size=settings.ingest.embed_batch_size)
    _throughput(args, items, cluster, tmp, settings, embedder)
    if not args.diagnostics:
        return
    print("\nPDF parsing (best of 3 per file; pages/s over the whole file):")
    rows = pdf_rows(embedder, config)
    print_table(
        ["pdf", "KiB", "pages", "leaf chunks", "parse s", "parse pages/s", "parse+chunk pages/s"], rows
    )
    api_url = fresh_database(cluster, "api")
    api_settings = Settings(data_dir=tmp / "api", database_url=api_url, log_level="WARNING")
    cold, warm = push_latencies(api_settings, api_url, embedder, args.pushes)
    print(f"\npush-to-searchable, one small text document per push ({args.pushes} pushes after a cold one):")
    rows = [["push -> searchable", len(warm), statistics.median(warm) * 1000, max(warm) * 1000, cold * 1000]]
    print_table(["measure", "pushes", "median ms", "max ms", "cold first push ms"], rows)
    print("each: POST /v1/documents, then POST /v1/retrieve every 20 ms with the document's unique word")


def _throughput(
    args: argparse.Namespace,
    items: list[NewItem],
    cluster: embedded.LocalCluster,
    tmp: Path,
    settings: Settings,
    embedder: Embedder,
) -> None:
    config = chunking_config(settings)
    started = time.perf_counter()
    by_doc = leaf_texts(items, embedder, config)
    texts = [t for doc in by_doc for t in doc]
    prepared = Timed("diag: prepare only", len(texts), time.perf_counter() - started, "hash + parse + chunk")
    print(
        f"corpus: {args.source}, {len(items)} documents, {len(texts)} leaf chunks "
        f"(chunk {config.chunk_tokens} tokens, overlap {config.overlap_tokens}); model {MODEL} on "
        f"{getattr(embedder, 'device', '?')} ({type(embedder).__name__}, raw: {args.raw}), batch"
        f" {settings.ingest.embed_batch_size}; Ray embed actors: {settings.ingest.workers} x"
        f" {settings.embedding_backend} backend, {settings.embedding_threads} thread(s) each"
    )
    raw = time_raw_encode(texts, embedder)
    runs = []
    if args.inline:
        runs.append(
            run_pipeline(settings, fresh_database(cluster, "inline"), items, use_ray=False, embedder=embedder)
        )
    ray_s = 0.0
    if args.ray:
        ray_s = start_ray(tmp)
        runs.append(
            run_pipeline(settings, fresh_database(cluster, "ray"), items, use_ray=True, embedder=embedder)
        )
        stop_ray()
    diagnostics = [prepared]
    if args.diagnostics:
        batch_documents = make_runner(settings, "", use_ray=False).config.batch_documents
        diagnostics.append(time_batched_encode(by_doc, embedder, batch_documents))
    print("\ningestion throughput (pipeline = parse + chunk + embed + catalog COPY write):")
    headers = ["stage", "chunks", "seconds", "chunks/s", "x raw", f">= {TARGET_RATIO}", "note"]
    print_table(headers, throughput_rows(raw, runs, diagnostics))
    if args.ray:
        print(f"Ray start-up (ray.init, excluded from the Ray timing): {ray_s:.1f} s")


if __name__ == "__main__":
    raise SystemExit(main())
