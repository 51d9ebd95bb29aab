"""The per-tenant rerank circuit breaker (``retrieve.rerank_breaker``) on a clock the test
moves: consecutive timeouts open it, an open one skips at once with its reason, the cool-down
lets exactly one trial through, and the trial's outcome closes or re-opens it (issue 44)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from core.metrics import degraded_reason
from retrieve.rerank_breaker import BreakerConfig, BreakerState, RerankBreakers


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _breakers(threshold: int = 3, cooldown_s: float = 30.0) -> tuple[RerankBreakers, Clock, list[str]]:
    clock, changes = Clock(), list[str]()
    breakers = RerankBreakers(BreakerConfig(threshold, cooldown_s), clock=clock, on_change=changes.append)
    return breakers, clock, changes


def _time_out(breakers: RerankBreakers, tenant: str, n: int) -> None:
    for _ in range(n):
        assert breakers.admit(tenant).rerank
        breakers.record(tenant, "timeout")


def _state(breakers: RerankBreakers, tenant: str) -> BreakerState | None:
    found = breakers.breakers(tenant)
    return found[0].state if found else None


def test_consecutive_timeouts_open_the_tenants_breaker_and_it_skips_at_once() -> None:
    breakers, clock, changes = _breakers()
    _time_out(breakers, "acme", 2)
    assert _state(breakers, "acme") == "closed" and changes == []
    _time_out(breakers, "acme", 1)
    assert changes == ["open"] and breakers.suspended() == 1
    clock.now += 10
    skipped = breakers.admit("acme")
    assert not skipped.rerank and not skipped.trial
    assert skipped.reason == "rerank suspended after 3 consecutive rerank timeouts; retrying in 20 s"
    assert degraded_reason(skipped.reason) == "suspended"  # its own metric label, not "timeout"
    (status,) = breakers.breakers()
    assert (status.tenant_id, status.state, status.consecutive_timeouts, status.opened) == (
        "acme",
        "open",
        3,
        1,
    )
    assert status.retry_in_s == pytest.approx(20.0)
    # Other tenants rerank as before: the breaker is the tenant's.
    assert breakers.admit("other").rerank and breakers.breakers("other") == []


def test_a_rerank_in_budget_resets_the_count_and_errors_do_not_count() -> None:
    breakers, _, changes = _breakers()
    _time_out(breakers, "acme", 2)
    breakers.record("acme", "reranked")
    _time_out(breakers, "acme", 2)
    for _ in range(5):  # a model error costs no budget: not a timeout
        breakers.record("acme", "error")
    assert _state(breakers, "acme") == "closed" and changes == []
    assert breakers.breakers("acme")[0].consecutive_timeouts == 2


def test_after_the_cool_down_one_trial_closes_it_when_in_budget() -> None:
    breakers, clock, changes = _breakers()
    _time_out(breakers, "acme", 3)
    clock.now += 30
    trial = breakers.admit("acme")
    assert trial.rerank and trial.trial and changes == ["open", "half_open"]
    others = [breakers.admit("acme") for _ in range(3)]  # while the trial runs, the rest skip
    assert not any(a.rerank for a in others)
    assert others[0].reason == "rerank suspended: a trial rerank of this tenant is running"
    breakers.record("acme", "reranked")
    assert changes == ["open", "half_open", "closed"] and breakers.suspended() == 0
    assert breakers.admit("acme").rerank and not breakers.admit("acme").trial
    (status,) = breakers.breakers()
    assert (status.state, status.consecutive_timeouts, status.opened, status.retry_in_s) == (
        "closed",
        0,
        1,
        None,
    )


def test_a_trial_that_times_out_opens_it_for_another_cool_down() -> None:
    breakers, clock, changes = _breakers()
    _time_out(breakers, "acme", 3)
    clock.now += 31
    assert breakers.admit("acme").trial
    breakers.record("acme", "timeout")
    assert changes == ["open", "half_open", "open"]
    clock.now += 29
    assert not breakers.admit("acme").rerank
    assert breakers.breakers("acme")[0].opened == 2
    clock.now += 1
    assert breakers.admit("acme").trial


def test_a_trial_that_errs_or_never_returns_frees_the_next_trial() -> None:
    breakers, clock, _ = _breakers()
    _time_out(breakers, "acme", 3)
    clock.now += 30
    assert breakers.admit("acme").trial
    breakers.record("acme", "error")  # decided nothing: the next request is the trial
    assert breakers.admit("acme").trial
    assert not breakers.admit("acme").rerank
    clock.now += 30  # that trial never recorded (its request died): another may try
    assert breakers.admit("acme").trial


def test_threshold_zero_never_suspends() -> None:
    breakers, _, changes = _breakers(threshold=0)
    _time_out(breakers, "acme", 50)
    assert breakers.admit("acme").rerank and changes == [] and breakers.breakers() == []


def test_concurrent_admissions_after_the_cool_down_let_exactly_one_trial_through() -> None:
    breakers, clock, _ = _breakers(threshold=1)
    _time_out(breakers, "acme", 1)
    clock.now += 30
    with ThreadPoolExecutor(8) as pool:
        admitted = list(pool.map(lambda _: breakers.admit("acme").rerank, range(64)))
    assert admitted.count(True) == 1
