"""Admission control and the request deadline on a small app whose routes block on demand
(fault injection: the real routes' work is replaced by events the test sets, and the key
lookup by a principal named in a header)."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated

import httpx
import pytest
from fastapi import FastAPI, Header

from api.admission import AdmissionLimits, AdmissionMiddleware, FairGate, Shed, build_gate
from api.deps import AdmittedQuery, get_principal
from api.errors import install_error_handlers
from api.middleware import RequestContextMiddleware
from authz.principals import Principal
from core import metrics
from core.context import deadline_var
from core.settings import Settings


def test_gate_admits_queues_then_sheds() -> None:
    async def scenario() -> list[str]:
        gate = FairGate(max_inflight=2, max_queued=1, queue_timeout_s=0.05)
        events: list[str] = []
        async with gate.slot("a"), gate.slot("a"):
            assert gate.inflight == 2
            waiter = asyncio.create_task(_try(gate, events, "queued", "a"))
            await asyncio.sleep(0)  # the waiter is now in the queue
            assert gate.queued == 1
            await _try(gate, events, "overflow", "a")  # queue full, own tenant's: shed at once
            await waiter  # nobody released a slot: its wait ran out
        assert gate.inflight == 0 and gate.queued == 0
        async with gate.slot("a"):  # slots came back
            events.append("after")
        return events

    assert asyncio.run(scenario()) == ["overflow:queue_full", "queued:queue_timeout", "after"]


def test_gate_hands_a_released_slot_to_the_waiter() -> None:
    async def scenario() -> list[str]:
        gate = FairGate(max_inflight=1, max_queued=4, queue_timeout_s=5.0)
        events: list[str] = []
        release = asyncio.Event()

        async def holder() -> None:
            async with gate.slot("a"):
                await release.wait()

        first = asyncio.create_task(holder())
        await asyncio.sleep(0)
        waiter = asyncio.create_task(_try(gate, events, "waiter", "b"))
        await asyncio.sleep(0)
        assert gate.queued == 1
        release.set()
        await asyncio.gather(first, waiter)
        return events

    assert asyncio.run(scenario()) == ["waiter:admitted"]


def _served_order(weights: dict[str, float], arrivals: list[str]) -> list[str]:
    """The order one slot serves ``arrivals`` (all queued behind a holder) in."""

    async def scenario() -> list[str]:
        gate = FairGate(max_inflight=1, max_queued=len(arrivals), queue_timeout_s=5.0, weights=weights)
        order: list[str] = []
        release = asyncio.Event()

        async def one(tenant: str) -> None:
            async with gate.slot(tenant):
                order.append(tenant)
                await asyncio.sleep(0)

        async def holder() -> None:
            async with gate.slot("x"):
                await release.wait()

        first = asyncio.create_task(holder())
        await asyncio.sleep(0)
        tasks = []
        for tenant in arrivals:
            tasks.append(asyncio.create_task(one(tenant)))
            await asyncio.sleep(0)
        release.set()
        await asyncio.gather(first, *tasks)
        assert gate.inflight == 0 and gate.queued == 0
        return order

    return asyncio.run(scenario())


def test_backlogged_tenants_are_served_in_turn_not_in_arrival_order() -> None:
    # A queued six before B's two: B does not wait behind all of A's.
    assert _served_order({}, ["a"] * 6 + ["b"] * 2) == ["a", "b", "a", "b", "a", "a", "a", "a"]


def test_weights_share_the_slots_in_proportion() -> None:
    order = _served_order({"a": 2.0, "c": 0.5}, ["a"] * 6 + ["b"] * 3 + ["c"] * 2)
    assert order[:7] == ["a", "a", "b", "a", "a", "b", "c"], order


def test_a_full_queue_takes_the_heaviest_tenants_newest_seat_for_a_lighter_one() -> None:
    async def scenario() -> list[str]:
        gate = FairGate(max_inflight=1, max_queued=3, queue_timeout_s=5.0)
        events: list[str] = []
        release = asyncio.Event()

        async def holder() -> None:
            async with gate.slot("a"):
                await release.wait()

        first = asyncio.create_task(holder())
        await asyncio.sleep(0)
        tasks = []
        for name, tenant in (("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b"), ("a4", "a")):
            tasks.append(asyncio.create_task(_try(gate, events, name, tenant)))
            await asyncio.sleep(0.01)
        assert events == ["a3:displaced", "a4:queue_full"]  # B took A's newest seat; A is full
        release.set()
        await asyncio.gather(first, *tasks)
        return events

    assert asyncio.run(scenario())[2:] == ["a1:admitted", "b1:admitted", "a2:admitted"]


def test_gate_needs_a_slot() -> None:
    with pytest.raises(ValueError):
        FairGate(max_inflight=0, max_queued=1, queue_timeout_s=1.0)


async def _try(gate: FairGate, events: list[str], name: str, tenant: str) -> None:
    try:
        async with gate.slot(tenant):
            events.append(f"{name}:admitted")
    except Shed as shed:
        events.append(f"{name}:{shed.reason}")


async def _principal(x_tenant: Annotated[str, Header()] = "acme") -> Principal:
    return Principal(x_tenant, "p", (), frozenset({"query"}), key_id=f"k-{x_tenant}")


class _Blocking:
    """Routes that wait for the test: an async retrieve, a sync job read, the probes."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.sync_done = threading.Event()
        self.sync_release = threading.Event()
        self.deadline_seen: list[float | None] = []

    def app(self, limits: AdmissionLimits) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/retrieve")
        async def retrieve(principal: AdmittedQuery) -> dict[str, str]:
            await self.release.wait()
            return {"ok": principal.tenant_id}

        @app.get("/v1/jobs/{job_id}")
        def job(job_id: str) -> dict[str, str]:
            self.deadline_seen.append(deadline_var.get())  # copied into the worker thread
            self.sync_release.wait(timeout=30)
            self.sync_done.set()
            return {"job": job_id}

        @app.get("/healthz")
        async def healthz() -> dict[str, str]:
            return {"status": "ok"}

        app.state.settings = Settings()
        app.state.gate = build_gate(limits)
        app.dependency_overrides[get_principal] = _principal
        install_error_handlers(app)
        app.add_middleware(AdmissionMiddleware, limits=limits)
        app.add_middleware(RequestContextMiddleware, limit_for=lambda _: 1 << 20)
        return app


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def _shed_count(route: str, reason: str) -> float:
    return metrics.SHED.labels(route, reason)._value.get()


def test_burst_past_the_limits_is_shed_with_retry_after_and_the_rest_served() -> None:
    routes = _Blocking()
    app = routes.app(
        AdmissionLimits(max_inflight=2, max_queued=2, queue_timeout_s=30.0, request_timeout_s=30.0)
    )
    before = _shed_count("/v1/retrieve", "queue_full")

    async def scenario() -> tuple[list[httpx.Response], httpx.Response]:
        async with _client(app) as client:
            burst = [asyncio.create_task(client.post("/v1/retrieve")) for _ in range(7)]
            while sum(t.done() for t in burst) < 3:  # 2 run, 2 wait: the other 3 are shed at once
                await asyncio.sleep(0.01)
            health = await client.get("/healthz")  # never shed, even with the gate full
            routes.release.set()
            return list(await asyncio.gather(*burst)), health

    responses, health = asyncio.run(scenario())
    assert health.status_code == 200
    shed = [r for r in responses if r.status_code == 503]
    assert sorted(r.status_code for r in responses) == [200] * 4 + [503] * 3
    for r in shed:
        assert r.headers["retry-after"] == "1"
        error = r.json()["error"]
        assert error["code"] == "overloaded"
        assert error["request_id"] == r.headers["x-request-id"] and len(error["request_id"]) == 32
    assert _shed_count("/v1/retrieve", "queue_full") == before + 3


def test_a_request_past_its_deadline_answers_503_while_its_worker_finishes() -> None:
    routes = _Blocking()
    app = routes.app(
        AdmissionLimits(max_inflight=2, max_queued=2, queue_timeout_s=1.0, request_timeout_s=0.2)
    )
    before = metrics.DEADLINE_EXCEEDED.labels("/v1/jobs/{job_id}")._value.get()

    async def scenario() -> httpx.Response:
        async with _client(app) as client:
            return await client.get("/v1/jobs/j1")

    try:
        r = asyncio.run(scenario())
        answered_before_worker = not routes.sync_done.is_set()
    finally:
        routes.sync_release.set()
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["code"] == "deadline_exceeded"
    assert answered_before_worker  # the answer did not wait for the blocked worker
    assert routes.deadline_seen and routes.deadline_seen[0] is not None
    assert metrics.DEADLINE_EXCEEDED.labels("/v1/jobs/{job_id}")._value.get() == before + 1


def test_admission_off_admits_every_request() -> None:
    routes = _Blocking()
    app = routes.app(
        AdmissionLimits(max_inflight=0, max_queued=0, queue_timeout_s=1.0, request_timeout_s=30.0)
    )

    async def scenario() -> list[httpx.Response]:
        async with _client(app) as client:
            burst = [asyncio.create_task(client.post("/v1/retrieve")) for _ in range(6)]
            await asyncio.sleep(0.1)
            routes.release.set()
            return list(await asyncio.gather(*burst))

    assert [r.status_code for r in asyncio.run(scenario())] == [200] * 6


def test_shed_requests_are_counted_per_tenant_only_when_tenant_labels_are_on() -> None:
    def shed_burst(tenant: str, labels: bool) -> float:
        routes = _Blocking()
        app = routes.app(
            AdmissionLimits(max_inflight=1, max_queued=0, queue_timeout_s=30.0, request_timeout_s=30.0)
        )
        app.state.settings = Settings(metrics={"tenant_labels": labels})

        async def scenario() -> list[httpx.Response]:
            async with _client(app) as client:
                headers = {"x-tenant": tenant}
                burst = [asyncio.create_task(client.post("/v1/retrieve", headers=headers)) for _ in range(3)]
                while sum(t.done() for t in burst) < 2:
                    await asyncio.sleep(0.01)
                routes.release.set()
                return list(await asyncio.gather(*burst))

        assert sorted(r.status_code for r in asyncio.run(scenario())) == [200, 503, 503]
        return metrics.SHED_BY_TENANT.labels(tenant, "queue_full")._value.get()

    assert shed_burst("t-labelled", labels=True) == 2
    assert shed_burst("t-unlabelled", labels=False) == 0
