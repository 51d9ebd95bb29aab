"""Per-key request limits: a rate with a burst allowance (the ``limits`` library's moving
window) and a cap on requests in flight.

Limits are per replica: each API process counts in its own memory, so N replicas admit up
to N times the configured rate. A shared store (Redis, which ``limits`` supports) would make
them global at the cost of a network round trip per request; ragline has no Redis, and a
PostgreSQL round trip per request would cost more than the search itself.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from core import metrics
from core.errors import RateLimitedError
from core.limits import KeyLimits


class KeyLimiter:
    """Admits a key's request or raises :class:`RateLimitedError` (429 with Retry-After).

    The rate is enforced as at most ``burst`` requests in any moving window of
    ``burst / rate`` seconds (rounded, at least one second): a key can send ``burst`` at
    once and ``rate`` per second sustained.
    """

    def __init__(self, config: KeyLimits) -> None:
        self.config = config
        window_s = max(1, round(config.burst / config.rate_per_s))
        self._item = RateLimitItemPerSecond(config.burst, window_s)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self._in_flight: dict[str, int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def admit(self, key_id: str) -> Iterator[None]:
        """Hold one of the key's concurrency slots for the ``with`` body."""
        with self._lock:
            busy = self._in_flight.get(key_id, 0)
            if busy >= self.config.concurrency:
                metrics.RATE_LIMITED.labels("concurrency").inc()
                raise RateLimitedError(
                    f"this key already has {busy} requests in flight (limit {self.config.concurrency})",
                    retry_after_s=1,
                    limit="concurrency",
                )
            self._in_flight[key_id] = busy + 1
        try:
            self._check_rate(key_id)
            yield
        finally:
            with self._lock:
                left = self._in_flight[key_id] - 1
                if left:
                    self._in_flight[key_id] = left
                else:
                    del self._in_flight[key_id]

    def _check_rate(self, key_id: str) -> None:
        if self._limiter.hit(self._item, key_id):
            return
        reset = self._limiter.get_window_stats(self._item, key_id).reset_time
        metrics.RATE_LIMITED.labels("rate").inc()
        raise RateLimitedError(
            f"this key is over its rate limit ({self.config.rate_per_s:g} requests/s,"
            f" burst {self.config.burst})",
            retry_after_s=max(1, math.ceil(reset - time.time())),
            limit="rate",
        )
