"""``Client`` and ``AsyncClient``: the ragline HTTP API on httpx, typed by the shared models.

Both drive the flows of ``_flows`` (request building, batching, polling, parsing: written
once); what differs is only how a call is sent and how a pause is waited.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
from tenacity import AsyncRetrying, Retrying

from ragline_client import _flows as flows
from ragline_client._flows import Call, Flow, PushResult, Sleep
from ragline_client.errors import from_transport
from ragline_client.models import (
    AclIn,
    ChunkOut,
    ConnectorStateOut,
    ConnectorStateSaved,
    ConnectorStateUpdate,
    DocumentAclOut,
    DocumentDeletedOut,
    DocumentIn,
    DocumentOut,
    FeedbackIn,
    FeedbackOut,
    FiltersIn,
    FusionIn,
    GroupsOut,
    HealthOut,
    JobOut,
    MeOut,
    ReadyOut,
    RetrieveOut,
)
from ragline_client.retry import RetryPolicy

T = TypeVar("T")
Mode = Literal["hybrid", "dense", "lexical"]
Expand = Literal["none", "parent"]
ProgressCallback = Callable[[JobOut], None]

DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)


def _http_options(base_url: str, api_key: str, timeout: float | httpx.Timeout) -> dict[str, Any]:
    return {
        "base_url": base_url.rstrip("/"),
        "headers": {"Authorization": f"Bearer {api_key}", "User-Agent": "ragline-client/0.1"},
        "timeout": timeout,
    }


def _request_id() -> str:
    return uuid.uuid4().hex


class Client:
    """A synchronous client. ``Client(base_url, api_key)``; use as a context manager or call
    ``close()``. Every method raises ``RaglineError`` on failure."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(transport=transport, **_http_options(base_url, api_key, timeout))
        self._retry = retry or RetryPolicy()
        self._limits = flows.LimitsCache()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call[T]) -> T:
        request_id = _request_id()
        for attempt in Retrying(**self._retry.tenacity_kwargs()):
            with attempt:
                try:
                    response = self._http.request(**call.request_kwargs(request_id))
                except httpx.TransportError as exc:
                    raise from_transport(exc, request_id) from exc
                return call.answer(response, self._retry.statuses)
        raise AssertionError("unreachable: tenacity reraises the last error")

    def _run(self, flow: Flow[T]) -> T:
        try:
            step = next(flow)
            while True:
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                    step = flow.send(None)
                else:
                    step = flow.send(self._send(step))
        except StopIteration as done:
            return done.value
        finally:
            flow.close()

    # --- the API (docstrings here; AsyncClient's methods do the same) -------------------------

    def health(self) -> HealthOut:
        """``GET /healthz``: the process is up."""
        return self._run(flows.health())

    def ready(self) -> ReadyOut:
        """``GET /readyz``: ``status`` is ``ready`` or ``not_ready`` (with the failing check)."""
        return self._run(flows.ready())

    def me(self) -> MeOut:
        """The key's tenant, principal and roles, and the server's batch and body limits."""
        return self._run(flows.me())

    def push(
        self, documents: Iterable[DocumentIn | Mapping[str, Any]], *, connector: str | None = None
    ) -> PushResult:
        """Queue documents for ingestion, in batches within the server's limits; one job per
        batch. Retrying is safe: an unchanged document (same content hash) is skipped.
        ``connector``: push as that connector, which then owns the documents (another
        connector's are rejected, ``owned_by_other_connector``)."""
        return self._run(flows.push(documents, self._limits, connector))

    def upload(
        self,
        path: str | Path,
        *,
        external_id: str | None = None,
        mime_type: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        acl: AclIn | None = None,
        connector: str | None = None,
    ) -> PushResult:
        """Stream one file (multipart); ``external_id`` defaults to the file name, and
        ``mime_type`` to what its suffix says or else what the server detects. The answer is
        ``push()``'s (``job_ids``; ``job_id`` is the one job)."""
        return self._run(
            flows.upload(
                Path(path),
                external_id=external_id,
                mime_type=mime_type,
                title=title,
                metadata=metadata,
                acl=acl,
                connector=connector,
            )
        )

    def delete(self, external_id: str, *, connector: str | None = None) -> DocumentDeletedOut:
        """Delete a document; no retrieval returns it once this returns. ``not_found`` if absent;
        with ``connector``, ``not_owned_by_connector`` unless that connector wrote it."""
        return self._run(flows.delete(external_id, connector))

    def set_acl(
        self,
        external_id: str,
        principals: Iterable[str],
        *,
        public: bool = False,
        connector: str | None = None,
    ) -> DocumentAclOut:
        """Replace a document's ACL (``user:``, ``group:`` or ``service:`` entries); with
        ``connector``, ``not_owned_by_connector`` unless that connector wrote it."""
        return self._run(flows.set_acl(external_id, principals, public, connector))

    def set_groups(self, principal_id: str, groups: Iterable[str]) -> GroupsOut:
        """Replace a principal's groups (admin role)."""
        return self._run(flows.set_groups(principal_id, groups))

    def retrieve(
        self,
        query: str,
        *,
        top_k: int | None = None,
        mode: Mode = "hybrid",
        filters: FiltersIn | Mapping[str, Any] | None = None,
        rerank: bool | None = None,
        max_context_tokens: int | None = None,
        expand: Expand = "none",
        as_principal: str | None = None,
        fusion: FusionIn | Mapping[str, Any] | None = None,
        language: str | None = None,
    ) -> RetrieveOut:
        """Permission-filtered retrieval; limits left ``None`` take the server's defaults.

        ``fusion`` (e.g. ``{"method": "convex", "weights": {"dense": 0.7, "lexical": 0.3}}``)
        overrides the tenant's fusion defaults field by field; the answer's ``fusion`` names
        the one used. ``language`` (ISO 639-1, e.g. ``"de"``) analyzes the query as that
        language where the deployment is multilingual, instead of detecting it."""
        return self._run(
            flows.retrieve(
                query,
                top_k=top_k,
                mode=mode,
                filters=filters,
                rerank=rerank,
                max_context_tokens=max_context_tokens,
                expand=expand,
                as_principal=as_principal,
                fusion=fusion,
                language=language,
            )
        )

    def chunk(self, chunk_id: str, *, as_principal: str | None = None) -> ChunkOut:
        """``GET /v1/chunks/{id}``: one chunk, if the caller may read it (else a 404)."""
        return self._run(flows.chunk(chunk_id, as_principal))

    def document(self, external_id: str, *, as_principal: str | None = None) -> DocumentOut:
        """``GET /v1/documents/{id}``: a document's chunks in order, if the caller may read it."""
        return self._run(flows.document(external_id, as_principal))

    def feedback(
        self,
        request_id: str,
        label: Literal["relevant", "not_relevant"] | int,
        *,
        chunk_id: str | None = None,
        external_id: str | None = None,
        as_principal: str | None = None,
    ) -> FeedbackOut:
        """Judge one result of the retrieve ``request_id`` (its answer's ``request_id``): by
        ``chunk_id`` or the document's ``external_id``; ``label`` relevant, not_relevant or 0-3;
        ``as_principal``: the end user a delegating key retrieved for (their judgement)."""
        body = FeedbackIn(
            request_id=request_id,
            label=label,
            chunk_id=chunk_id,
            external_id=external_id,
            as_principal=as_principal,
        )
        return self._run(flows.feedback(body))

    def job(self, job_id: str) -> JobOut:
        return self._run(flows.job(job_id))

    def jobs(self, *, state: str | None = None, limit: int = 50) -> list[JobOut]:
        return self._run(flows.jobs(state, limit))

    def cancel(self, job_id: str) -> JobOut:
        """Ask the job to stop between batches; what it wrote stays written."""
        return self._run(flows.cancel(job_id))

    def wait(
        self,
        job_id: str,
        *,
        timeout: float = 600.0,
        poll: float = 0.1,
        on_progress: ProgressCallback | None = None,
    ) -> JobOut:
        """Poll until the job ends; ``on_progress`` gets every ``JobOut`` seen on the way."""
        return self._run(flows.wait(job_id, timeout=timeout, poll=poll, on_progress=on_progress))

    def connector_state(self, name: str) -> ConnectorStateOut:
        """A connector's cursor and item fingerprints (empty if it never saved)."""
        return self._run(flows.connector_state(name))

    def save_connector_state(self, name: str, update: ConnectorStateUpdate) -> ConnectorStateSaved:
        """Merge fingerprints into (or out of) a connector's state and move its cursor."""
        return self._run(flows.save_connector_state(name, update))

    def reset_connector_state(self, name: str) -> ConnectorStateOut:
        """Forget a connector's state: its next run sends everything."""
        return self._run(flows.reset_connector_state(name))


class AsyncClient:
    """The same API as ``Client``, for asyncio: every method is a coroutine."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(transport=transport, **_http_options(base_url, api_key, timeout))
        self._retry = retry or RetryPolicy()
        self._limits = flows.LimitsCache()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call[T]) -> T:
        request_id = _request_id()
        async for attempt in AsyncRetrying(**self._retry.tenacity_kwargs()):
            with attempt:
                try:
                    response = await self._http.request(**call.request_kwargs(request_id))
                except httpx.TransportError as exc:
                    raise from_transport(exc, request_id) from exc
                return call.answer(response, self._retry.statuses)
        raise AssertionError("unreachable: tenacity reraises the last error")

    async def _run(self, flow: Flow[T]) -> T:
        try:
            step = next(flow)
            while True:
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    step = flow.send(None)
                else:
                    step = flow.send(await self._send(step))
        except StopIteration as done:
            return done.value
        finally:
            flow.close()

    async def health(self) -> HealthOut:
        return await self._run(flows.health())

    async def ready(self) -> ReadyOut:
        return await self._run(flows.ready())

    async def me(self) -> MeOut:
        return await self._run(flows.me())

    async def push(
        self, documents: Iterable[DocumentIn | Mapping[str, Any]], *, connector: str | None = None
    ) -> PushResult:
        return await self._run(flows.push(documents, self._limits, connector))

    async def upload(
        self,
        path: str | Path,
        *,
        external_id: str | None = None,
        mime_type: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        acl: AclIn | None = None,
        connector: str | None = None,
    ) -> PushResult:
        return await self._run(
            flows.upload(
                Path(path),
                external_id=external_id,
                mime_type=mime_type,
                title=title,
                metadata=metadata,
                acl=acl,
                connector=connector,
            )
        )

    async def delete(self, external_id: str, *, connector: str | None = None) -> DocumentDeletedOut:
        return await self._run(flows.delete(external_id, connector))

    async def set_acl(
        self,
        external_id: str,
        principals: Iterable[str],
        *,
        public: bool = False,
        connector: str | None = None,
    ) -> DocumentAclOut:
        return await self._run(flows.set_acl(external_id, principals, public, connector))

    async def set_groups(self, principal_id: str, groups: Iterable[str]) -> GroupsOut:
        return await self._run(flows.set_groups(principal_id, groups))

    async def retrieve(
        self,
        query: str,
        *,
        top_k: int | None = None,
        mode: Mode = "hybrid",
        filters: FiltersIn | Mapping[str, Any] | None = None,
        rerank: bool | None = None,
        max_context_tokens: int | None = None,
        expand: Expand = "none",
        as_principal: str | None = None,
        fusion: FusionIn | Mapping[str, Any] | None = None,
        language: str | None = None,
    ) -> RetrieveOut:
        return await self._run(
            flows.retrieve(
                query,
                top_k=top_k,
                mode=mode,
                filters=filters,
                rerank=rerank,
                max_context_tokens=max_context_tokens,
                expand=expand,
                as_principal=as_principal,
                fusion=fusion,
                language=language,
            )
        )

    async def chunk(self, chunk_id: str, *, as_principal: str | None = None) -> ChunkOut:
        return await self._run(flows.chunk(chunk_id, as_principal))

    async def document(self, external_id: str, *, as_principal: str | None = None) -> DocumentOut:
        return await self._run(flows.document(external_id, as_principal))

    async def feedback(
        self,
        request_id: str,
        label: Literal["relevant", "not_relevant"] | int,
        *,
        chunk_id: str | None = None,
        external_id: str | None = None,
        as_principal: str | None = None,
    ) -> FeedbackOut:
        body = FeedbackIn(
            request_id=request_id,
            label=label,
            chunk_id=chunk_id,
            external_id=external_id,
            as_principal=as_principal,
        )
        return await self._run(flows.feedback(body))

    async def job(self, job_id: str) -> JobOut:
        return await self._run(flows.job(job_id))

    async def jobs(self, *, state: str | None = None, limit: int = 50) -> list[JobOut]:
        return await self._run(flows.jobs(state, limit))

    async def cancel(self, job_id: str) -> JobOut:
        return await self._run(flows.cancel(job_id))

    async def wait(
        self,
        job_id: str,
        *,
        timeout: float = 600.0,
        poll: float = 0.1,
        on_progress: ProgressCallback | None = None,
    ) -> JobOut:
        return await self._run(flows.wait(job_id, timeout=timeout, poll=poll, on_progress=on_progress))

    async def connector_state(self, name: str) -> ConnectorStateOut:
        return await self._run(flows.connector_state(name))

    async def save_connector_state(self, name: str, update: ConnectorStateUpdate) -> ConnectorStateSaved:
        return await self._run(flows.save_connector_state(name, update))

    async def reset_connector_state(self, name: str) -> ConnectorStateOut:
        return await self._run(flows.reset_connector_state(name))
