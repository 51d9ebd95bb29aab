"""Retry policy: exponential backoff with jitter on 429/503 and refused or dropped
connections, waiting at least what the server's ``Retry-After`` asks. Built on tenacity; the
sync and async clients take the same keyword arguments from ``tenacity_kwargs``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenacity import RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential_jitter
from tenacity.wait import wait_base

from ragline_client.errors import RaglineError


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` counts the first try; ``attempts=1`` turns retries off."""

    attempts: int = 5
    initial_wait: float = 0.2
    max_wait: float = 10.0
    jitter: float = 0.5
    # A server asking for longer than this is waited on for this long, then retried.
    max_retry_after: float = 60.0
    statuses: frozenset[int] = frozenset({429, 502, 503, 504})

    def tenacity_kwargs(self) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.attempts),
            "wait": _RetryAfterOr(self),
            "retry": retry_if_exception(_is_retryable),
            "reraise": True,
        }


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, RaglineError) and exc.retryable


class _RetryAfterOr(wait_base):
    """The server's ``Retry-After`` when it sent one, else exponential backoff with jitter."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._backoff = wait_exponential_jitter(
            initial=policy.initial_wait, max=policy.max_wait, jitter=policy.jitter
        )

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, RaglineError) and exc.retry_after is not None:
            return min(exc.retry_after, self._policy.max_retry_after)
        return float(self._backoff(retry_state))
