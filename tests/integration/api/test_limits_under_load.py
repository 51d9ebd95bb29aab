"""Open-loop load, rising then falling, against one key with a low limit: the excess gets
429s, never a 5xx or a timeout, and every request succeeds again once the load drops."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.app import create_app
from bench.load import LoadConfig, RequestSpec, print_results, run_rates
from testkit.server import app_in_thread
from tests.integration.api.conftest import full_settings, make_key

pytestmark = pytest.mark.integration

RATE, BURST = 10.0, 10


@pytest.fixture
def limited_server(db_url: str, tmp_path: Path) -> Iterator[str]:
    settings = full_settings(
        db_url, tmp_path, limits={"rate_per_key": RATE, "burst_per_key": BURST, "concurrency_per_key": 8}
    )
    with app_in_thread(create_app(settings, hooks=[]), start_timeout_s=30, stop_timeout_s=10) as url:
        yield url


def test_one_key_over_its_limit_gets_429s_then_recovers(limited_server: str, db_url: str) -> None:
    token = make_key(db_url, "acme", ["ingest"])
    spec = RequestSpec("GET", "/v1/jobs?limit=1", None, {"Authorization": f"Bearer {token}"})
    # Below (a third of the rate: the app shares this process with the load generator, so on a
    # busy machine arrivals bunch, up to ~0.6 s late, and a window sees more than the rate),
    # six times over, below again.
    rates = (3.0, 60.0, 3.0)
    configs = [
        LoadConfig(rate=r, duration_s=2.0, warmup_s=0.5, timeout_s=5.0, arrival="fixed", seed=i)
        for i, r in enumerate(rates)
    ]
    results = asyncio.run(run_rates(limited_server, lambda i: spec, configs, pause_s=1.5))
    print_results(results)
    below, over, after = results
    for r in results:
        assert r.timeouts == 0, r.status_counts
        assert not any(code.startswith("5") for code in r.status_counts), r.status_counts
        assert set(r.status_counts) <= {"200", "429"}, r.status_counts
    assert below.status_counts == {"200": below.sent}
    assert over.status_counts.get("429", 0) > over.sent / 2  # ~10 of 60 per second admitted
    assert over.ok >= RATE * over.duration_s * 0.5  # the admitted share is still served
    assert after.status_counts == {"200": after.sent}
