"""A tenant whose reranker keeps running out of its budget stops paying it (issue 44): after
``rerank.breaker_timeouts`` consecutive timeouts its answers skip the reranker at once and say
so, ``GET /v1/admin/status`` and ``/metrics`` show the suspension, and after the cool-down one
trial reranks again (a timeout suspends again; in budget resumes).

The real app, index and micro-batcher (``BatchingReranker``); the fault is the pair scorer
behind it, which takes longer than the budget until the test makes it fast.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from catalog import indexes
from core.settings import RerankSettings
from jobs.rebuild_job import rebuild
from rerank.batching import BatchingReranker
from rerank.scoring import Pair
from tests import factories
from tests.integration.api.conftest import full_settings, make_key, push_and_wait, serving_client

pytestmark = pytest.mark.integration

BUDGET_MS = 300
THRESHOLD = 3
COOLDOWN_S = 2.0


class SlowScorer:
    """A pair scorer slower than the budget until ``fast`` is set (the fault injected)."""

    max_length = 64

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.fast = threading.Event()
        self.calls = 0

    def pair_tokens(self, pairs: Sequence[Pair]) -> list[int]:
        return [8] * len(pairs)

    def score_pairs(self, pairs: Sequence[Pair]) -> list[float]:
        self.calls += 1
        if not self.fast.is_set():
            time.sleep(self.delay_s)
        return [float(len(p)) for _, p in pairs]


@pytest.fixture
def breaker_client(db_url: str, tmp_path: Path, embedder) -> Iterator[TestClient]:
    """The full API with a small budget, threshold and cool-down (an app of its own: the test
    replaces its reranker)."""
    rerank = RerankSettings(budget_ms=BUDGET_MS, breaker_timeouts=THRESHOLD, breaker_cooldown_s=COOLDOWN_S)
    yield from serving_client(full_settings(db_url, tmp_path, rerank=rerank), embedder)


def _metrics(client: TestClient) -> tuple[str, dict[tuple[str, frozenset], float]]:
    text = client.get("/metrics").text
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return text, samples


def _value(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_repeated_rerank_timeouts_suspend_the_tenants_rerank_until_a_trial_succeeds(
    breaker_client: TestClient, db_url: str, tmp_path: Path
) -> None:
    client = breaker_client
    reader = make_key(db_url, "slowco", ["query"])
    operator = make_key(db_url, "slowco", ["admin", "operator"])
    other_admin = make_key(db_url, "otherco", ["admin"])
    other = make_key(db_url, "otherco", ["query"])
    public = {"public": True}
    docs = [{"external_id": f"d{i}", "text": f"pump valve note {i}", "acl": public} for i in range(3)]
    for tenant in ("slowco", "otherco"):
        push_and_wait(client, make_key(db_url, tenant, ["ingest"]), docs)
    version = rebuild(db_url, factories.rebuild(index_root=tmp_path / "indexes", n_shards=1))
    with psycopg.connect(db_url) as conn:
        with conn.transaction():
            indexes.swap_alias(conn, alias="live", version_id=version)
        assert client.app.state.search.watcher.check_alias(conn) == version  # type: ignore[attr-defined]
    scorer = SlowScorer(delay_s=BUDGET_MS / 1000 * 2)
    search = client.app.state.search  # type: ignore[attr-defined]
    # The server's own reranker, as [rerank] model would load it, with the slow scorer in it.
    search.reranker = BatchingReranker(scorer, default_timeout_s=BUDGET_MS / 1000)
    search.rerank_config = dataclasses.replace(search.rerank_config, model="/srv/slow-rr")
    _, before = _metrics(client)

    def ask(token: str = reader) -> dict:
        r = client.post(
            "/v1/retrieve",
            json={"query": "pump valve", "top_k": 3},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200, r.text
        return r.json()

    def status(token: str = operator) -> list[dict]:
        """The node's breakers: an operator sees every tenant's, a tenant admin its own."""
        r = client.get("/v1/admin/status", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        return r.json()["rerank_breakers"]

    try:
        timed_out = [ask() for _ in range(THRESHOLD)]
        for answer in timed_out:  # each waited out the budget
            assert answer["results"] and answer["reranker"] is None
            assert answer["degraded"] == [
                {"stage": "rerank", "reason": "RerankTimeout: kept the fused order"}
            ]
            assert answer["timings_ms"]["rerank"] >= BUDGET_MS
        calls = scorer.calls

        # Open: skipped at once, with its own reason; the scorer is not called.
        suspended = ask()
        assert suspended["reranker"] is None and "rerank" not in suspended["timings_ms"]
        (reason,) = [d["reason"] for d in suspended["degraded"] if d["stage"] == "rerank"]
        assert reason.startswith(f"rerank suspended after {THRESHOLD} consecutive rerank timeouts")
        assert scorer.calls == calls
        (breaker,) = status()
        assert breaker["tenant_id"] == "slowco" and breaker["state"] == "open"
        assert breaker["consecutive_timeouts"] == THRESHOLD and breaker["opened"] == 1
        assert 0 < breaker["retry_in_s"] <= COOLDOWN_S
        text, samples = _metrics(client)
        assert _value(samples, "ragline_rerank_suspended_tenants") == 1
        opened = "ragline_rerank_breaker_transitions_total"
        assert _value(samples, opened, state="open") == _value(before, opened, state="open") + 1
        suspended_metric = ("ragline_retrieve_degraded_total", {"stage": "rerank", "reason": "suspended"})
        assert _value(samples, suspended_metric[0], **suspended_metric[1]) == (
            _value(before, suspended_metric[0], **suspended_metric[1]) + 1
        )
        assert "slowco" not in text  # no tenant label (metrics.tenant_labels is off)

        # Another tenant's reranks are its own: it still tries (and times out) unsuspended.
        assert ask(other)["degraded"][0]["reason"] == "RerankTimeout: kept the fused order"
        assert [(b["tenant_id"], b["state"], b["consecutive_timeouts"]) for b in status()] == [
            ("otherco", "closed", 1),
            ("slowco", "open", THRESHOLD),
        ]
        assert [b["tenant_id"] for b in status(other_admin)] == ["otherco"]

        # After the cool-down one trial reranks; still over budget, it opens again.
        time.sleep(COOLDOWN_S + 0.1)
        trial = ask()
        assert trial["degraded"] == [{"stage": "rerank", "reason": "RerankTimeout: kept the fused order"}]
        assert ask()["degraded"][0]["reason"].startswith("rerank suspended")
        assert [(b["state"], b["opened"]) for b in status() if b["tenant_id"] == "slowco"] == [("open", 2)]

        # The next trial in budget closes it: answers are reranked again.
        scorer.fast.set()
        time.sleep(COOLDOWN_S + 0.1)
        resumed = ask()
        assert resumed["degraded"] == [] and resumed["reranker"] == "slow-rr"
        assert ask()["reranker"] == "slow-rr"
        (breaker,) = [b for b in status() if b["tenant_id"] == "slowco"]
        assert (breaker["state"], breaker["consecutive_timeouts"], breaker["retry_in_s"]) == (
            "closed",
            0,
            None,
        )
        _, samples = _metrics(client)
        assert _value(samples, "ragline_rerank_suspended_tenants") == 0
        assert _value(samples, opened, state="closed") == _value(before, opened, state="closed") + 1
        assert _value(samples, opened, state="half_open") == _value(before, opened, state="half_open") + 2
    finally:
        search.reranker.close()
