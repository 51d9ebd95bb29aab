"""Domain exceptions become HTTP responses here, once, in one JSON shape.

``ErrorBody`` (shared with the client, in ``ragline_client.models``) is that shape as a model,
and ``error_responses`` documents it on a route's error statuses, so ``/openapi.json`` shows
the same body the handlers send.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from catalog.db import DeadlinePassed
from core import metrics, tracing, validation
from core.context import request_id_var
from core.errors import BatchRejectedError, RaglineError, RateLimitedError
from ragline_client.models import ErrorBody, ErrorDetail, RejectionOut, ValidationIssue

__all__ = [
    "ErrorBody",
    "ErrorDetail",
    "RejectionOut",
    "ValidationIssue",
    "error_responses",
    "install_error_handlers",
]

log = logging.getLogger(__name__)


# What each status means on this API and the ``code`` it carries (see core/errors.py).
_ERRORS: dict[int, tuple[str, str, str]] = {
    400: (
        "The request body could not be parsed (not JSON, bad encoding, broken multipart).",
        "bad_request",
        "the body is not valid JSON: Expecting value at character 0",
    ),
    401: ("Missing, unknown or revoked API key.", "unauthenticated", "the API key is revoked"),
    403: ("The key lacks the role this route needs.", "forbidden", "this key lacks the 'admin' role"),
    404: ("The addressed resource does not exist for this tenant.", "not_found", "no document 'doc-1'"),
    409: (
        "The request conflicts with the current state (one model migration at a time, a budget).",
        "conflict",
        "a model migration is already running (job 0b7e3c1a-5f7d-4d8e-9a63-2f4b8c1d9e70)",
    ),
    413: (
        "The request body exceeds the configured limit.",
        "payload_too_large",
        "request body exceeds 8388608 bytes",
    ),
    405: (
        "The path exists but not for this method; the Allow header lists the methods it takes.",
        "method_not_allowed",
        "Method Not Allowed",
    ),
    422: (
        "The request failed validation: `invalid_request` with `details` naming each field at fault"
        ' (unknown fields, lax types such as `"yes"` for a boolean, NUL or a lone UTF-16 surrogate'
        " in text, NaN or Infinity); `all_documents_rejected` with `rejections` when every document of"
        " a push was rejected (one bad document is a rejection in a 202); `unsupported_type` for an"
        " upload the server cannot parse; `invalid_input` for a value the route itself refuses.",
        "invalid_request",
        "request validation failed",
    ),
    429: (
        "The key is over its request rate or concurrency limit; retry after `Retry-After` seconds.",
        "rate_limited",
        "this key is over its rate limit (5 requests/s, burst 10)",
    ),
    500: (
        "An unexpected error; the request id finds it in the server log.",
        "internal_error",
        "internal error",
    ),
    503: (
        "A service the request needs (the database, the search service) is not available, the"
        " server is at capacity (`overloaded`) or the request ran past its deadline"
        " (`deadline_exceeded`); retry after the Retry-After header's seconds.",
        "unavailable",
        "the search service is not running",
    ),
}


# A client told 503 may retry after this many seconds (a dependency is briefly unavailable).
RETRY_AFTER_SECONDS = "1"

# Statuses any operation can answer: documented once, on the app.
APP_ERRORS = (400, 405, 500, 503)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries for ``statuses``, each with ``ErrorBody`` and an example."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        description, code, message = _ERRORS[status]
        example = {
            "error": {"code": code, "message": message, "request_id": "4f1c2b9e0a7d4c3e8b6a5d2f1e0c9b8a"}
        }
        out[status] = {
            "model": ErrorBody,
            "description": description,
            "content": {"application/json": {"example": example}},
        }
    return out


def _response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None, **extra: object
) -> JSONResponse:
    metrics.ERRORS.labels(code).inc()
    body: dict[str, object] = {"code": code, "message": message, "request_id": request_id_var.get()}
    trace_id = tracing.current_trace_id()
    if trace_id is not None:  # tracing on: the trace to look up next to the request id
        body["trace_id"] = trace_id
    body.update(extra)
    body = _encodable(body)  # whatever a message quotes, the answer can be written
    out = dict(headers or {})
    if status == 401:
        out["WWW-Authenticate"] = "Bearer"
    if status == 503:
        out.setdefault("Retry-After", RETRY_AFTER_SECONDS)
    return JSONResponse({"error": body}, status_code=status, headers=out or None)


def _encodable(value: Any) -> Any:
    """``value`` with every string made writable as UTF-8 (a lone surrogate the client sent,
    quoted in a message or a ``loc``, would make the JSON encoder fail: a 500)."""
    if isinstance(value, str):
        return validation.echo(value)
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encodable(v) for v in value]
    return value


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the routes of ``app`` answer at ``path``: of every route whose path
    matches, not only the first. (Starlette's 405 names the first match's methods, so
    ``/v1/admin/keys`` said ``Allow: GET`` though it takes POST, and ``.../acl`` said DELETE.)"""
    methods: set[str] = set()
    for route in iter_route_contexts(app.routes):
        regex = getattr(route, "path_regex", None)
        if regex is not None and route.methods and regex.match(path):
            methods |= set(route.methods)
    return sorted(methods)


def _json_error_message(errors: list[dict[str, Any]]) -> str | None:
    """The parser's complaint when the body is not JSON at all, else ``None``."""
    for error in errors:
        if error.get("type") == "json_invalid":
            loc = error.get("loc", ())
            where = f" at character {loc[-1]}" if len(loc) > 1 and isinstance(loc[-1], int) else ""
            reason = (error.get("ctx") or {}).get("error", "JSON decode error")
            return f"the body is not valid JSON: {reason}{where}"
    return None


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RaglineError)
    async def _domain(_: Request, exc: RaglineError) -> JSONResponse:
        if exc.http_status >= 500:
            log.error("request failed: %s (%s)", exc.code, exc.message)
        if isinstance(exc, RateLimitedError):
            return _response(429, exc.code, exc.message, {"Retry-After": str(exc.retry_after_s)})
        if isinstance(exc, BatchRejectedError):
            return _response(exc.http_status, exc.code, exc.message, rejections=exc.rejections)
        return _response(exc.http_status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        unparsable = _json_error_message(errors)
        if unparsable is not None:  # not JSON at all: the body does not parse (400, as documented)
            return _response(400, "bad_request", unparsable)
        details = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in errors
        ]
        return _response(422, "invalid_request", "request validation failed", details=details)

    @app.exception_handler(DeadlinePassed)
    async def _deadline(_: Request, exc: DeadlinePassed) -> JSONResponse:
        # No connection was free before the request's deadline: the pool is busy, the
        # database is not down (the middleware answers the same when it gets there first).
        log.warning("no connection before the request's deadline: %s", exc)
        return _response(503, "deadline_exceeded", "the request ran past its deadline, retry shortly")

    @app.exception_handler(psycopg.OperationalError)
    @app.exception_handler(PoolTimeout)
    async def _database(_: Request, exc: Exception) -> JSONResponse:
        # PostgreSQL down, restarting (AdminShutdown) or every connection busy: a 503 the
        # client may retry, never a 500; the pool reconnects by itself when it returns.
        log.warning("database unavailable: %s", type(exc).__name__)
        return _response(503, "database_unavailable", "the database is unavailable, retry shortly")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
        code = codes.get(exc.status_code, "http_error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # OPTIONS included: Allow from every route at this path
            headers["Allow"] = ", ".join(allowed_methods(request.app, request.scope["path"]))
        return _response(exc.status_code, code, str(exc.detail), headers=headers)

    # Unexpected exceptions become a 500 in RequestContextMiddleware, inside the request
    # id's scope, so that answer carries the id too (Starlette's ServerErrorMiddleware sits
    # outside every user middleware and would answer without it).
