"""Domain exceptions. The API translates them to HTTP once, in its exception handlers."""

from __future__ import annotations


class RaglineError(Exception):
    """Base of every ragline error. ``code`` is stable and machine-readable."""

    code = "internal_error"
    http_status = 500

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class ConfigError(RaglineError):
    code = "config_error"


class NotFoundError(RaglineError):
    code = "not_found"
    http_status = 404


class ConflictError(RaglineError):
    code = "conflict"
    http_status = 409


class InvalidInputError(RaglineError):
    code = "invalid_input"
    http_status = 422


class UnsupportedTypeError(InvalidInputError):
    """A document's content type is not one the server parses (or cannot be told)."""

    code = "unsupported_type"


class BatchRejectedError(InvalidInputError):
    """Every document of a push was rejected; ``rejections`` says why, one per document."""

    code = "all_documents_rejected"

    def __init__(self, message: str, *, rejections: list[dict[str, object]]) -> None:
        super().__init__(message)
        self.rejections = rejections


class PayloadTooLargeError(RaglineError):
    code = "payload_too_large"
    http_status = 413


class AuthenticationError(RaglineError):
    code = "unauthenticated"
    http_status = 401


class PermissionDeniedError(RaglineError):
    code = "forbidden"
    http_status = 403


class UnavailableError(RaglineError):
    """A dependency the request cannot do without (the ACL filter, the catalog) failed."""

    code = "unavailable"
    http_status = 503


class RerankTimeout(RaglineError):
    """A rerank request did not finish within its time budget (``rerank.batching``); here so
    the request path (``retrieve``) can tell it from other rerank failures."""

    code = "rerank_timeout"
    http_status = 504


class OverloadedError(RaglineError):
    """The admission gate shed the request (its queue is full or the wait ran out); retry shortly."""

    code = "overloaded"
    http_status = 503


class ParseError(RaglineError):
    """A document could not be parsed; ``code`` says why (corrupt_pdf, encrypted_pdf, ...)."""

    code = "parse_error"
    http_status = 422


class IndexIntegrityError(RaglineError):
    """An index file failed verification (checksum, count, truncated file)."""

    code = "index_integrity"


class RateLimitedError(RaglineError):
    """A key is over its request rate or concurrency limit; retry after ``retry_after_s``."""

    code = "rate_limited"
    http_status = 429

    def __init__(self, message: str, *, retry_after_s: int, limit: str) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.limit = limit


class QueueFullError(RateLimitedError):
    """A tenant's ingestion queue is past its configured depth; push again after ``retry_after_s``."""

    code = "ingest_queue_full"

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message, retry_after_s=retry_after_s, limit="ingest_queue")


class CapacityError(ConflictError):
    """The configured RAM or disk budget cannot hold what was asked for (two index versions)."""

    code = "over_capacity"
