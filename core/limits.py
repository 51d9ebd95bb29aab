"""The request limits the API enforces, as typed values.

``wiring.api`` builds them from ``Settings`` (where their defaults live); the API's request
models (``api.schemas.retrieve_in_model``), key limiter (``api.limits``) and admission gate
(``api.admission``) take them. They sit here, below ``wiring``, so that the composition root
can build them without importing the API it is composed into.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RetrieveLimits:
    """The request limits and defaults of ``/v1/retrieve`` (and the console's search)."""

    max_top_k: int
    default_top_k: int
    max_query_chars: int
    default_context_tokens: int
    max_context_tokens: int


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """Per API key, per replica: a sustained rate, a burst above it, requests in flight."""

    rate_per_s: float
    burst: int
    concurrency: int


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    """The shared admission gate of the expensive routes, and every request's deadline."""

    max_inflight: int  # 0: no admission control
    max_queued: int
    queue_timeout_s: float
    request_timeout_s: float
    tenant_weights: Mapping[str, float] = field(default_factory=dict)  # absent tenants weigh 1
