"""Per-request context shared by logs and responses."""

from __future__ import annotations

from contextvars import ContextVar

request_id_var: ContextVar[str] = ContextVar("request_id", default="-")
# The request's deadline on the ``time.monotonic()`` clock (None outside a request): pool
# waits end by it, so a request never waits for a connection past the moment it must answer.
deadline_var: ContextVar[float | None] = ContextVar("deadline", default=None)
