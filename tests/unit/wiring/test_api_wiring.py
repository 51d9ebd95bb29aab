"""wiring.api: the API's limits come from the settings, in the units their consumers take."""

from __future__ import annotations

from core.settings import Settings
from wiring.api import admission_limits, body_limit, key_limits, retrieve_limits


def test_retrieve_limits_follow_the_settings_and_their_validators() -> None:
    # Only the maximum set: the default follows it down (core.settings' validator).
    limits = retrieve_limits(Settings(api={"max_top_k": 5, "max_query_chars": 64}))
    assert (limits.max_top_k, limits.default_top_k, limits.max_query_chars) == (5, 5, 64)
    assert limits.max_context_tokens == Settings().retrieve.max_context_tokens


def test_admission_limits_are_in_seconds_and_weights_are_copied() -> None:
    settings = Settings(
        api={"max_inflight": 3, "queue_timeout_ms": 250, "request_timeout_ms": 4000},
        admission={"tenant_weights": {"acme": 2.0}},
    )
    limits = admission_limits(settings)
    assert (limits.max_inflight, limits.queue_timeout_s, limits.request_timeout_s) == (3, 0.25, 4.0)
    assert dict(limits.tenant_weights) == {"acme": 2.0}


def test_key_limits_and_the_upload_aware_body_limit() -> None:
    settings = Settings(
        limits={"rate_per_key": 7.0, "burst_per_key": 9},
        api={"max_body_bytes": 2048, "max_upload_bytes": 4096},
    )
    assert (key_limits(settings).rate_per_s, key_limits(settings).burst) == (7.0, 9)
    limit_for = body_limit(settings)
    assert limit_for("/v1/documents:upload") == 4096
    assert limit_for("/v1/documents") == 2048
