"""Every API call once, as a flow: a generator that yields the HTTP calls (and pauses) it
needs and returns the typed answer. ``Client`` and ``AsyncClient`` only drive flows, each
with its own transport, so the request building, batching, polling and parsing is shared."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from ragline_client.errors import RaglineError, from_response
from ragline_client.models import (
    MIME_TYPES,
    AclIn,
    AclUpdate,
    ChunkOut,
    ConnectorStateOut,
    ConnectorStateSaved,
    ConnectorStateUpdate,
    DocumentAclOut,
    DocumentDeletedOut,
    DocumentIn,
    DocumentOut,
    ErrorBody,
    FeedbackIn,
    FeedbackOut,
    FiltersIn,
    FusionIn,
    GroupsBody,
    GroupsOut,
    HealthOut,
    JobOut,
    LimitsOut,
    MeOut,
    PushResponse,
    PushWarning,
    ReadyOut,
    Rejection,
    RetrieveOut,
    mime_for_name,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

TERMINAL_STATES = frozenset({"succeeded", "failed", "partially_failed", "cancelled"})
# Room for the ``{"documents": [...]}`` envelope inside the server's body limit.
_ENVELOPE_BYTES = 64


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One HTTP request and how to read its answer. ``accept`` lists non-2xx statuses whose
    body is still the answer (``/readyz`` says ``not_ready`` with a 503)."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    content: bytes | None = None
    params: Mapping[str, str | int] | None = None
    files: Mapping[str, tuple[str, IO[bytes], str]] | None = None
    data: Mapping[str, str] | None = None
    accept: frozenset[int] = frozenset()

    def request_kwargs(self, request_id: str) -> dict[str, Any]:
        """httpx ``request()`` arguments; the same ``request_id`` for every retry of the call,
        so the server's logs show them as one request."""
        # A retried upload must send the file from its start again.
        for _, stream, _ in (self.files or {}).values():
            stream.seek(0)
        headers = {"x-request-id": request_id}
        kwargs: dict[str, Any] = {"method": self.method, "url": self.path, "headers": headers}
        if self.json is not None:
            kwargs["json"] = self.json
        if self.content is not None:
            kwargs["content"] = self.content
            headers["content-type"] = "application/json"
        for name in ("params", "files", "data"):
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        return kwargs

    def answer(self, response: httpx.Response, retry_statuses: frozenset[int]) -> T:
        if response.is_success or response.status_code in self.accept:
            return self.parse(response)
        raise from_response(response, retry_statuses=retry_statuses)


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


Step = Call[Any] | Sleep
Flow = Generator[Step, Any, T]


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: model.model_validate_json(response.content)


def _models(model: type[M]) -> Callable[[httpx.Response], list[M]]:
    adapter = TypeAdapter(list[model])  # type: ignore[valid-type]
    return lambda response: adapter.validate_json(response.content)


def _single(call: Call[T]) -> Flow[T]:
    result: T = yield call
    return result


def _doc_path(external_id: str) -> str:
    return quote(external_id, safe="")


# --- single calls ------------------------------------------------------------------------------


def health() -> Flow[HealthOut]:
    return _single(Call("GET", "/healthz", _model(HealthOut)))


def ready() -> Flow[ReadyOut]:
    return _single(Call("GET", "/readyz", _model(ReadyOut), accept=frozenset({503})))


def me() -> Flow[MeOut]:
    return _single(Call("GET", "/v1/me", _model(MeOut)))


def _as_connector(connector: str | None) -> dict[str, str | int] | None:
    # A connector's name makes its pushes its own; deletes and ACL changes under it touch
    # only its own documents (the server refuses the rest).
    return {"connector": connector} if connector is not None else None


def delete(external_id: str, connector: str | None = None) -> Flow[DocumentDeletedOut]:
    path = f"/v1/documents/{_doc_path(external_id)}"
    return _single(Call("DELETE", path, _model(DocumentDeletedOut), params=_as_connector(connector)))


def set_acl(
    external_id: str, principals: Iterable[str], public: bool, connector: str | None = None
) -> Flow[DocumentAclOut]:
    body = AclUpdate(principals=list(principals), public=public).model_dump(mode="json")
    path = f"/v1/documents/{_doc_path(external_id)}/acl"
    return _single(Call("PUT", path, _model(DocumentAclOut), json=body, params=_as_connector(connector)))


def set_groups(principal_id: str, groups: Iterable[str]) -> Flow[GroupsOut]:
    body = GroupsBody(groups=list(groups)).model_dump(mode="json")
    path = f"/v1/principals/{quote(principal_id, safe=':')}/groups"
    return _single(Call("PUT", path, _model(GroupsOut), json=body))


def _reader_params(as_principal: str | None) -> dict[str, str | int] | None:
    return {"as_principal": as_principal} if as_principal is not None else None


def chunk(chunk_id: str, as_principal: str | None) -> Flow[ChunkOut]:
    path = f"/v1/chunks/{quote(chunk_id, safe='')}"
    return _single(Call("GET", path, _model(ChunkOut), params=_reader_params(as_principal)))


def document(external_id: str, as_principal: str | None) -> Flow[DocumentOut]:
    path = f"/v1/documents/{_doc_path(external_id)}"
    return _single(Call("GET", path, _model(DocumentOut), params=_reader_params(as_principal)))


def job(job_id: str) -> Flow[JobOut]:
    return _single(Call("GET", f"/v1/jobs/{quote(job_id, safe='')}", _model(JobOut)))


def jobs(state: str | None, limit: int) -> Flow[list[JobOut]]:
    params: dict[str, str | int] = {"limit": limit} | ({"state": state} if state else {})
    return _single(Call("GET", "/v1/jobs", _models(JobOut), params=params))


def cancel(job_id: str) -> Flow[JobOut]:
    return _single(Call("POST", f"/v1/jobs/{quote(job_id, safe='')}:cancel", _model(JobOut)))


def retrieve(
    query: str,
    *,
    top_k: int | None,
    mode: Literal["hybrid", "dense", "lexical"],
    filters: FiltersIn | Mapping[str, Any] | None,
    rerank: bool | None,
    max_context_tokens: int | None,
    expand: Literal["none", "parent"],
    as_principal: str | None,
    fusion: FusionIn | Mapping[str, Any] | None = None,
    language: str | None = None,
) -> Flow[RetrieveOut]:
    # Unset limits are left out so the server's configured defaults apply.
    body: dict[str, Any] = {"query": query, "mode": mode, "expand": expand}
    optional = {"top_k": top_k, "rerank": rerank, "max_context_tokens": max_context_tokens}
    body |= {k: v for k, v in optional.items() if v is not None}
    if as_principal is not None:
        body["as_principal"] = as_principal
    if language is not None:
        body["language"] = language
    if filters is not None:
        parsed = filters if isinstance(filters, FiltersIn) else FiltersIn.model_validate(filters)
        body["filters"] = parsed.model_dump(mode="json", exclude_defaults=True)
    if fusion is not None:
        chosen = fusion if isinstance(fusion, FusionIn) else FusionIn.model_validate(fusion)
        body["fusion"] = chosen.model_dump(mode="json", exclude_none=True)
    return _single(Call("POST", "/v1/retrieve", _model(RetrieveOut), json=body))


def feedback(body: FeedbackIn) -> Flow[FeedbackOut]:
    payload = body.model_dump(mode="json", exclude_none=True)
    return _single(Call("POST", "/v1/feedback", _model(FeedbackOut), json=payload))


def connector_state(name: str) -> Flow[ConnectorStateOut]:
    return _single(Call("GET", f"/v1/connectors/{quote(name, safe='')}/state", _model(ConnectorStateOut)))


def save_connector_state(name: str, update: ConnectorStateUpdate) -> Flow[ConnectorStateSaved]:
    path = f"/v1/connectors/{quote(name, safe='')}/state"
    body = update.model_dump(mode="json", exclude_defaults=True)
    return _single(Call("PATCH", path, _model(ConnectorStateSaved), json=body))


def reset_connector_state(name: str) -> Flow[ConnectorStateOut]:
    path = f"/v1/connectors/{quote(name, safe='')}/state"
    return _single(Call("DELETE", path, _model(ConnectorStateOut)))


# --- flows of several calls --------------------------------------------------------------------


@dataclass(slots=True)
class LimitsCache:
    """The server's limits, asked once per client (``GET /v1/me``)."""

    value: LimitsOut | None = None


def limits(cache: LimitsCache) -> Flow[LimitsOut]:
    if cache.value is None:
        answer = yield from me()
        cache.value = answer.limits
    return cache.value


@dataclass(frozen=True, slots=True)
class PushResult:
    """What a push did over all its batches; a rejection's ``index`` is into the documents
    given to ``push``, not into one batch."""

    job_ids: list[str]
    accepted: int
    rejections: list[Rejection] = field(default_factory=list)
    # Accepted documents to look at, such as ``no_readers`` (an ACL that names nobody).
    warnings: list[PushWarning] = field(default_factory=list)

    @property
    def job_id(self) -> str | None:
        """The only job's id (an upload makes one), or the first of several; ``None`` if none
        was made. Kept for callers of ``upload()``, which answered ``PushResponse`` before."""
        return self.job_ids[0] if self.job_ids else None


def _encode(documents: Iterable[DocumentIn | Mapping[str, Any]]) -> list[tuple[DocumentIn, bytes]]:
    out = []
    for doc in documents:
        parsed = doc if isinstance(doc, DocumentIn) else DocumentIn.model_validate(doc)
        out.append((parsed, parsed.model_dump_json(exclude_defaults=True).encode()))
    return out


def plan_batches(
    encoded: Sequence[tuple[DocumentIn, bytes]], limits: LimitsOut
) -> tuple[list[list[int]], list[Rejection]]:
    """Indexes of ``encoded`` in batches within the server's count and body-size limits, and
    the documents no batch can carry (larger than a whole body: send those with upload)."""
    budget = limits.max_body_bytes - _ENVELOPE_BYTES
    batches: list[list[int]] = []
    too_large: list[Rejection] = []
    current: list[int] = []
    size = 0
    for index, (doc, body) in enumerate(encoded):
        if len(body) + 1 > budget:
            message = f"document encodes to {len(body)} bytes, over the {limits.max_body_bytes}-byte body"
            too_large.append(
                Rejection(
                    index=index,
                    external_id=doc.external_id,
                    code="payload_too_large",
                    message=message + " limit; send it with upload()",
                )
            )
            continue
        if current and (len(current) >= limits.max_batch_documents or size + len(body) + 1 > budget):
            batches.append(current)
            current, size = [], 0
        current.append(index)
        size += len(body) + 1
    if current:
        batches.append(current)
    return batches, too_large


def _batch_answer(response: httpx.Response) -> PushResponse:
    """A batch's answer; one whose every document was rejected (a 422) is that batch's
    rejections, not an error, so the other batches' jobs of the same push are not lost."""
    if response.is_success:
        return PushResponse.model_validate_json(response.content)
    try:
        error = ErrorBody.model_validate_json(response.content).error
    except ValueError:
        error = None
    if error is None or error.code != "all_documents_rejected" or not error.rejections:
        raise from_response(response, retry_statuses=frozenset())
    rejections = [Rejection.model_validate(r.model_dump()) for r in error.rejections]
    return PushResponse(job_id=None, accepted=0, rejections=rejections)


def push(
    documents: Iterable[DocumentIn | Mapping[str, Any]], cache: LimitsCache, connector: str | None = None
) -> Flow[PushResult]:
    """Send ``documents`` in as many batches as the server's limits need. Safe to retry: the
    server skips a document whose content hash equals its current version's."""
    encoded = _encode(documents)
    server = yield from limits(cache)
    batches, rejections = plan_batches(encoded, server)
    job_ids: list[str] = []
    warnings: list[PushWarning] = []
    accepted = 0
    for batch in batches:
        body = b'{"documents":[' + b",".join(encoded[i][1] for i in batch) + b"]}"
        answer: PushResponse = yield Call(
            "POST",
            "/v1/documents",
            _batch_answer,
            content=body,
            params=_as_connector(connector),
            accept=frozenset({422}),
        )
        if answer.job_id is not None:
            job_ids.append(answer.job_id)
        accepted += answer.accepted
        rejections += [r.model_copy(update={"index": batch[r.index]}) for r in answer.rejections]
        warnings += [w.model_copy(update={"index": batch[w.index]}) for w in answer.warnings]
    return PushResult(
        job_ids=job_ids,
        accepted=accepted,
        rejections=sorted(rejections, key=lambda r: r.index),
        warnings=sorted(warnings, key=lambda w: w.index),
    )


def upload(
    path: Path,
    *,
    external_id: str | None,
    mime_type: str | None,
    title: str | None,
    metadata: Mapping[str, Any] | None,
    acl: AclIn | None,
    connector: str | None = None,
) -> Flow[PushResult]:
    """One file as multipart, streamed from disk (for files over the JSON body limit). Without
    ``mime_type`` the suffix's type is sent when it is one the server parses; otherwise none,
    and the server detects it from the content (or answers ``unsupported_type``)."""
    mime = mime_type or guess_mime(path)
    fields = {
        "external_id": external_id or path.name,
        "metadata": json.dumps(dict(metadata or {}), allow_nan=False),
        "acl": (acl or AclIn()).model_dump_json(),
    }
    fields |= ({"mime_type": mime} if mime else {}) | ({"title": title} if title is not None else {})
    with path.open("rb") as stream:
        files = {"file": (path.name, stream, mime or "application/octet-stream")}
        call = Call(
            "POST",
            "/v1/documents:upload",
            _model(PushResponse),
            files=files,
            data=fields,
            params=_as_connector(connector),
        )
        answer: PushResponse = yield call
    return PushResult(
        job_ids=[answer.job_id] if answer.job_id else [],
        accepted=answer.accepted,
        rejections=answer.rejections,
        warnings=answer.warnings,
    )


def guess_mime(path: Path) -> str | None:
    """The MIME type of ``path`` by suffix, if it is one the server parses."""
    mime = mime_for_name(path.name)
    return mime if mime in MIME_TYPES else None


def wait(
    job_id: str, *, timeout: float, poll: float, on_progress: Callable[[JobOut], None] | None
) -> Flow[JobOut]:
    """Poll the job until it ends, calling ``on_progress`` with each answer; polls back off
    from ``poll`` to 1 s. Raises ``RaglineError("timeout")`` if it has not ended in time."""
    deadline = time.monotonic() + timeout
    pause = poll
    while True:
        current = yield from job(job_id)
        if on_progress is not None:
            on_progress(current)
        if current.state in TERMINAL_STATES:
            return current
        if time.monotonic() >= deadline:
            raise RaglineError("timeout", f"job {job_id} is still {current.state} after {timeout}s")
        yield Sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(1.0, pause * 1.5)
