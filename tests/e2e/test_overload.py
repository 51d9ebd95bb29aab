"""A burst past small admission limits on a real ``ragline serve``: the excess is shed with 503
``overloaded`` + Retry-After, the rest is served, probes stay up and the server is healthy after."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.server import ServerProcess, auth, server_env
from tests.e2e.test_outage import documents, push, wait_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BURST = 24


def test_a_burst_past_the_limits_is_shed_and_the_rest_served(
    db_url: str, tmp_path: Path, embedding_export: Path
) -> None:
    env = server_env(
        db_url,
        tmp_path / "data",
        models=embedding_export,
        RAGLINE_API__MAX_INFLIGHT="1",
        RAGLINE_API__MAX_QUEUED="2",
        RAGLINE_API__QUEUE_TIMEOUT_MS="100",
    )
    server = ServerProcess(env=env, log_path=tmp_path / "server.log")
    server.start()
    try:
        ingest = server.key("acme", "ingest")
        query = server.key("acme", "query")
        client = httpx.Client(base_url=server.base_url, timeout=60.0)
        assert wait_job(client, ingest, push(client, ingest, documents("doc", 6)))["state"] == "succeeded"

        replies: list[httpx.Response] = []
        probes: list[int] = []
        lock = threading.Lock()
        go = threading.Barrier(BURST + 1)

        def one(i: int) -> None:
            with httpx.Client(base_url=server.base_url, timeout=60.0) as c:
                go.wait()
                r = c.post("/v1/retrieve", json={"query": f"ledger payroll {i}"}, headers=auth(query))
            with lock:
                replies.append(r)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(BURST)]
        for t in threads:
            t.start()
        go.wait()
        probes.append(client.get("/readyz").status_code)  # never shed, even with the gate full
        for t in threads:
            t.join(timeout=120)

        statuses = sorted(r.status_code for r in replies)
        assert len(replies) == BURST and set(statuses) == {200, 503}, statuses
        for r in replies:
            if r.status_code == 503:
                assert r.headers["retry-after"] == "1"
                error = r.json()["error"]
                assert error["code"] == "overloaded" and error["request_id"] == r.headers["x-request-id"]
            else:
                assert r.json()["results"], r.text
        assert probes == [200]
        samples = [
            (sample.name, sample.labels, sample.value)
            for family in text_string_to_metric_families(client.get("/metrics").text)
            for sample in family.samples
        ]
        shed = sum(
            v
            for name, labels, v in samples
            if name == "ragline_requests_shed_total" and labels.get("route") == "/v1/retrieve"
        )
        assert shed >= statuses.count(503), [s for s in samples if "shed" in s[0]]
        # The shed requests are timed under their route, not as "unmatched" (never routed).
        assert any(
            name == "ragline_http_request_duration_seconds_count"
            and labels.get("route") == "/v1/retrieve"
            and labels.get("status_class") == "5xx"
            for name, labels, _ in samples
        )

        after = client.post("/v1/retrieve", json={"query": "ledger payroll"}, headers=auth(query))
        assert after.status_code == 200 and after.json()["results"], after.text
        assert client.get("/readyz").status_code == 200
        client.close()
    finally:
        server.kill()
