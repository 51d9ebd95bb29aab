"""An ingestion job: pending items -> prepare -> embed -> commit, inline or on Ray Data.

Both paths run the same stage functions (``ingest.pipeline``). Commits (``jobs.commit``)
happen in the driver, one transaction per document with its job item, so progress is
durable per item and a resumed job redoes only what is still pending.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from catalog import attachments as attachments_repo
from catalog import documents as docs_repo
from catalog import jobs as jobs_repo
from catalog.documents import DocumentRow
from catalog.jobs import ItemRow
from core import tracing
from core.errors import ParseError
from core.records import Committable, Embedded, Failed, ItemRef, Outcome, Prepared, Unchanged
from index.embedder import Embedder, EmbeddingSpec
from ingest.isolation import IsolationConfig, Parser
from ingest.parse_pool import make_parser
from ingest.pipeline import ChunkingConfig, PrepareRequest, embed, prepare_batch
from jobs.commit import commit, refresh_descriptions
from jobs.dual_write import DualWriter
from jobs.sources import load_source, read_path
from jobs.staging import remove_finished

log = logging.getLogger(__name__)
# How long a Ray job waits for its stage actors to be placed and loaded before it fails.
ACTOR_START_TIMEOUT_S = 600


@dataclass(frozen=True, slots=True)
class JobContext:
    job_id: uuid.UUID
    tenant_id: str
    conninfo: str
    model_name: str
    chunking: ChunkingConfig
    batch_documents: int
    embedding: EmbeddingSpec
    upload_dir: Path | None  # staged uploads of finished items are removed from here
    isolation: IsolationConfig  # how the prepare stage parses (rlimit'd worker processes)
    # Who holds the job's lease (the runner's id); the lease is renewed, and a cancel seen,
    # between documents and between embedding batches. None: nobody checks (tests of stages).
    owner: str | None = None
    embed_batch: int | None = None  # texts per encode call; None = one call per commit batch


def prepare_items(
    conn: psycopg.Connection,
    ctx: JobContext,
    items: Sequence[ItemRow],
    count_tokens: Callable[[str], int],
    parser: Parser,
) -> list[Outcome]:
    """Load, hash, parse (a batch at a time on ``parser``) and chunk the items, in order."""
    outcomes: dict[int, Outcome] = {}
    requests: list[PrepareRequest] = []
    live: dict[int, DocumentRow] = {}
    for item in items:
        ref = ItemRef(item.job_id, item.item_no)
        try:
            source = load_source(conn, tenant_id=ctx.tenant_id, item=item)
        except ParseError as exc:
            outcomes[item.item_no] = Failed(ref, exc.code, exc.message)
            continue
        doc = docs_repo.get_document(conn, tenant_id=ctx.tenant_id, external_id=item.external_id)
        owner = docs_repo.foreign_owner(doc, item.connector)
        if owner is not None:
            message = docs_repo.foreign_message(item.external_id, owner)
            outcomes[item.item_no] = Failed(ref, docs_repo.FOREIGN_CODE, message)
            continue
        active = doc is not None and doc.state == "active" and doc.current_version is not None
        current = (doc.doc_id, doc.current_version) if active and doc and doc.current_version else None
        if doc is not None:
            live[item.item_no] = doc
        requests.append(PrepareRequest(ref, source, doc.content_hash if doc else None, current))
    prepared = prepare_batch(requests, count_tokens=count_tokens, config=ctx.chunking, parser=parser)
    for request, outcome in zip(requests, prepared, strict=True):
        doc = live.get(request.ref.item_no)
        if isinstance(outcome, Unchanged) and doc is not None:
            docs_repo.update_acl_if_changed(conn, doc=doc, acl=request.source.acl)
            # An unchanged message has unchanged attachments; its new readers are theirs too.
            attachments_repo.propagate_acl(
                conn, tenant_id=doc.tenant_id, parent_doc_id=doc.doc_id, acl=request.source.acl
            )
            refresh_descriptions(conn, doc, request.source)
            if request.source.connector is not None:
                docs_repo.set_connector(conn, doc_id=doc.doc_id, connector=request.source.connector)
            conn.commit()
        outcomes[request.ref.item_no] = outcome
    return [outcomes[item.item_no] for item in items]


class Cancelled(Exception):
    """The job was asked to stop; nothing of the batch in flight was committed."""


class LeaseLost(Exception):
    """Another worker owns the job now (a takeover or an operator's resume): stop, settle nothing."""


def check_lease(conn: psycopg.Connection, ctx: JobContext) -> None:
    """Renew the job's lease; raise when it must stop (a batch boundary)."""
    if ctx.owner is None:
        return
    lease = jobs_repo.renew_lease(conn, job_id=ctx.job_id, owner=ctx.owner)
    if lease == "cancel":
        raise Cancelled
    if lease == "lost":
        raise LeaseLost


def _embed_outcomes(
    outcomes: Sequence[Outcome],
    embedder: Embedder,
    *,
    batch_size: int | None = None,
    before_batch: Callable[[], None] | None = None,
) -> list[Committable]:
    ready = [o for o in outcomes if isinstance(o, Prepared)]
    done = embed(ready, embedder, batch_size=batch_size, before_batch=before_batch) if ready else []
    embedded = iter(done)
    return [next(embedded) if isinstance(o, Prepared) else o for o in outcomes]


def _item_no(result: Committable) -> int:
    return result.prepared.ref.item_no if isinstance(result, Embedded) else result.ref.item_no


def _family(result: Committable) -> list[Committable]:
    """The result and, for an e-mail, its attachments."""
    return [result, *result.children] if isinstance(result, Embedded) else [result]


def _commit_all(
    conn: psycopg.Connection, ctx: JobContext, results: Sequence[Committable], dual: DualWriter | None
) -> int:
    # A cancel that arrived while the batch was prepared or embedded wins: nothing of it is
    # written, its items stay pending and are settled ``cancelled`` (resumable).
    check_lease(conn, ctx)
    chunks = 0
    # An e-mail's attachments are embedded (and dual-written) beside it: one flat list.
    flat = [member for result in results for member in _family(result)]
    extra = iter(dual.vectors(conn, flat) if dual is not None else [{} for _ in flat])
    for result in results:
        vectors = [next(extra) for _ in _family(result)]
        commit(
            conn,
            result,
            model=ctx.model_name,
            extra_vectors=vectors[0],
            chunking=ctx.chunking.label,
            child_vectors=vectors[1:],
        )
        if isinstance(result, Embedded):
            chunks += sum(len(member.vectors) for member in _family(result) if isinstance(member, Embedded))
    conn.commit()
    # Committed or failed for good: their staged uploads are no longer needed.
    remove_finished(
        conn, job_id=ctx.job_id, item_nos=[_item_no(r) for r in results], upload_dir=ctx.upload_dir
    )
    conn.commit()
    return chunks


def run_inline(
    conn: psycopg.Connection,
    ctx: JobContext,
    embedder: Embedder,
    parser: Parser,
    on_progress: Callable[[int, int], None] | None = None,
    dual: DualWriter | None = None,
) -> None:
    """The fast path for small pushes: every stage in this process (parsing on ``parser``)."""
    pending = jobs_repo.items(conn, job_id=ctx.job_id, state="pending")
    for start in range(0, len(pending), ctx.batch_documents):
        batch = pending[start : start + ctx.batch_documents]
        check_lease(conn, ctx)  # between documents (commit batches)
        with tracing.span("ingest.batch", **{"ragline.batch.documents": len(batch)}) as span:
            outcomes = prepare_items(conn, ctx, batch, embedder.count_tokens, parser)
            results = _embed_outcomes(
                outcomes, embedder, batch_size=ctx.embed_batch, before_batch=lambda: check_lease(conn, ctx)
            )
            chunks = _commit_all(conn, ctx, results, dual)
            if span is not None:
                span.set_attribute("ragline.batch.chunks", chunks)
        if on_progress:
            on_progress(len(batch), chunks)


# --- Ray Data path -------------------------------------------------------------------------


def stage_paths(conn: psycopg.Connection, ctx: JobContext, model: str) -> int:
    """Read files named by path in the driver and keep their bytes in the catalog.

    ``ragline ingest`` and uploads name files on the submitting machine's disk; Ray workers on
    other nodes cannot read them, but they all reach PostgreSQL. One file in memory at a time;
    an unreadable file fails its item here. Returns the number of items staged.
    """
    staged = 0
    for item_no, path in jobs_repo.unstaged_path_items(conn, job_id=ctx.job_id):
        try:
            payload = read_path(Path(path))
        except ParseError as exc:
            commit(conn, Failed(ItemRef(ctx.job_id, item_no), exc.code, exc.message), model=model)
            continue
        with conn.transaction():
            jobs_repo.stage_payload(conn, job_id=ctx.job_id, item_no=item_no, payload=payload)
        staged += 1
    return staged


def _node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


class _PrepareActor:
    """Reads payloads and parses/chunks; counts tokens with the embedding model's tokenizer.

    Parsing runs on the actor's own small pool of rlimit'd workers (``ctx.isolation``); they
    end with the actor (their pipes close when it exits).
    """

    def __init__(self, ctx: JobContext, model_path: str) -> None:
        from transformers import AutoTokenizer

        self.ctx = ctx
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.conn = psycopg.connect(ctx.conninfo, autocommit=True)
        self.node = _node_id()
        self.parser = make_parser(ctx.isolation)

    def _count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        by_no = {i.item_no: i for i in jobs_repo.items(self.conn, job_id=self.ctx.job_id, state="pending")}
        # An item finished meanwhile (resume racing) has nothing to do: None.
        items = [by_no[int(no)] for no in batch["item_no"] if int(no) in by_no]
        done = {
            item.item_no: outcome
            for item, outcome in zip(
                items, prepare_items(self.conn, self.ctx, items, self._count, self.parser), strict=True
            )
        }
        blobs = [pickle.dumps(done.get(int(no))) for no in batch["item_no"]]
        return {"item_no": batch["item_no"], "blob": blobs, "prepare_node": [self.node] * len(blobs)}


class _EmbedActor:
    def __init__(self, spec: EmbeddingSpec, ctx: JobContext) -> None:
        # One intra-op thread per actor: two single-threaded actors beat one two-thread actor.
        self.embedder = dataclasses.replace(spec, threads=1).load()
        self.batch_size = spec.batch_size
        self.node = _node_id()
        self.ctx = ctx
        # The actor renews the lease between encode calls: the driver waits on a big document.
        self.conn = psycopg.connect(ctx.conninfo, autocommit=True) if ctx.owner else None

    def _check(self) -> None:
        if self.conn is not None:
            check_lease(self.conn, self.ctx)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        outcomes = [pickle.loads(b) for b in batch["blob"]]
        present = [o for o in outcomes if o is not None]
        try:
            done = iter(
                _embed_outcomes(present, self.embedder, batch_size=self.batch_size, before_batch=self._check)
            )
            blobs = [pickle.dumps(next(done) if o is not None else None) for o in outcomes]
        except (Cancelled, LeaseLost):
            # Drop the whole batch: the driver reads the same flag before its next commit and
            # stops there, so none of these items is written and all stay resumable.
            blobs = [pickle.dumps(None) for _ in outcomes]
        return {
            "item_no": batch["item_no"],
            "blob": blobs,
            "prepare_node": batch["prepare_node"],
            "embed_node": [self.node] * len(blobs),
        }


def _spec(ctx: JobContext, embed_batch: int) -> EmbeddingSpec:
    spec = dataclasses.replace(ctx.embedding, batch_size=embed_batch)
    if spec.resolved_backend() == "onnx" and spec.onnx_dir is not None:
        from index.embedder import resolve_model_path
        from index.onnx_export import ensure_export

        ensure_export(resolve_model_path(spec.model_name), spec.onnx_dir)  # once, before the actors
    return spec


@dataclass(frozen=True, slots=True)
class RayBatch:
    results: list[Committable]
    prepare_nodes: frozenset[str]  # Ray node ids that parsed and chunked this batch
    embed_nodes: frozenset[str]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a Ray job's stages ran: node ids, so an operator sees the cluster was used."""

    prepare: frozenset[str] = frozenset()
    embed: frozenset[str] = frozenset()

    def add(self, batch: RayBatch) -> Placement:
        return Placement(self.prepare | batch.prepare_nodes, self.embed | batch.embed_nodes)

    def as_json(self) -> dict[str, list[str]]:
        return {"prepare": sorted(self.prepare), "embed": sorted(self.embed)}


def ray_results(
    ctx: JobContext,
    item_nos: Sequence[int],
    *,
    prepare_actors: int,
    embed_actors: int,
    embed_batch: int,
) -> Iterator[RayBatch]:
    """Stream embedded outcomes back to the driver, one Ray Data batch at a time."""
    import ray
    from ray.data import ActorPoolStrategy

    from index.embedder import resolve_model_path

    data_ctx = ray.data.DataContext.get_current()
    data_ctx.enable_progress_bars = False  # the job's own counters are the progress report
    # Every actor of a pool is up before work is handed out; otherwise the first actor to load
    # its model takes every batch of a short job and the other nodes idle.
    data_ctx.wait_for_min_actors_s = ACTOR_START_TIMEOUT_S
    # Ray Data's actor locality (on by default; Ray 2.60 deprecates the option to turn it off)
    # prefers an idle embed actor on the node whose object store holds the prepared block. It is
    # a preference: a block under Ray's 100 KiB inline limit lives in the driver's memory, with no
    # node, and a larger one's node is known a moment after its task returns. What spreads embed
    # work is one batch in flight per embed actor: whenever batches wait at the embed stage (it
    # is the slower stage for real documents), every embed actor has one.
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    # ... whose progress module warns, once per process, that they are off: that is the intent.
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)
    ctx_ref = ctx
    # Enough blocks that every embed actor gets work, one job batch per block at most.
    blocks = min(len(item_nos), max(2 * embed_actors, -(-len(item_nos) // ctx.batch_documents)))
    ds: Any = ray.data.from_items([{"item_no": n} for n in item_nos], override_num_blocks=max(1, blocks))
    ds = ds.map_batches(
        _PrepareActor,
        fn_constructor_args=(ctx_ref, resolve_model_path(ctx.model_name)),
        batch_size=ctx.batch_documents,
        # One batch in flight per actor: a queued batch waits for its busy actor while another
        # actor (on another node) idles; the batches are heavy, the hand-over cheap.
        compute=ActorPoolStrategy(size=prepare_actors, max_tasks_in_flight_per_actor=1),
        num_cpus=0.25,
    )
    # One GPU per embed actor when the cluster has GPUs; otherwise one-CPU-ish actors (two
    # single-threaded actors beat one two-thread actor on small machines).
    gpus = int(ray.cluster_resources().get("GPU", 0))
    ds = ds.map_batches(
        _EmbedActor,
        fn_constructor_args=(_spec(ctx, embed_batch), ctx_ref),
        # One prepared block per embed batch: a batch merged from blocks of several nodes has
        # no one node to go to. Encoding per job batch costs nothing (docs/benchmarks.md,
        # Ingestion: 1.02x of one call for all chunks).
        batch_size=ctx.batch_documents,
        compute=ActorPoolStrategy(
            size=min(embed_actors, gpus) if gpus else embed_actors, max_tasks_in_flight_per_actor=1
        ),
        num_cpus=0.75 if not gpus else 1,
        num_gpus=1 if gpus else 0,
    )
    for batch in ds.iter_batches(batch_size=ctx.batch_documents, batch_format="numpy"):
        yield RayBatch(
            [r for r in (pickle.loads(b) for b in batch["blob"]) if r is not None],
            frozenset(str(n) for n in batch["prepare_node"]),
            frozenset(str(n) for n in batch["embed_node"]),
        )


def run_on_ray(
    conn: psycopg.Connection,
    ctx: JobContext,
    *,
    prepare_actors: int,
    embed_actors: int,
    embed_batch: int,
    on_progress: Callable[[int, int], None] | None = None,
    dual: DualWriter | None = None,
) -> Placement:
    """Run the pending items on Ray; returns (and records on the job) where the stages ran."""
    stage_paths(conn, ctx, ctx.model_name)
    pending = [i.item_no for i in jobs_repo.items(conn, job_id=ctx.job_id, state="pending")]
    placement = Placement()
    if not pending:
        return placement
    started = time.monotonic()
    batches = ray_results(
        ctx, pending, prepare_actors=prepare_actors, embed_actors=embed_actors, embed_batch=embed_batch
    )
    try:
        for batch in batches:
            placement = placement.add(batch)
            # Prepared and embedded by the actors; the driver's span is the batch's commit.
            attributes = {"ragline.batch.documents": len(batch.results), "ragline.batch.ray": True}
            with tracing.span("ingest.batch", **attributes) as span:
                chunks = _commit_all(conn, ctx, batch.results, dual)
                if span is not None:
                    span.set_attribute("ragline.batch.chunks", chunks)
            if on_progress:
                on_progress(len(batch.results), chunks)
    finally:
        jobs_repo.record_placement(conn, job_id=ctx.job_id, placement=placement.as_json())
    log.info(
        "ray ingest of %d items took %.1fs on %d prepare / %d embed nodes",
        len(pending),
        time.monotonic() - started,
        len(placement.prepare),
        len(placement.embed),
    )
    return placement
