"""Per-tenant circuit breakers over rerank timeouts: a tenant whose reranker keeps running
out of its budget stops paying that budget on every answer (issue 44).

The pattern is Nygard's (*Release It!*, 2nd ed., "Circuit Breaker"): after ``threshold``
consecutive rerank timeouts of one tenant its breaker **opens** and that tenant's answers skip
the reranker at once (degraded: suspended) for ``cooldown_s``; then it is **half-open**: one
request is the trial while the others still skip; the trial reranked in budget closes the
breaker, a trial timing out opens it for another cool-down. A rerank that fails for another
reason (a model that did not load, an error) is not a timeout: it neither counts nor
closes, and it frees a half-open trial for the next request.

Why not ``pybreaker``: its ``CircuitBreaker.call`` holds one lock for the whole call, so
concurrent requests of one tenant would queue behind each other's rerank instead of being
gathered into one micro-batch (``rerank.batching``), and it has no "one trial while the others
skip" half-open state. What is needed here is the state alone, decided in O(1) under a lock
and never held across the model call, so it is this small machine.

Only tenants with a recent timeout have an entry: a tenant whose reranks succeed costs a dict
lookup. The state is this process's (each replica learns its own machine's speed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]
Outcome = Literal["reranked", "timeout", "error"]


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """``threshold`` consecutive timeouts open a tenant's breaker (0: never) for ``cooldown_s``."""

    threshold: int
    cooldown_s: float


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether a request reranks; when not, why (the answer's degraded reason)."""

    rerank: bool
    trial: bool = False  # the half-open trial: its outcome decides the breaker
    reason: str = ""


@dataclass(frozen=True, slots=True)
class TenantBreaker:
    """One tenant's breaker as status reports it (``GET /v1/admin/status``)."""

    tenant_id: str
    state: BreakerState
    consecutive_timeouts: int
    opened: int  # times it opened since this process started
    retry_in_s: float | None  # open: seconds until the trial; otherwise None


@dataclass(slots=True)
class _Entry:
    state: BreakerState = "closed"
    timeouts: int = 0
    opened: int = 0
    opened_at: float = 0.0
    trial_at: float | None = None  # half-open: when the trial was let through


class RerankBreakers:
    """The breakers of every tenant of one search service; safe to use from many threads.

    ``on_change`` (wiring's metrics hook) is called with the new state's name on every
    transition, outside the lock.
    """

    def __init__(
        self,
        config: BreakerConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[BreakerState], None] | None = None,
    ) -> None:
        self.config = config
        self._clock = clock
        self._on_change = on_change
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def admit(self, tenant_id: str) -> Admission:
        """Whether ``tenant_id``'s request reranks now; one that does must :meth:`record`."""
        if self.config.threshold <= 0:
            return Admission(True)
        now = self._clock()
        with self._lock:
            entry = self._entries.get(tenant_id)
            if entry is None or entry.state == "closed":
                return Admission(True)
            if entry.state == "open" and now - entry.opened_at >= self.config.cooldown_s:
                entry.state, entry.trial_at = "half_open", now
                changed = True
            elif entry.state == "half_open" and (
                entry.trial_at is None or now - entry.trial_at >= self.config.cooldown_s
            ):
                entry.trial_at = now  # no trial in flight (or one never came back): this is it
                changed = False
            else:
                return Admission(False, reason=self._reason(entry, now))
        if changed:
            self._notify("half_open")
        return Admission(True, trial=True)

    def record(self, tenant_id: str, outcome: Outcome) -> None:
        """The outcome of a rerank :meth:`admit` let through."""
        if self.config.threshold <= 0:
            return
        changed: BreakerState | None = None
        with self._lock:
            entry = self._entries.get(tenant_id)
            if outcome == "reranked":
                if entry is not None:
                    changed = "closed" if entry.state != "closed" else None
                    del self._entries[tenant_id]
                    if entry.opened:  # keep the count of openings for status
                        self._entries[tenant_id] = _Entry(opened=entry.opened)
            elif outcome == "timeout":
                entry = entry if entry is not None else self._entries.setdefault(tenant_id, _Entry())
                entry.timeouts += 1
                if entry.state == "half_open" or (
                    entry.state == "closed" and entry.timeouts >= self.config.threshold
                ):
                    entry.state, entry.opened_at, entry.trial_at = "open", self._clock(), None
                    entry.opened += 1
                    changed = "open"
            elif entry is not None and entry.state == "half_open":
                entry.trial_at = None  # an error decides nothing: the next request is the trial
        if changed is not None:
            self._notify(changed)

    def suspended(self) -> int:
        """Tenants whose reranking is suspended now (open or half-open)."""
        with self._lock:
            return sum(e.state != "closed" for e in self._entries.values())

    def breakers(self, tenant_id: str | None = None) -> list[TenantBreaker]:
        """Every tenant with a timeout or an opening since start (``tenant_id``: that one's)."""
        now = self._clock()
        with self._lock:
            items = sorted(self._entries.items())
            return [
                TenantBreaker(
                    tenant,
                    e.state,
                    e.timeouts,
                    e.opened,
                    round(max(0.0, self.config.cooldown_s - (now - e.opened_at)), 3)
                    if e.state == "open"
                    else None,
                )
                for tenant, e in items
                if tenant_id is None or tenant == tenant_id
            ]

    def _reason(self, entry: _Entry, now: float) -> str:
        if entry.state == "half_open":
            return "rerank suspended: a trial rerank of this tenant is running"
        left = max(0.0, self.config.cooldown_s - (now - entry.opened_at))
        return (
            f"rerank suspended after {entry.timeouts} consecutive rerank timeouts; retrying in {left:.0f} s"
        )

    def _notify(self, state: BreakerState) -> None:
        if self._on_change is not None:
            self._on_change(state)
