"""Two ``ragline serve`` replicas on one PostgreSQL and one data dir (the shared store): a
change acknowledged by one is respected by the other on its very next response, and a swap
of the live alias reaches both. Latencies are printed (``-s``) and recorded in
docs/benchmarks.md, not asserted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit.server import ServerProcess, auth, server_env
from tests.e2e.test_server import _wait_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]

POLL_SECONDS = 1.0
SWAP_TIMEOUT_S = 60.0
RUNBOOK = "eng-failover-runbook"
NOTE = "public-oncall-note"
QUERY = "how do I promote the standby during a primary failover?"


@pytest.fixture
def replicas(
    db_url: str, tmp_path: Path, embedding_export: Path
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    env = server_env(
        db_url,
        tmp_path / "store",  # one store both replicas mount
        models=embedding_export,
        RAGLINE_INDEX__POLL_SECONDS=str(POLL_SECONDS),
        RAGLINE_INDEX__MAINTENANCE_SECONDS="0",  # no rebuild of its own during the test
        RAGLINE_INDEX__SHARDS="1",
    )
    servers = [ServerProcess(env, tmp_path / f"replica-{name}.log") for name in ("a", "b")]
    try:
        for server in servers:
            server.launch()
        for server in servers:
            server.wait_ready()
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.kill()


def _ids(client: httpx.Client, token: str) -> tuple[list[str], str]:
    r = client.post("/v1/retrieve", json={"query": QUERY, "top_k": 10}, headers=auth(token))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["degraded"] == [], body["degraded"]
    return [hit["document_external_id"] for hit in body["results"]], str(body["index_version"])


def _next_response_ms(client: httpx.Client, token: str, acked_at: float) -> tuple[list[str], float]:
    ids, _ = _ids(client, token)
    return ids, (time.perf_counter() - acked_at) * 1000


def test_replicas_agree_on_changes_and_swaps(replicas: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = replicas
    ingest, admin = a.key("acme", "ingest"), a.key("acme", "admin")
    alice = a.key("acme", "query", principal="user:alice")
    ca = httpx.Client(base_url=a.base_url, timeout=60.0)
    cb = httpx.Client(base_url=b.base_url, timeout=60.0)
    docs = [
        {
            "external_id": RUNBOOK,
            "text": "# Failover\n\nPromote the standby with pg_ctl promote during a primary failover.",
            "acl": {"principals": ["group:eng"], "public": False},
        },
        {
            "external_id": NOTE,
            "text": "# On-call\n\nDuring a primary failover, page the on-call engineer first.",
            "acl": {"principals": [], "public": True},
        },
    ]
    r = ca.post("/v1/documents", json={"documents": docs}, headers=auth(ingest))
    assert r.status_code == 202, r.text
    assert _wait_job(ca, ingest, r.json()["job_id"])["state"] == "succeeded"
    ids, before = _ids(cb, alice)
    assert NOTE in ids and RUNBOOK not in ids  # alice holds no group yet

    # A swap made through the shared store reaches both replicas.
    out = a.cli("index", "rebuild", "--swap", "live").stdout.strip()
    swapped_at = time.perf_counter()  # the alias moved just before the CLI printed and exited
    version = out.split("built ", 1)[1].split()[0]
    assert version != before
    swap_ms: dict[str, float] = {}
    deadline = time.monotonic() + SWAP_TIMEOUT_S
    while len(swap_ms) < 2 and time.monotonic() < deadline:
        for name, client in (("a", ca), ("b", cb)):
            if name not in swap_ms and _ids(client, alice)[1] == version:
                swap_ms[name] = (time.perf_counter() - swapped_at) * 1000
        time.sleep(0.05)
    assert set(swap_ms) == {"a", "b"}, f"swap to {version} reached only {swap_ms}"

    # Each change is acknowledged by one replica and must hold on the other's next response.
    r = ca.put("/v1/principals/user:alice/groups", json={"groups": ["group:eng"]}, headers=auth(admin))
    assert r.status_code == 200, r.text
    ids, group_ms = _next_response_ms(cb, alice, time.perf_counter())
    assert RUNBOOK in ids, ids

    acl = {"principals": ["group:ops"], "public": False}
    r = cb.put(f"/v1/documents/{RUNBOOK}/acl", json=acl, headers=auth(ingest))
    assert r.status_code == 200, r.text
    ids, acl_ms = _next_response_ms(ca, alice, time.perf_counter())
    assert RUNBOOK not in ids, ids

    r = ca.delete(f"/v1/documents/{NOTE}", headers=auth(ingest))
    assert r.status_code == 200 and r.json()["deleted"], r.text
    ids, delete_ms = _next_response_ms(cb, alice, time.perf_counter())
    assert NOTE not in ids, ids
    for client in (ca, cb):  # and stays so on both
        assert not {NOTE, RUNBOOK} & set(_ids(client, alice)[0])

    print(
        f"\nreplica agreement: swap reached a in {swap_ms['a']:.0f} ms, b in {swap_ms['b']:.0f} ms"
        f" (poll_seconds {POLL_SECONDS}, timed from the swapping CLI's exit);"
        f" next response on the other replica after group change {group_ms:.1f} ms,"
        f" ACL change {acl_ms:.1f} ms, delete {delete_ms:.1f} ms"
    )
    ca.close()
    cb.close()
