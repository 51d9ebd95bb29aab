"""bench.scale's /v1/retrieve column: a real catalog, a real live version, the real server."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.scale import measure
from tests.conftest import truncate_all

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_measure_serves_retrieve_at_a_fixed_rate(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    truncate_all(pg_url)
    monkeypatch.setenv("RAGLINE_DATABASE_URL", pg_url)  # bench.retrieve.database() uses it as is
    args = argparse.Namespace(
        shards=2, seed=0, rate=4.0, duration=2.0, warmup=1.0, shard_servers=0, chunks_per_doc=10
    )
    m = measure(600, args, tmp_path)
    assert m["kind"] == "flat" and m["catalog_s"] > 0 and m["build_s"] > 0
    assert 0 < m["p50_0"] <= m["p95_0"]
    assert m["server_rss"] > m["rss"]  # the server holds the model and the app besides the index
    assert "p50_2" not in m
