"""Per-key limits: the rate with its burst, the concurrency cap, and what a refusal says."""

from __future__ import annotations

import pytest

from api.limits import KeyLimiter, KeyLimits
from core.errors import RateLimitedError


def test_burst_then_refused_with_retry_after_and_other_keys_unaffected() -> None:
    limiter = KeyLimiter(KeyLimits(rate_per_s=2.0, burst=4, concurrency=10))
    for _ in range(4):
        with limiter.admit("k1"):
            pass
    with pytest.raises(RateLimitedError) as refused:
        with limiter.admit("k1"):
            pass
    assert refused.value.limit == "rate" and refused.value.http_status == 429
    assert 1 <= refused.value.retry_after_s <= 2  # 4 per 2 s window: the oldest frees within 2 s
    with limiter.admit("k2"):
        pass


def test_concurrency_cap_is_released_when_a_request_ends() -> None:
    limiter = KeyLimiter(KeyLimits(rate_per_s=1000.0, burst=1000, concurrency=2))
    with limiter.admit("k"), limiter.admit("k"):
        with pytest.raises(RateLimitedError) as refused:
            with limiter.admit("k"):
                pass
        assert refused.value.limit == "concurrency"
    with limiter.admit("k"), limiter.admit("k"):  # both slots free again
        pass
    with pytest.raises(ValueError):
        with limiter.admit("k"):
            raise ValueError("the request failed")
    with limiter.admit("k"), limiter.admit("k"):  # a failed request released its slot too
        pass
