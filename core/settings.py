"""Process-wide configuration: one validated ``Settings`` object, env prefix ``RAGLINE_``.

Nested models group the settings of each package; nested values are set with a double
underscore, e.g. ``RAGLINE_INGEST__CHUNK_TOKENS=200``. Library constructors never take the
whole object: the app factory and the CLI pick the fields each collaborator needs.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_EMBEDDING_MODEL = "bundled:all-MiniLM-L6-v2"
# The smallest context budget a request may ask for: below it not even one short chunk fits.
MIN_CONTEXT_TOKENS = 16


def _default_within_max(
    model: BaseModel, default_name: str, default: int, max_name: str, maximum: int, section: str
) -> int:
    """A request default may not exceed its maximum: an explicit conflict is a configuration
    error; a default left unset follows a lowered maximum down."""
    if default <= maximum:
        return default
    if default_name in model.model_fields_set:
        raise ValueError(f"{section}.{default_name} ({default}) exceeds {section}.{max_name} ({maximum})")
    return maximum


class Section(BaseModel):
    """A nested settings group: an unknown field (a typo in an env name) is an error, not ignored."""

    model_config = ConfigDict(extra="forbid")


class ApiSettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    workers: int = Field(1, ge=1, le=64)
    # uvicorn's event loop and HTTP/1.1 parser. "auto" takes uvloop and httptools where they
    # are installed (uvicorn[standard]; not a dependency: no gain measured at 100k chunks,
    # bench/retrieve.py --stacks) and asyncio and h11 otherwise.
    loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    http: Literal["auto", "h11", "httptools"] = "auto"
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_upload_bytes: int = Field(256 * 1024 * 1024, ge=1024)
    max_batch_documents: int = Field(256, ge=1, le=10_000)
    max_top_k: int = Field(100, ge=1, le=1000)
    # A request's top_k when it gives none; lowered to max_top_k when only the maximum is set.
    default_top_k: int = Field(8, ge=1, le=1000)
    max_query_chars: int = Field(2000, ge=16)
    # How long a process reuses a key's lookup. Revocations drop a key at once (authz.revocations);
    # this bounds a revoked key's life only while a process cannot hear them.
    key_cache_seconds: float = Field(1.0, ge=0.0, le=1.0)
    # Admission control of the expensive routes (retrieve, push, console search): at most
    # max_inflight at once, max_queued waiting up to queue_timeout_ms, the rest shed with 503
    # ``overloaded``; max_inflight 0 turns it off. Sized for 2 cores (bench/overload.py).
    max_inflight: int = Field(4, ge=0, le=10_000)
    max_queued: int = Field(16, ge=0, le=100_000)
    queue_timeout_ms: int = Field(500, ge=1)
    # Every request answers by this deadline (pool waits and statements are bounded by it);
    # one still running then gets 503 ``deadline_exceeded``. Health, metrics, uploads exempt.
    request_timeout_ms: int = Field(10_000, ge=100)
    # After start-up, collect once and freeze the surviving heap (models, tokenizer, index) out
    # of the garbage collector's scans (core/heap.py: 300-500 ms pauses otherwise). A process
    # that builds many apps one after another (the test suite) turns it off: each freeze pays a
    # full collection of that process's whole heap.
    freeze_heap: bool = True

    @model_validator(mode="after")
    def _default_top_k_within_max(self) -> ApiSettings:
        self.default_top_k = _default_within_max(
            self, "default_top_k", self.default_top_k, "max_top_k", self.max_top_k, "api"
        )
        return self


class IngestSettings(Section):
    # A staged upload no queued or running job needs is deleted by the maintenance tick
    # once this old (an upload being staged has no job yet).
    upload_gc_grace_seconds: int = Field(3600, ge=0)
    # Per-document limits: more leaf chunks, or a parse or a chunking longer than the timeout
    # (each), fails that document (too_many_chunks, parse_timeout) instead of holding its job.
    max_chunks_per_document: int = Field(4096, ge=1)
    parse_timeout_seconds: float = Field(120.0, gt=0)
    # Parsing runs in worker processes (ingest/parse_pool.py) under rlimits: a worker may
    # allocate parse_memory_mb above its idle size (past it: parse_memory_limit), and one
    # stuck past the parse timeout is killed (parse_timeout); a crash is parse_crashed.
    isolate_parsing: bool = True
    parse_workers: int = Field(1, ge=1, le=64)  # per pool: the runner's, and each Ray prepare actor's
    parse_memory_mb: int = Field(1024, ge=64)
    # OCR (Tesseract) of PDF pages without a text layer and of image documents: auto = only
    # pages with no text, force = every page, off = never (image-only PDFs fail image_only_pdf).
    ocr: Literal["auto", "off", "force"] = "auto"
    ocr_languages: str = Field("eng", pattern=r"^[A-Za-z_]{3,16}(\+[A-Za-z_]{3,16}){0,7}$")
    ocr_page_timeout_seconds: float = Field(60.0, gt=0)
    ocr_dpi: int = Field(300, ge=72, le=600)
    chunk_tokens: int = Field(256, ge=16, le=8192)
    chunk_overlap: int = Field(32, ge=0)
    embed_batch_size: int = Field(32, ge=1, le=4096)
    inline_max_documents: int = Field(8, ge=0)
    # A running job whose heartbeat is older than this belongs to a dead process: another takes it over.
    job_lease_seconds: float = Field(60.0, ge=1.0)
    # Jobs a runner (one per server or CLI process) runs at once, at most one per tenant, so one
    # tenant's huge job does not queue the others behind it.
    concurrent_jobs: int = Field(2, ge=1, le=64)
    workers: int = Field(2, ge=1, le=256)
    # Ray parse/chunk actors; raise it on a cluster so parsing spreads over the nodes.
    prepare_workers: int = Field(1, ge=1, le=256)
    # Back-pressure on pushes (a tenant runs one job at a time): a push of fewer documents
    # joins its principal's queued push job up to this many documents (0: each push is its own
    # job), and past max_queued_documents still to do in its jobs a push is answered 429
    # with Retry-After queue_retry_after_seconds (0: no limit).
    coalesce_max_documents: int = Field(256, ge=0, le=100_000)
    max_queued_documents: int = Field(10_000, ge=0)
    queue_retry_after_seconds: int = Field(5, ge=1, le=3600)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> IngestSettings:
        if self.chunk_overlap >= self.chunk_tokens:
            raise ValueError("ingest.chunk_overlap must be smaller than ingest.chunk_tokens")
        return self


class IndexSettings(Section):
    shards: int = Field(2, ge=1, le=1024)
    shard_by: Literal["document", "tenant"] = "document"
    kind: Literal["auto", "flat", "hnsw", "ivfpq"] = "auto"
    flat_max_vectors: int = Field(20_000, ge=0)
    ivfpq_min_vectors: int = Field(400_000, ge=1)
    hnsw_m: int = Field(32, ge=4, le=256)
    hnsw_ef_construction: int = Field(80, ge=8)
    hnsw_ef_search: int = Field(128, ge=8)
    ivf_nlist: int = Field(0, ge=0)
    ivf_nprobe: int = Field(512, ge=1)
    ivf_refine_factor: int = Field(32, ge=1, le=256)
    pq_m: int = Field(48, ge=1)
    pq_nbits: int = Field(8, ge=4, le=16)
    lexical_stem: bool = True
    lexical_stop_words: bool = True
    # Per-text language detection + that language's Snowball stemmer, CJK bigrams (index/tokenize.py);
    # stored with each lexical shard: changing it needs an index rebuild, like lexical_stem.
    lexical_multilingual: bool = False
    rebuild_tombstone_ratio: float = Field(0.2, gt=0.0, le=1.0)
    rebuild_delta_chunks: int = Field(50_000, ge=1)
    gc_grace_seconds: int = Field(3600, ge=0)
    maintenance_seconds: float = Field(300.0, ge=0.0)
    poll_seconds: float = Field(2.0, gt=0.0)
    # Shard servers (Ray actors on the cluster at ray_address) that search the version for the
    # API; 0 = in-process, the default for one machine.
    shard_servers: int = Field(0, ge=0, le=256)
    # How long the API's swap waits for every shard server to hold the new version (a server
    # restarting after a crash, or loading): past it the swap is refused and retried.
    shard_server_wait_seconds: float = Field(60.0, gt=0.0)


class RetrieveSettings(Section):
    rrf_k: int = Field(60, ge=1)
    dense_weight: float = Field(1.0, ge=0.0)
    lexical_weight: float = Field(1.0, ge=0.0)
    candidates: int = Field(50, ge=1, le=2000)
    # Fusion of the dense and lexical legs: rrf (ranks only) or convex (weighted sum of
    # per-query min-max normalised scores); per-leg depths default to ``candidates``.
    fusion_method: Literal["rrf", "convex"] = "rrf"
    dense_candidates: int | None = Field(None, ge=1, le=2000)
    lexical_candidates: int | None = Field(None, ge=1, le=2000)
    stage_timeout_ms: int = Field(2000, ge=1)
    # Seconds a node may spend, when it loads an index version (start-up, swap), reading the
    # catalog relations the request path reads (pg_prewarm or a plain read); 0 turns it off.
    warm_seconds: float = Field(30.0, ge=0.0)
    # A request's max_context_tokens when it gives none; lowered to max_context_tokens when
    # only the maximum is set.
    default_context_tokens: int = Field(1500, ge=MIN_CONTEXT_TOKENS)
    max_context_tokens: int = Field(16_000, ge=MIN_CONTEXT_TOKENS)
    # Token counts packing keeps, keyed by a digest of the text (index.tokens.CachedTokenCounter:
    # no text, no caller); 0 counts every span of every answer again.
    token_count_cache: int = Field(65_536, ge=0, le=10_000_000)

    @model_validator(mode="after")
    def _default_context_within_max(self) -> RetrieveSettings:
        self.default_context_tokens = _default_within_max(
            self,
            "default_context_tokens",
            self.default_context_tokens,
            "max_context_tokens",
            self.max_context_tokens,
            "retrieve",
        )
        return self


class RerankSettings(Section):
    model: str | None = None
    candidates: int = Field(50, ge=1, le=500)
    budget_ms: int = Field(1500, ge=1)
    max_batch_tokens: int = Field(8192, ge=64)
    max_wait_ms: float = Field(3.0, ge=0.0)
    blend: Literal["rrf", "replace"] = "rrf"
    # auto: ONNX Runtime on CPU when the onnx extra is installed, PyTorch otherwise or on GPU.
    # torch by default: ONNX scores equal but measured no faster for 20-100 candidates at 1 thread.
    backend: Literal["auto", "torch", "onnx"] = "torch"
    # The ONNX session's intra-op threads; PyTorch's count is process-wide, left to the embedder.
    threads: int = Field(1, ge=1, le=256)
    # Tenants' own gated rerankers one node keeps loaded (least recently used dropped first):
    # each is a model in memory (~90 MB for a MiniLM cross-encoder) and its batcher thread.
    tenant_models: int = Field(4, ge=1, le=64)
    # A tenant's reranking is suspended (answers degraded "rerank suspended", unreranked, at
    # once) after this many consecutive rerank timeouts on one node, for breaker_cooldown_s;
    # then one request tries again: in budget resumes, a timeout suspends again. 0: never.
    breaker_timeouts: int = Field(5, ge=0, le=10_000)
    breaker_cooldown_s: float = Field(60.0, gt=0.0, le=86_400.0)


class LimitsSettings(Section):
    """Per API key, per replica (see the README's Limits section). Generous by default."""

    rate_per_key: float = Field(500.0, gt=0.0)  # requests/s, sustained
    burst_per_key: int = Field(1000, ge=1)  # requests admitted at once above the rate
    concurrency_per_key: int = Field(64, ge=1)  # requests of one key in flight at once


class AdmissionSettings(Section):
    """How the admission gate (api.max_inflight, max_queued) shares its seats among tenants."""

    # Deficit-round-robin weight per tenant id (JSON in the environment, e.g.
    # RAGLINE_ADMISSION__TENANT_WEIGHTS='{"acme": 2}'); a tenant not listed weighs 1.
    tenant_weights: dict[str, Annotated[float, Field(gt=0.0, le=1000.0)]] = {}


class AuditSettings(Section):
    retrieves: bool = True  # append every retrieve to the audit log (in batches, off the request path)
    store_query_text: bool = False  # query text can be sensitive: off unless an operator turns it on
    retention_days: float = Field(90.0, gt=0.0)
    batch_size: int = Field(256, ge=1, le=100_000)
    flush_ms: float = Field(200.0, gt=0.0)
    queue_size: int = Field(100_000, ge=1)


class RetentionSettings(Section):
    # How long a deleted or superseded version's bytes (chunk text, vectors, parsed text) and
    # a cancelled or failed job's payloads stay before the maintenance tick purges them: the
    # window for in-flight reads, a rollback of ``live`` and resuming a job.
    purge_after_seconds: int = Field(86400, ge=0)


class MetricsSettings(Section):
    enabled: bool = True
    # Tenant ids as a label value (one series per tenant): off, since tenants are unbounded.
    tenant_labels: bool = False


class TracingSettings(Section):
    # OpenTelemetry traces: on when this is true or the standard OTEL_* variables name an
    # exporter or an OTLP endpoint (OTEL_SDK_DISABLED=true turns them off either way).
    enabled: bool = False
    # OTLP spans are encoded and posted by a child process (core/span_export.py), off the
    # serving interpreter's GIL; false: by the SDK's batch thread in-process.
    export_process: bool = True


class ConsoleSettings(Section):
    """The operator console at ``/console`` (api/routes/console.py)."""

    enabled: bool = True
    # Stored vectors per shard used as queries by "check quality" (recall@10 ANN vs exact).
    quality_sample: int = Field(200, ge=1, le=10_000)


class ReembedSettings(Section):
    """``ragline reembed``: model migrations into a new index version, gated before the swap."""

    batch_chunks: int = Field(256, ge=1, le=100_000)  # chunks per embed call and commit
    actors: int = Field(1, ge=1, le=256)  # embedding actors (one GPU each when there are GPUs)
    # Isolation from serving: "nice" (the default) runs every thread of each actor (or the
    # inline thread) at ``nice``; "idle" under SCHED_IDLE (a core only when nothing else wants
    # it: serving first, but the backfill stalls on a busy node; docs/benchmarks.md);
    # both with ``threads`` intra-op threads (and OMP/MKL threads in the actors), optionally
    # pinned to ``cpus``. Falls back to ``nice`` where SCHED_IDLE is unavailable (not Linux).
    priority: Literal["idle", "nice"] = "nice"
    nice: int = Field(10, ge=0, le=19)
    threads: int = Field(1, ge=1, le=256)
    cpus: list[int] | None = None  # CPU ids the backfill may use (sched_setaffinity); None: all
    # Embed on Ray actors (API, schedules, `jobs resume`); False: in the migration's own
    # process, as `ragline reembed --no-ray` (small deployments without a Ray cluster).
    use_ray: bool = True
    recall_floor: float = Field(0.95, ge=0.0, le=1.0)  # ANN recall@10 vs exact, per version
    recall_sample: int = Field(200, ge=1, le=100_000)  # stored vectors used as queries
    gate_tolerance: float = Field(0.01, ge=0.0, le=1.0)  # allowed nDCG@10 drop vs live
    gate_tenant: str | None = None  # the tenant holding the gate dataset's corpus
    gate_mode: Literal["dense", "hybrid"] = "dense"  # the search mode the gate compares
    # Sample queries answered by both: query-file lines, or (audit.store_query_text, no file) the
    # last distinct audited retrieves, each as its own principal.
    query_sample: int = Field(200, ge=1, le=100_000)
    # Label-free checks on every migration (jobs/reembed_gate.py): titles/headings as queries
    # that must find their own document about as often as live does; chunks of different
    # documents must keep at least health_spread_ratio of live's 1 - cosine; agreement with live.
    structure_probes: int = Field(200, ge=1, le=100_000)
    structure_tolerance: float = Field(0.1, ge=0.0, le=1.0)
    health_pairs: int = Field(500, ge=1, le=100_000)
    health_spread_ratio: float = Field(0.2, ge=0.0, le=1.0)
    agreement_floor: float = Field(0.2, ge=0.0, le=1.0)
    # Budgets the two versions (and two query models) must fit together; None: not checked.
    ram_budget_bytes: int | None = Field(None, ge=0)
    disk_budget_bytes: int | None = Field(None, ge=0)
    # The tenant a CLI-started migration's job is recorded under (the API uses the caller's).
    job_tenant: str = "ops"


# Signature algorithms an issuer may use: asymmetric only. An HMAC algorithm would let anyone
# holding the (public) verification key sign tokens, and ``none`` signs nothing.
OIDC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
OIDC_NAMESPACE = r"^[a-z0-9][a-z0-9-]{0,31}$"


def _query_role() -> list[Literal["ingest", "query", "admin"]]:
    return ["query"]


class OidcIssuer(Section):
    """One identity provider whose JWTs authenticate end users (``RAGLINE_OIDC__ISSUERS``)."""

    issuer: str = Field(min_length=1)  # the exact ``iss`` claim
    jwks_url: str = Field(pattern=r"^https?://")
    audience: str | list[str]  # ``aud`` must contain (one of) these
    tenant: str | None = None  # every token of this issuer belongs to this tenant ...
    tenant_claim: str | None = None  # ... or the tenant is this claim's value
    principal_claim: str = "sub"  # principal ``user:<namespace>:<value>``
    groups_claim: str | None = None  # values ``group:<namespace>:<name>``
    # Names this issuer's principals and groups, apart from API keys' and other issuers'; by
    # default ``iss-`` and 8 hex digits of the issuer's sha256 (stable, never empty).
    namespace: str | None = Field(None, pattern=OIDC_NAMESPACE)
    # Opt in, for the issuer that is the directory of record of these users: subjects become
    # ``user:<value>`` (the principals API keys, groups and ACLs already name) ...
    map_subjects: bool = False
    # ... and group claims ``group:<name>`` (the catalog's and the ACLs' groups).
    map_groups: bool = False
    roles: list[Literal["ingest", "query", "admin"]] = Field(default_factory=_query_role, min_length=1)
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"], min_length=1)

    @model_validator(mode="after")
    def _one_tenant_source(self) -> OidcIssuer:
        if (self.tenant is None) == (self.tenant_claim is None):
            raise ValueError(f"OIDC issuer {self.issuer!r}: give exactly one of tenant, tenant_claim")
        url = urlsplit(self.jwks_url)
        if url.scheme == "http" and url.hostname not in ("127.0.0.1", "localhost", "::1"):
            # Keys fetched in the clear could be swapped on the way: anyone could sign tokens.
            raise ValueError(f"OIDC issuer {self.issuer!r}: jwks_url must be https (http only on loopback)")
        bad = sorted(set(self.algorithms) - set(OIDC_ALGORITHMS))
        if bad:
            raise ValueError(
                f"OIDC issuer {self.issuer!r}: algorithms {bad} not allowed, only {OIDC_ALGORITHMS}"
            )
        if self.namespace is None:
            self.namespace = "iss-" + hashlib.sha256(self.issuer.encode()).hexdigest()[:8]
        return self


class OidcSettings(Section):
    """End-user identity from OIDC/JWT bearer tokens, beside API keys; none configured: off."""

    issuers: list[OidcIssuer] = Field(default_factory=list)
    leeway_s: float = Field(30.0, ge=0.0, le=300.0)  # clock skew allowed on exp/nbf/iat
    jwks_timeout_s: float = Field(3.0, gt=0.0, le=30.0)  # one JWKS fetch, connect to last byte
    jwks_cache_s: float = Field(300.0, ge=0.0, le=86_400.0)  # keys are refetched after this
    # An unknown ``kid`` refetches the JWKS at most this often per issuer (a forged kid
    # cannot turn requests into fetches).
    jwks_min_refresh_s: float = Field(30.0, ge=0.0, le=3600.0)
    # Keys are fetched off the request path (at start, every jwks_cache_s, and for an unknown
    # kid). Start-up waits at most this long for the first keys; the request whose unknown kid
    # started a refetch waits at most this long for it; requests arriving while a fetch is
    # pending are refused at once (503).
    jwks_wait_s: float = Field(0.5, ge=0.0, le=5.0)

    @model_validator(mode="after")
    def _distinct_issuers(self) -> OidcSettings:
        names = [i.issuer for i in self.issuers]
        if len(names) != len(set(names)):
            raise ValueError("RAGLINE_OIDC__ISSUERS lists an issuer twice")
        spaces = [i.namespace for i in self.issuers]
        if len(spaces) != len(set(spaces)):
            raise ValueError("RAGLINE_OIDC__ISSUERS gives two issuers one namespace")
        return self


class Settings(BaseSettings):
    """All of ragline's configuration. See the README's configuration table."""

    # env_ignore_empty: ``RAGLINE_X=`` (an env file's blank line, .env.example) means the default.
    model_config = SettingsConfigDict(
        env_prefix="RAGLINE_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
        env_ignore_empty=True,
    )

    data_dir: Path = Path(".ragline")
    database_url: str | None = None
    pg_bin_dir: Path | None = None
    # The local cluster's port; None: 54329, or the next free port when 54329 is taken.
    pg_port: int | None = Field(None, ge=1024, le=65535)
    db_pool_size: int = Field(8, ge=1, le=256)
    ray_address: str | None = None
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    embedding_device: Literal["auto", "cpu", "cuda"] = "auto"
    embedding_backend: Literal["auto", "torch", "onnx"] = "auto"
    embedding_threads: int | None = Field(1, ge=1, le=256)
    # The query encoder's weights: int8 is a dynamically quantised copy of the ONNX export
    # (CPU, onnx backend), admitted by ``bench.query_precision``'s nDCG check; passages stay fp32.
    embedding_query_precision: Literal["fp32", "int8"] = "fp32"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    api: ApiSettings = ApiSettings()
    ingest: IngestSettings = IngestSettings()
    index: IndexSettings = IndexSettings()
    retrieve: RetrieveSettings = RetrieveSettings()
    rerank: RerankSettings = RerankSettings()
    limits: LimitsSettings = LimitsSettings()
    admission: AdmissionSettings = AdmissionSettings()
    audit: AuditSettings = AuditSettings()
    retention: RetentionSettings = RetentionSettings()
    metrics: MetricsSettings = MetricsSettings()
    tracing: TracingSettings = TracingSettings()
    console: ConsoleSettings = ConsoleSettings()
    reembed: ReembedSettings = ReembedSettings()
    oidc: OidcSettings = OidcSettings()

    @model_validator(mode="after")
    def _int8_needs_onnx(self) -> Settings:
        if self.embedding_query_precision == "int8" and self.embedding_backend == "torch":
            raise ValueError(
                "RAGLINE_EMBEDDING_QUERY_PRECISION=int8 needs RAGLINE_EMBEDDING_BACKEND=onnx or auto"
                " (a quantised copy of the ONNX export), not torch"
            )
        return self

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("RAGLINE_DATABASE_URL must start with postgresql:// or postgres://")
        return value or None

    @property
    def index_dir(self) -> Path:
        return self.data_dir / "indexes"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def metrics_dir(self) -> Path:
        """Where prometheus-client's multiprocess mode keeps its files (``--workers > 1``)."""
        return self.data_dir / "metrics"

    @property
    def upload_dir(self) -> Path:
        return self.data_dir / "uploads"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Build and validate the settings from the environment once per process."""
    return Settings()
