"""The one exception the client raises, carrying the server's error code and request id."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
from pydantic import ValidationError

from ragline_client.models import ErrorBody, ValidationIssue


class RaglineError(Exception):
    """A failed call: the server's ``code`` and ``request_id`` (from its error body) and the
    HTTP ``status``; transport failures have ``status=None`` and a code of their own
    (``connection_error``, ``timeout``)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
        details: list[ValidationIssue] | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" + (f" (request {request_id})" if request_id else ""))
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id
        self.details = details or []
        self.retryable = retryable
        self.retry_after = retry_after


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: either delta-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def from_response(response: httpx.Response, *, retry_statuses: frozenset[int]) -> RaglineError:
    """The error an unsuccessful answer means; bodies that are not ragline's shape (a proxy's
    HTML page) still give the status and the ``X-Request-ID`` header."""
    header_id = response.headers.get("x-request-id")
    try:
        body = ErrorBody.model_validate_json(response.content)
    except ValidationError:
        code, message, request_id, details = (
            f"http_{response.status_code}",
            response.text[:500],
            header_id,
            None,
        )
    else:
        err = body.error
        code, message, request_id, details = err.code, err.message, err.request_id, err.details
    return RaglineError(
        code,
        message or response.reason_phrase,
        status=response.status_code,
        request_id=request_id,
        details=details,
        retryable=response.status_code in retry_statuses,
        retry_after=retry_after_seconds(response.headers.get("retry-after")),
    )


# Failures where the request certainly did not reach the application, or where sending it
# again is safe because every write of this API is idempotent (content hash, replace ACL).
_RETRYABLE_TRANSPORT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.RemoteProtocolError,
)


def from_transport(exc: httpx.TransportError, request_id: str) -> RaglineError:
    """A transport failure: a read timeout is not retried (the server may still be working);
    a refused or dropped connection is."""
    code = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection_error"
    return RaglineError(
        code,
        f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
        request_id=request_id,
        retryable=isinstance(exc, _RETRYABLE_TRANSPORT),
    )
