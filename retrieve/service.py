"""The request path behind ``/v1/retrieve``: freshness check, masks, candidates, fusion,
details (with a second ACL guard in SQL), optional rerank and context packing.

Loading and following index versions is the ``IndexWatcher``'s job (``retrieve/watcher.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import numpy as np
from psycopg_pool import ConnectionPool

from authz.acl import AclFilter
from catalog import changes as changes_repo
from catalog import fusion as fusion_repo
from catalog import rerankers as rerankers_repo
from catalog.fusion import FusionMethod, FusionOverride
from catalog.rerankers import TenantReranker
from catalog.serving import ChunkDetail, chunk_details
from core import tracing
from core.errors import InvalidInputError, RerankTimeout, UnavailableError
from core.records import Hit
from index.tokens import CachedTokenCounter, TokenCounter
from retrieve.fusion import FusedHit, convex, rerank_fusion, rrf, single_list
from retrieve.hybrid import HybridSearcher, Masks, StageLog, build_masks
from retrieve.packing import PackedContext, PackItem, pack_context
from retrieve.query_embedding import QueryEmbedders
from retrieve.remote import RemoteShards
from retrieve.rerank_breaker import Outcome, RerankBreakers
from retrieve.serving import ServingIndex, ShardStats
from retrieve.watcher import IndexWatcher

Mode = Literal["hybrid", "dense", "lexical"]

# Tenants whose fusion defaults (and reranker rows) one node keeps (a few bytes each).
_TENANT_FUSION_CACHE = 10_000


class Scorer(Protocol):
    def score(
        self, query: str, passages: Sequence[str], *, timeout_s: float | None = None
    ) -> list[float]: ...


class TenantModels(Protocol):
    """Tenants' gated rerankers by model folder, loaded on first use (``rerank.models``)."""

    def get(self, model: str) -> Scorer: ...


@dataclass(frozen=True, slots=True)
class RerankChoice:
    """The reranker a request is reranked with (``scorer`` None: none) and the name its
    answer gives it (``RetrieveResult.reranker``)."""

    scorer: Scorer | None
    name: str | None = None


NO_RERANK = RerankChoice(None)


@dataclass(frozen=True, slots=True)
class FusionConfig:
    """How candidate lists are fused; the defaults live in ``RetrieveSettings``, a tenant's
    in the catalog (``catalog.fusion``), and a request may override both.

    ``candidates`` is each leg's depth unless ``dense_candidates`` / ``lexical_candidates``
    set that leg's own.
    """

    rrf_k: int
    dense_weight: float
    lexical_weight: float
    candidates: int
    method: FusionMethod = "rrf"
    dense_candidates: int | None = None
    lexical_candidates: int | None = None

    def depth(self, leg: Literal["dense", "lexical"], top_k: int) -> int:
        """How many candidates the leg fetches: its depth, and never fewer than ``top_k``."""
        own = self.dense_candidates if leg == "dense" else self.lexical_candidates
        return max(own or self.candidates, top_k)

    def merged(self, override: FusionOverride | None) -> FusionConfig:
        """This config with the fields ``override`` sets replaced."""
        return self if override is None else replace(self, **override.given())  # type: ignore[arg-type]

    def describe(self) -> dict[str, Any]:
        """The wire form every answer carries (``RetrieveOut.fusion``)."""
        return {
            "method": self.method,
            "rrf_k": self.rrf_k,
            "weights": {"dense": self.dense_weight, "lexical": self.lexical_weight},
            "candidates": {
                "dense": self.dense_candidates or self.candidates,
                "lexical": self.lexical_candidates or self.candidates,
            },
        }


@dataclass(frozen=True, slots=True)
class RerankConfig:
    """How the optional reranker is used; the defaults live in ``RerankSettings``."""

    candidates: int
    budget_ms: int
    blend: Literal["rrf", "replace"]
    model: str | None = None  # the server's own reranker ([rerank] model), as answers name it


@dataclass(frozen=True, slots=True)
class SearchConfig:
    fusion: FusionConfig
    rerank: RerankConfig
    # The query text on the ``retrieve`` span: only where query-text storage is on (the audit
    # keeps it then too); otherwise no span attribute holds it.
    trace_query_text: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrieveRequest:
    """One search; ``top_k`` and ``max_context_tokens`` come from the caller (the route's
    defaults and limits come from settings)."""

    query: str
    top_k: int
    max_context_tokens: int
    mode: Mode = "hybrid"
    rerank: bool | None = None
    expand_parent: bool = False
    fusion: FusionOverride | None = None  # over the tenant's defaults and the settings
    language: str | None = None  # ISO 639-1: the lexical analysis of the query, else detected


@dataclass(frozen=True, slots=True)
class ResultItem:
    detail: ChunkDetail
    score: float
    stage_scores: dict[str, float]
    # 1-based ranks per candidate list (dense, lexical), "fused" (before rerank) and
    # "rerank" when it ran: what the operator console shows for each result.
    stage_ranks: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RetrieveResult:
    results: list[ResultItem]
    context: PackedContext
    index_version: str
    embedding_model: str  # the version's model, which embedded the query
    timings_ms: dict[str, float]
    degraded: list[dict[str, str]]
    plans: list[str] = field(default_factory=list)
    fusion: FusionConfig | None = None  # the fusion this answer used
    reranker: str | None = None  # the reranker that ordered these results; None: none did


class SearchService:
    """The request path of ``/v1/retrieve``, over the index that ``watcher`` keeps current.

    ``read_pool`` serves the request's single-statement reads (catalog position, details):
    autocommit saves the BEGIN and COMMIT round trips, while catch-up keeps its transaction
    on the watcher's pool.
    """

    def __init__(
        self,
        *,
        watcher: IndexWatcher,
        read_pool: ConnectionPool,
        searcher: HybridSearcher,
        embedders: QueryEmbedders,
        counter: TokenCounter | CachedTokenCounter,
        config: SearchConfig,
        reranker: Scorer | None = None,
        shards: RemoteShards | None = None,
        tenant_rerankers: TenantModels | None = None,
        breakers: RerankBreakers | None = None,
    ) -> None:
        """``reranker``: the server's own, for tenants without a reranker row of their own;
        ``tenant_rerankers``: the models of tenants' gated rerankers (``catalog.rerankers``);
        ``shards``: shard servers on other nodes search the version instead of this process;
        ``breakers``: a tenant's reranking is suspended after repeated timeouts (none: never)."""
        self.shards = shards
        self.watcher, self.state, self.read_pool = watcher, watcher.state, read_pool
        self.searcher, self.embedders, self.counter, self.reranker = searcher, embedders, counter, reranker
        self.fusion, self.rerank_config = config.fusion, config.rerank
        self.trace_query_text = config.trace_query_text
        # tenant -> (its stored fusion defaults, the catalog position they were read at)
        self._tenant_fusion: dict[str, tuple[FusionOverride | None, int]] = {}
        # tenant -> (its reranker row, the position it was read at); the models by folder
        self._tenant_reranker: dict[str, tuple[TenantReranker | None, int]] = {}
        self.tenant_rerankers = tenant_rerankers
        self.breakers = breakers

    # --- the index behind it, for the health and admin routes ------------------------------
    def readiness(self) -> str:
        return self.watcher.readiness()

    def shard_stats(self) -> list[ShardStats]:
        """The serving version's shards: this process's, or the shard servers' when it fans out
        (it holds none itself)."""
        return self.state.shard_stats() if self.shards is None else self.shards.shard_stats()

    @property
    def last_swap_error(self) -> str | None:
        return self.watcher.last_swap_error

    @property
    def model(self) -> str:
        """The embedding model answering now: the serving version's (``ServingState.model_name``)."""
        return self.state.model_name

    def serving(self) -> ServingIndex | None:
        """The snapshot this node serves now; None before the first load."""
        return self.state.current if self.state.loaded else None

    @property
    def view_position(self) -> int:
        """The catalog position this node's view has applied."""
        return self.state.view.position

    def caught_up(self, position: int, *, purpose: str = "search") -> ServingIndex:
        """The serving snapshot once every change up to ``position`` is applied: what a
        search or an explanation for a principal read at ``position`` must run on.

        Fails closed: without current permission data there is no answer rather than a stale
        one (``UnavailableError``, "refusing to ``purpose``").
        """
        try:
            self.watcher.catch_up_to(position)
        except Exception as exc:
            raise UnavailableError(f"permission data is unavailable; refusing to {purpose}") from exc
        return self.state.current

    # --- the request path ----------------------------------------------------------------
    def retrieve(
        self,
        req: RetrieveRequest,
        acl: AclFilter,
        *,
        catalog_position: int | None = None,
        rerank_with: RerankChoice | None = None,
    ) -> RetrieveResult:
        """Search as ``acl`` allows, on a view caught up to ``catalog_position`` (read now if None).

        The reranker is the tenant's (:meth:`rerank_choice`), or ``rerank_with`` where given
        (``ragline reranker gate`` measures a model exactly as it would serve, so the
        tenant's breaker neither skips nor counts its reranks).

        Stages: freshness, ACL masks, candidates, fusion, details (the ACL re-checked in SQL),
        rerank (optional), packing. Traced (when tracing is on) as a ``retrieve`` span with a
        child span per stage: the mode, counts and index version; the query only where
        query-text storage is on (``SearchConfig.trace_query_text``).
        """
        attributes: dict[str, str | int] = {"ragline.mode": req.mode, "ragline.top_k": req.top_k}
        if self.trace_query_text:
            attributes["ragline.query"] = req.query
        with tracing.span("retrieve", **attributes):
            result = self._retrieve(req, acl, catalog_position, rerank_with)
            tracing.set_attributes(
                {"ragline.index_version": result.index_version, "ragline.results": len(result.results)}
            )
            return result

    def _retrieve(
        self,
        req: RetrieveRequest,
        acl: AclFilter,
        catalog_position: int | None,
        rerank_with: RerankChoice | None,
    ) -> RetrieveResult:
        slog = StageLog()
        snap, fusion, found = self._first_stages(req, acl, catalog_position, slog)
        fused = self._fuse(*found, fusion, slog) if found is not None else []
        choice, breaker = rerank_with, None
        if choice is None:
            choice, breaker = self._admitted(self._rerank_choice(acl.tenant_id, req.rerank, slog), acl, slog)
        reranker, reranked_by = choice.scorer, None
        want = max(req.top_k, self.rerank_config.candidates if reranker is not None else 0)
        fused_rank, outcome = None, None
        try:
            ranked = self._details(fused, want, acl, slog)
            if reranker is not None and ranked:
                fused_rank = {f.chunk_id: i for i, (f, _) in enumerate(ranked, start=1)}
                ranked, outcome = self._rerank(reranker, req.query, ranked, fusion, slog)
                reranked_by = choice.name if outcome == "reranked" else None
        finally:
            if breaker is not None:  # admitted: its outcome counts (no rerank ran: "error")
                breaker.record(acl.tenant_id, outcome or "error")
        ranks = _stage_ranks(ranked, req.top_k, fused_rank)
        items = [
            ResultItem(d, f.score, dict(f.stage_scores), r) for (f, d), r in zip(ranked, ranks, strict=False)
        ]
        t = time.perf_counter()
        context = self._pack(items, req)
        slog.time("packing", t)
        return RetrieveResult(
            items, context, snap.version_id, snap.model, slog.timings_ms, slog.degraded, slog.plans, fusion,
            reranked_by,
        )  # fmt: skip

    def rerank_choice(self, tenant_id: str, rerank: bool | None = None) -> RerankChoice:
        """The reranker a tenant's request uses, as of now (caught up with the catalog first);
        ``rerank`` is the request's own ``rerank``."""
        self._ensure_fresh(None)
        return self._rerank_choice(tenant_id, rerank, StageLog())

    def _rerank_choice(self, tenant_id: str, rerank: bool | None, slog: StageLog) -> RerankChoice:
        """The tenant's gated reranker when its row is enabled; none when its row is off (a
        gate failed or an operator turned it off: never the server's model either); the
        server's own when it has no row. ``rerank`` False: none; True: a degradation says
        why there is none. Never another tenant's: the row is read by the request's tenant."""
        if rerank is False:
            return NO_RERANK
        row = self._reranker_row(tenant_id)
        if row is None:
            if self.reranker is None:
                if rerank:
                    slog.degrade("rerank", "no reranker model is configured")
                return NO_RERANK
            return RerankChoice(self.reranker, _model_name(self.rerank_config.model))
        if not row.enabled or row.model is None:
            if rerank:
                slog.degrade("rerank", "the tenant's reranker is off (ragline reranker gate)")
            return NO_RERANK
        if self.tenant_rerankers is None:
            slog.degrade("rerank", "this node loads no tenant reranker")
            return NO_RERANK
        try:
            scorer = self.tenant_rerankers.get(row.model)
        except Exception as exc:  # a folder gone since the gate: search on, unreranked
            slog.degrade("rerank", f"the tenant's reranker did not load: {type(exc).__name__}")
            return NO_RERANK
        return RerankChoice(scorer, _model_name(row.model))

    def _admitted(
        self, choice: RerankChoice, acl: AclFilter, slog: StageLog
    ) -> tuple[RerankChoice, RerankBreakers | None]:
        """``choice`` and the breaker its outcome must be recorded with, when the tenant's
        breaker lets it rerank; none (a degradation says it is suspended) when not, at once
        rather than after another budget spent."""
        if choice.scorer is None or self.breakers is None:
            return choice, None
        admission = self.breakers.admit(acl.tenant_id)
        if not admission.rerank:
            slog.degrade("rerank", admission.reason)
            return NO_RERANK, None
        return choice, self.breakers

    def _reranker_row(self, tenant_id: str) -> TenantReranker | None:
        """The tenant's reranker row from a copy kept until the view applies a later setting
        change of the tenant (as :meth:`_fusion_at` keeps its fusion defaults)."""
        cached = self._tenant_reranker.get(tenant_id)
        if cached is None or cached[1] < self.state.view.setting_marks.get(tenant_id, 0):
            with self.read_pool.connection() as conn:
                cached = rerankers_repo.tenant_reranker_at(conn, tenant_id=tenant_id)
            if len(self._tenant_reranker) >= _TENANT_FUSION_CACHE:
                self._tenant_reranker.clear()
            self._tenant_reranker[tenant_id] = cached
        return cached[0]

    def fusion_for(self, tenant_id: str, override: FusionOverride | None = None) -> FusionConfig:
        """The fusion a tenant's request uses: settings, then the tenant's stored defaults, then
        the request's own fields; as of now (caught up with the catalog first)."""
        self._ensure_fresh(None)
        return self._fusion_at(tenant_id, override)

    def _fusion_at(self, tenant_id: str, override: FusionOverride | None) -> FusionConfig:
        """``fusion_for`` on a view already caught up with the caller's position: the tenant's
        defaults come from a copy kept until the view applies a later ``fusion`` change of the
        tenant (so a change is in effect on every node from the response that made it, as a
        group change is), not from a catalog read per request."""
        cached = self._tenant_fusion.get(tenant_id)
        if cached is None or cached[1] < self.state.view.setting_marks.get(tenant_id, 0):
            with self.read_pool.connection() as conn:
                cached = fusion_repo.tenant_defaults_at(conn, tenant_id=tenant_id)
            if len(self._tenant_fusion) >= _TENANT_FUSION_CACHE:
                self._tenant_fusion.clear()  # bounded: a node serving very many tenants re-reads
            self._tenant_fusion[tenant_id] = cached
        return self.fusion.merged(cached[0]).merged(override)

    def _ensure_fresh(self, position: int | None) -> int:
        """Catch up with every change committed before this request (fails closed).

        Args:
            position: the catalog position the caller already read (with the principal's
                groups, in one statement); read here when not given.
        """
        if position is None:
            try:
                with self.read_pool.connection() as conn:
                    position = changes_repo.current_position(conn)
            except Exception as exc:
                raise UnavailableError("permission data is unavailable; refusing to search") from exc
        self.caught_up(position)
        return position

    def _remote_candidates(
        self,
        shards: RemoteShards,
        req: RetrieveRequest,
        fusion: FusionConfig,
        acl: AclFilter,
        position: int,
        model: str,
        slog: StageLog,
    ) -> tuple[list[list[Hit]], list[float]]:
        """Both lists from the shard servers in one fan-out, after the query is embedded.

        The servers get the ACL filter and the catalog position this request read: each
        catches up to it and builds its own masks, so nothing here is trusted to them.
        """
        n_dense, n_lexical = fusion.depth("dense", req.top_k), fusion.depth("lexical", req.top_k)
        vec: np.ndarray | None = None
        if req.mode in ("hybrid", "dense"):
            t = time.perf_counter()
            try:
                vec = self.embedders.get(model).submit(req.query).result(timeout=self.searcher.timeout)
                slog.time("embed", t)
            except Exception as exc:  # the lexical list can still answer
                slog.degrade("dense", f"{type(exc).__name__}")
        text = req.query if req.mode in ("hybrid", "lexical") else None
        t = time.perf_counter()
        k = max(n_dense, n_lexical)
        got = shards.lists(acl=acl, position=position, vector=vec, text=text, k=k, language=req.language)
        slog.time("shards", t)
        slog.degraded.extend(got.degraded)
        lists: list[list[Hit]] = []
        weights: list[float] = []
        if vec is not None:
            lists.append(got.dense[:n_dense])
            weights.append(fusion.dense_weight)
        if text is not None:
            lists.append(got.lexical[:n_lexical])
            weights.append(fusion.lexical_weight)
        return lists, weights

    def _candidates(
        self, req: RetrieveRequest, fusion: FusionConfig, snap: ServingIndex, masks: Masks, slog: StageLog
    ) -> tuple[list[list[Hit]], list[float]]:
        """Dense and/or lexical candidate lists, with their fusion weights.

        The query goes to the embedder first and the lexical search runs while the model
        works, so in hybrid mode ``embed`` (submit to vector) overlaps ``lexical``.
        """
        lists: list[list[Hit]] = []
        weights: list[float] = []
        pending: Future[np.ndarray] | None = None
        t_embed = time.perf_counter()
        if req.mode in ("hybrid", "dense"):
            pending = self.embedders.get(snap.model).submit(req.query)  # the version's own model
        lexical: list[Hit] | None = None
        if req.mode in ("hybrid", "lexical"):
            t = time.perf_counter()
            depth = fusion.depth("lexical", req.top_k)
            lexical = self.searcher.lexical(snap, masks, req.query, depth, slog, language=req.language)
            slog.time("lexical", t)
        if pending is not None:
            try:
                vec = pending.result(timeout=max(0.0, t_embed + self.searcher.timeout - time.perf_counter()))
                slog.time("embed", t_embed)
                t = time.perf_counter()
                lists.append(self.searcher.dense(snap, masks, vec, fusion.depth("dense", req.top_k), slog))
                weights.append(fusion.dense_weight)
                slog.time("dense", t)
            except Exception as exc:  # the lexical list can still answer
                slog.degrade("dense", f"{type(exc).__name__}")
        if lexical is not None:
            lists.append(lexical)
            weights.append(fusion.lexical_weight)
        return lists, weights

    def _fuse(
        self, lists: list[list[Hit]], weights: list[float], fusion: FusionConfig, slog: StageLog
    ) -> list[FusedHit]:
        t = time.perf_counter()
        fused = fuse_lists(lists, weights, fusion)
        slog.time("fusion", t)
        return fused

    def _first_stages(
        self, req: RetrieveRequest, acl: AclFilter, catalog_position: int | None, slog: StageLog
    ) -> tuple[ServingIndex, FusionConfig, tuple[list[list[Hit]], list[float]] | None]:
        """Freshness, the ACL masks and each leg's candidates (with their fusion weights), or
        None when the principal may read nothing: what :meth:`retrieve` fuses, and what
        :meth:`candidate_legs` hands ``ragline tune`` (one code path, so tuning scores exactly
        the candidates a request gets)."""
        t = time.perf_counter()
        position = self._ensure_fresh(catalog_position)
        snap = self.state.current
        masks = build_masks(self.state, snap, acl)
        # Fanning out, this process holds no shard: the servers build the masks that count.
        readable = masks.allowed if self.shards is None else masks.documents
        slog.time("acl_filter", t)
        fusion = self._fusion_at(acl.tenant_id, req.fusion)
        if req.mode == "hybrid" and fusion.dense_weight == 0 and fusion.lexical_weight == 0:
            raise InvalidInputError("fusion: both leg weights are 0 (tenant default and request together)")
        if not readable:
            return snap, fusion, None
        found = (
            self._candidates(req, fusion, snap, masks, slog)
            if self.shards is None
            else self._remote_candidates(self.shards, req, fusion, acl, position, snap.model, slog)
        )
        return snap, fusion, found

    def candidate_legs(self, req: RetrieveRequest, acl: AclFilter) -> CandidateLegs:
        """Each leg's candidates for ``req`` as ``acl`` allows, before fusion, at the depths of
        the fusion ``req`` resolves to (settings, tenant, request): the first stages of
        :meth:`retrieve`, for ``ragline tune``, which re-fuses them offline with
        :func:`fuse_lists` for every setting it tries instead of searching once per setting."""
        slog = StageLog()
        snap, _, found = self._first_stages(req, acl, None, slog)
        lists = found[0] if found is not None else []
        legs = {hits[0].source: hits for hits in lists if hits}
        return CandidateLegs(legs.get("dense", []), legs.get("lexical", []), snap.version_id, slog.degraded)

    def _details(
        self, fused: list[FusedHit], want: int, acl: AclFilter, slog: StageLog
    ) -> list[tuple[FusedHit, ChunkDetail]]:
        """The best ``want`` fused hits with their details; SQL re-checks visibility and ACL."""
        t = time.perf_counter()
        head = fused[: want * 2]
        with self.read_pool.connection() as conn:
            details = chunk_details(
                conn,
                rows=[f.chunk_id for f in head],
                tenant_id=acl.tenant_id,
                readers=sorted(acl.readers),
            )
        ranked = [(f, details[f.chunk_id]) for f in head if f.chunk_id in details][:want]
        slog.time("fetch", t)
        return ranked

    def _rerank(
        self,
        reranker: Scorer,
        query: str,
        ranked: list[tuple[FusedHit, ChunkDetail]],
        fusion: FusionConfig,
        slog: StageLog,
    ) -> tuple[list[tuple[FusedHit, ChunkDetail]], Outcome]:
        """The hits reordered by the reranker (blended as ``RerankConfig.blend`` says) and
        "reranked"; the fused order and "timeout" (over budget) or "error" otherwise."""
        t = time.perf_counter()
        try:
            scores = reranker.score(
                query, [d.text for _, d in ranked], timeout_s=self.rerank_config.budget_ms / 1000.0
            )
        except Exception as exc:  # over budget or broken: keep the fused order
            slog.degrade("rerank", f"{type(exc).__name__}: kept the fused order")
            slog.time("rerank", t)
            return ranked, "timeout" if isinstance(exc, RerankTimeout) else "error"
        hits = [f for f, _ in ranked]
        if self.rerank_config.blend == "rrf":
            order = rerank_fusion(hits, scores, k=fusion.rrf_k)
        else:
            order = _by_rerank_score(hits, scores)
        details = {f.chunk_id: d for f, d in ranked}
        out = [(hit, details[hit.chunk_id]) for hit in order]
        slog.time("rerank", t)
        return out, "reranked"

    def _pack(self, items: list[ResultItem], req: RetrieveRequest) -> PackedContext:
        if req.max_context_tokens <= 0:  # callers that only rank (the evaluation harness)
            return PackedContext("", 0, (), False, ())
        pack_items = [
            PackItem(
                result_index=i,
                document_key=str(it.detail.doc_id),
                text=it.detail.text,
                char_start=it.detail.char_start,
                char_end=it.detail.char_start + len(it.detail.text),
                parent_text=it.detail.parent_text if _parent_ok(it.detail) else None,
                parent_char_start=it.detail.parent_char_start if _parent_ok(it.detail) else None,
                parent_char_end=(it.detail.parent_char_start or 0) + len(it.detail.parent_text or "")
                if _parent_ok(it.detail)
                else None,
            )
            for i, it in enumerate(items)
            if it.detail.text
        ]
        return pack_context(
            pack_items,
            count_tokens=self.counter.count,
            budget=req.max_context_tokens,
            expand_parent=req.expand_parent,
            # Exact for tokenizers that never merge across whitespace (checked at load); any
            # other tokenizer re-counts the joined text at every step.
            additive=self.counter.additive,
            count_many=self.counter.count_many,
        )


@dataclass(frozen=True, slots=True)
class CandidateLegs:
    """One query's candidate lists, best first (``SearchService.candidate_legs``)."""

    dense: list[Hit]
    lexical: list[Hit]
    index_version: str
    degraded: list[dict[str, str]]


def fuse_lists(
    lists: Sequence[Sequence[Hit]], weights: Sequence[float], fusion: FusionConfig
) -> list[FusedHit]:
    """The candidate lists (with their weights) fused as ``fusion`` says: the one fusion step
    of ``/v1/retrieve``, shared with ``ragline tune`` so a setting it scores offline ranks
    exactly as a request with that setting does. One list (a single-leg mode, or a leg that
    failed) keeps its own order and scores."""
    if len(lists) == 1:
        return single_list(lists[0])
    if fusion.method == "convex":
        return convex(lists, weights=weights)
    return rrf(lists, k=fusion.rrf_k, weights=weights)


def _stage_ranks(
    ranked: list[tuple[FusedHit, ChunkDetail]], top_k: int, fused_rank: dict[int, int] | None
) -> list[dict[str, int]]:
    """The first ``top_k`` hits' ranks: per candidate list, in the fused order and, after a
    rerank (``fused_rank`` holds the order before it), by rerank score."""
    if fused_rank is None:  # no rerank: the fused rank is the position
        return [{**f.stage_ranks, "fused": i} for i, (f, _) in enumerate(ranked[:top_k], start=1)]
    by_rerank = sorted(
        (i for i, (f, _) in enumerate(ranked) if "rerank" in f.stage_scores),
        key=lambda i: -ranked[i][0].stage_scores["rerank"],
    )
    rerank_rank = {ranked[i][0].chunk_id: r for r, i in enumerate(by_rerank, start=1)}
    out = []
    for f, _ in ranked[:top_k]:
        ranks = {**f.stage_ranks, "fused": fused_rank[f.chunk_id]}
        if f.chunk_id in rerank_rank:
            ranks["rerank"] = rerank_rank[f.chunk_id]
        out.append(ranks)
    return out


def _by_rerank_score(hits: list[FusedHit], scores: Sequence[float]) -> list[FusedHit]:
    """``blend="replace"``: the reranker's score is the score; ties keep the fused order."""
    out = [
        FusedHit(h.chunk_id, float(s), {**h.stage_scores, "rerank": float(s)}, h.stage_ranks)
        for h, s in zip(hits, scores, strict=True)
    ]
    out.sort(key=lambda h: -h.score)
    return out


def _model_name(model: str | None) -> str | None:
    """How an answer names a reranker: its folder's name (or hub id), never the server's path."""
    if model is None:
        return None
    return model.rstrip("/").rsplit("/", 1)[-1] if model.startswith(("/", ".", "~")) else model


def _parent_ok(d: ChunkDetail) -> bool:
    """Parent expansion needs a parent span that contains the chunk."""
    if d.parent_text is None or d.parent_char_start is None:
        return False
    end = d.parent_char_start + len(d.parent_text)
    return d.parent_char_start <= d.char_start and d.char_start + len(d.text) <= end
