"""The Prometheus metrics ragline records, defined once (``prometheus-client``).

Histograms, not summaries, in seconds, so replicas aggregate. Label values are bounded:
routes are templates, stages and reasons come from fixed sets, and tenant ids appear only in
``ragline_retrieve_requests_by_tenant_total`` and ``ragline_requests_shed_by_tenant_total``
when an operator turns ``metrics.tenant_labels`` on. Principal ids, keys and document text
never appear.

Recording happens at the edges (the ASGI middleware, the route, the service hooks, the job
runner's completion callback); gauges of serving state are read at scrape time by a collector
(``api.metrics``). With ``PROMETHEUS_MULTIPROC_DIR`` set before this module is first imported,
prometheus-client writes the counters and histograms to per-process files that ``/metrics``
merges (uvicorn ``--workers > 1``).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10)
FRESHNESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

HTTP_LATENCY = Histogram(
    "ragline_http_request_duration_seconds",
    "HTTP request latency by route template, method and status class.",
    ["route", "method", "status_class"],
    buckets=LATENCY_BUCKETS,
)
ERRORS = Counter("ragline_errors_total", "Error responses by error code.", ["code"])
RETRIEVE_STAGE = Histogram(
    "ragline_retrieve_stage_duration_seconds",
    "Retrieve stage latency by stage.",
    ["stage"],
    buckets=LATENCY_BUCKETS,
)
RETRIEVE_DEGRADED = Counter(
    "ragline_retrieve_degraded_total", "Degraded retrieve stages by stage and reason.", ["stage", "reason"]
)
RETRIEVES_BY_TENANT = Counter(
    "ragline_retrieve_requests_by_tenant_total",
    "Retrieves per tenant; only recorded when metrics.tenant_labels is on.",
    ["tenant"],
)
BATCH_SIZE = Histogram(
    "ragline_batch_size", "Items per micro-batch by batcher.", ["batcher"], buckets=BATCH_BUCKETS
)
INGEST_DOCUMENTS = Counter("ragline_ingest_documents_total", "Ingested documents by outcome.", ["outcome"])
INGEST_CHUNKS = Counter("ragline_ingest_chunks_total", "Chunks written by ingestion jobs.")
INGEST_FAILURES = Counter(
    "ragline_ingest_failures_total", "Documents that failed ingestion, by reason.", ["reason"]
)
JOBS_FINISHED = Counter("ragline_jobs_finished_total", "Jobs finished by this process, by state.", ["state"])
PUSH_TO_SEARCHABLE = Histogram(
    "ragline_push_to_searchable_seconds",
    "From a document version's commit to the first response on this node that reflects it.",
    buckets=FRESHNESS_BUCKETS,
)
DELETE_TO_INVISIBLE = Histogram(
    "ragline_delete_to_invisible_seconds",
    "From a delete's commit to the first response on this node that reflects it.",
    buckets=FRESHNESS_BUCKETS,
)
SERVING_WARM = Histogram(
    "ragline_serving_warm_seconds",
    "Time spent warming the catalog when a version loads, by method and outcome.",
    ["method", "outcome"],
    buckets=FRESHNESS_BUCKETS,
)
SHED = Counter(
    "ragline_requests_shed_total",
    "Requests refused by admission control (503 overloaded), by route template and reason.",
    ["route", "reason"],
)
ADMISSION_WAIT = Histogram(
    "ragline_admission_wait_seconds",
    "Time a request waited at the admission gate, by route template and outcome"
    " (admitted, or the shed reason: queue_full, queue_timeout, displaced).",
    ["route", "outcome"],
    buckets=LATENCY_BUCKETS,
)
SHED_BY_TENANT = Counter(
    "ragline_requests_shed_by_tenant_total",
    "Requests shed by admission control per tenant; only recorded when metrics.tenant_labels is on.",
    ["tenant", "reason"],
)
DEADLINE_EXCEEDED = Counter(
    "ragline_request_deadline_exceeded_total",
    "Requests answered 503 deadline_exceeded because they ran past api.request_timeout_ms.",
    ["route"],
)
RATE_LIMITED = Counter("ragline_rate_limited_total", "Requests refused with 429, by limit.", ["limit"])
RERANK_BREAKER_TRANSITIONS = Counter(
    "ragline_rerank_breaker_transitions_total",
    "Tenants' rerank circuit breakers changing state (open: reranking suspended after repeated"
    " timeouts; half_open: one trial; closed: resumed), by the state entered.",
    ["state"],
)
AUDIT_WRITTEN = Counter("ragline_audit_events_written_total", "Retrieve audit events written.")
AUDIT_DROPPED = Counter(
    "ragline_audit_events_dropped_total", "Retrieve audit events dropped (queue full or write failed)."
)

# Degraded reasons are free text for the response; the label is one of these classes.
DEGRADED_REASONS = ("suspended", "timeout", "not_configured", "error")


def degraded_reason(reason: str) -> str:
    """The bounded label for a degraded stage's free-text reason."""
    text = reason.lower()
    if "suspended" in text:  # a tenant's rerank breaker is open: skipped, no budget spent
        return "suspended"
    if "timed out" in text or "timeout" in text:
        return "timeout"
    if "not configured" in text or "no reranker" in text:
        return "not_configured"
    return "error"


def status_class(status: int) -> str:
    return f"{status // 100}xx"
