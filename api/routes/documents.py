"""The connector push API: documents in, jobs out; deletes and ACL changes."""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Query, Request, UploadFile, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from api.deps import AdmittedIngest, IngestPrincipal, PoolDep, SettingsDep
from api.errors import error_responses
from api.routes.connectors import CONNECTOR_NAME
from api.schemas import (
    MIME_TYPES,
    AclUpdate,
    AclView,
    DocumentAclOut,
    DocumentDeletedOut,
    DocumentIn,
    PushRequest,
    PushResponse,
    PushWarning,
    Rejection,
)
from catalog import audit
from catalog import documents as docs_repo
from catalog import jobs as jobs_repo
from core import validation
from core.errors import BatchRejectedError, InvalidInputError, PayloadTooLargeError, UnsupportedTypeError
from core.records import Acl
from ingest.parse import detect_mime
from jobs.operations import queue_ingest
from wiring import queue_policy

router = APIRouter(prefix="/v1", tags=["documents"])

# Set by a connector (the connector kit always sends it): the documents it pushes become its
# own, and it may delete or re-ACL only those; it may never overwrite another connector's.
ConnectorQuery = Annotated[
    str | None,
    Query(
        pattern=CONNECTOR_NAME,
        description="the pushing connector's name: it owns what it pushes and may delete, re-ACL"
        " or overwrite only its own documents (another's id is a per-document"
        " `owned_by_other_connector` rejection, or a 409 `not_owned_by_connector`)",
    ),
]


def _validate_items(raw: list[object], limit: int) -> tuple[list[jobs_repo.NewItem], list[Rejection]]:
    items: list[jobs_repo.NewItem] = []
    rejections: list[Rejection] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw):
        ext = entry.get("external_id") if isinstance(entry, dict) else None
        ext_str = validation.echo(ext) if isinstance(ext, str) else None
        try:
            doc = DocumentIn.model_validate(entry)
            content = doc.content()
        except (ValidationError, ValueError) as exc:
            code, message = _rejection(exc)
            rejections.append(Rejection(index=index, external_id=ext_str, code=code, message=message))
            continue
        if doc.external_id in seen:
            rejections.append(
                Rejection(
                    index=index,
                    external_id=doc.external_id,
                    code="duplicate_external_id",
                    message="external_id appears twice in this batch",
                )
            )
            continue
        if len(content) > limit:
            rejections.append(
                Rejection(
                    index=index,
                    external_id=doc.external_id,
                    code="payload_too_large",
                    message=f"document exceeds {limit} bytes",
                )
            )
            continue
        seen.add(doc.external_id)
        items.append(_new_item(doc, content, None))
    return items, rejections


def _rejection(exc: ValueError) -> tuple[str, str]:
    """The code and message of a document that failed validation; every part of the message
    is safe to encode (a field name or value may hold a lone surrogate)."""
    if not isinstance(exc, ValidationError):
        return "invalid_document", validation.echo(str(exc))
    errors = exc.errors(include_url=False)
    if [tuple(e["loc"]) for e in errors] == [("mime_type",)]:
        return "unsupported_type", unsupported_type_message(errors[0]["input"])
    text = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors)
    return "invalid_document", validation.echo(text)


def unsupported_type_message(mime: object) -> str:
    shown = validation.echo(mime[:100]) if isinstance(mime, str) else repr(mime)[:100]
    return f"unsupported type {shown!r}: the server parses {', '.join(MIME_TYPES)}"


def _new_item(doc: DocumentIn, content: bytes, connector: str | None) -> jobs_repo.NewItem:
    return jobs_repo.NewItem(
        external_id=doc.external_id,
        mime_type=doc.effective_mime,
        title=doc.title,
        metadata=doc.metadata,
        acl=Acl(tuple(sorted(set(doc.acl.principals))), doc.acl.public),
        payload=content,
        byte_size=len(content),
        connector=connector,
    )


def _refuse_foreign(
    pool: Any, tenant_id: str, connector: str | None, items: list[jobs_repo.NewItem]
) -> tuple[list[jobs_repo.NewItem], dict[str, Rejection]]:
    """Split off the items another connector owns (the job checks again under the row lock)."""
    if connector is None or not items:
        return items, {}
    with pool.connection() as conn:
        foreign = docs_repo.foreign_documents(
            conn, tenant_id=tenant_id, external_ids=[i.external_id for i in items], connector=connector
        )
    refused = {
        ext: Rejection(
            index=-1,
            external_id=ext,
            code=docs_repo.FOREIGN_CODE,
            message=docs_repo.foreign_message(ext, owner),
        )
        for ext, owner in foreign.items()
    }
    return [i for i in items if i.external_id not in refused], refused


def _no_reader_warnings(indexed: list[tuple[int, jobs_repo.NewItem]]) -> list[PushWarning]:
    return [
        PushWarning(
            index=index,
            external_id=item.external_id,
            code="no_readers",
            message="the ACL names no reader and is not public: no query key can read this document"
            " until PUT /v1/documents/{external_id}/acl names readers",
        )
        for index, item in indexed
        if not item.acl.principals and not item.acl.public
    ]


def _submit(request: Request, pool: Any, tenant_id: str, actor: str, items: list[jobs_repo.NewItem]) -> str:
    policy = queue_policy(request.app.state.settings)
    with pool.connection() as conn:
        job_id = queue_ingest(
            conn, tenant_id=tenant_id, actor=actor, via="api", items=items, policy=policy
        ).job_id
    runner = getattr(request.app.state, "runner", None)
    if runner is not None:
        runner.submit(job_id)
    return str(job_id)


@router.post(
    "/documents",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=PushResponse,
    responses=error_responses(401, 403, 429, 413, 422),
)
def push_documents(
    body: PushRequest,
    request: Request,
    principal: AdmittedIngest,
    pool: PoolDep,
    settings: SettingsDep,
    connector: ConnectorQuery = None,
) -> PushResponse:
    """Queue a batch; invalid items are rejected one by one, the rest go into one job.

    A batch whose every document is rejected is a 422 (``all_documents_rejected``) listing
    the rejections in ``error.rejections``; no job is created. A document nobody can read
    (no ACL principals, not public) is accepted with a ``no_readers`` warning."""
    if len(body.documents) > settings.api.max_batch_documents:
        raise InvalidInputError(f"at most {settings.api.max_batch_documents} documents per batch")
    items, rejections = _validate_items(body.documents, settings.api.max_body_bytes)
    rejected = {r.index for r in rejections}
    indexed = list(zip((i for i in range(len(body.documents)) if i not in rejected), items, strict=True))
    items = [dataclasses.replace(item, connector=connector) for item in items]
    items, refused = _refuse_foreign(pool, principal.tenant_id, connector, items)
    for index, item in indexed:
        if item.external_id in refused:
            rejections.append(refused[item.external_id].model_copy(update={"index": index}))
    rejections.sort(key=lambda r: r.index)
    if not items:
        raise BatchRejectedError(
            f"all {len(rejections)} documents were rejected",
            rejections=[r.model_dump() for r in rejections],
        )
    job_id = _submit(request, pool, principal.tenant_id, principal.principal_id, items)
    warnings = _no_reader_warnings([(i, it) for i, it in indexed if it.external_id not in refused])
    return PushResponse(job_id=job_id, accepted=len(items), rejections=rejections, warnings=warnings)


@router.post(
    "/documents:upload",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=PushResponse,
    responses=error_responses(400, 401, 403, 429, 413, 422),
)
def upload_document(
    request: Request,
    principal: IngestPrincipal,
    pool: PoolDep,
    settings: SettingsDep,
    file: Annotated[UploadFile, File()],
    external_id: Annotated[str, Form(min_length=1, max_length=512)],
    mime_type: Annotated[
        str | None,
        Form(
            max_length=200,
            description="Optional: detected from the content (PDF magic), the file name's suffix,"
            " the part's Content-Type or, for text, plain text.",
        ),
    ] = None,
    title: Annotated[str | None, Form(max_length=1000)] = None,
    metadata: Annotated[str, Form(max_length=100_000, description="a JSON object")] = "{}",
    acl: Annotated[str, Form(max_length=100_000, description="a JSON object like AclIn")] = "{}",
    connector: ConnectorQuery = None,
) -> PushResponse:
    """A large file, spooled to disk by the multipart parser and staged under the data dir.

    A type the server does not parse is a 422 ``unsupported_type``."""
    declared = _declared_type(mime_type)
    doc = _upload_fields(external_id=external_id, title=title, metadata=metadata, acl=acl)
    staged = settings.upload_dir / uuid.uuid4().hex
    staged.parent.mkdir(parents=True, exist_ok=True)
    with staged.open("wb") as out:
        shutil.copyfileobj(file.file, out, length=1024 * 1024)
    size = staged.stat().st_size
    if size > settings.api.max_upload_bytes:
        staged.unlink()
        raise PayloadTooLargeError(f"upload exceeds {settings.api.max_upload_bytes} bytes")
    mime = declared or _detected_type(staged, file)
    if mime not in MIME_TYPES:
        staged.unlink()
        raise UnsupportedTypeError(
            unsupported_type_message(mime) if mime else "cannot tell the type of the upload: send mime_type"
        )
    item = dataclasses.replace(
        _new_item(doc.model_copy(update={"mime_type": mime}), b"", connector),
        payload=None,
        payload_path=str(staged.resolve()),
        byte_size=size,
    )
    kept, refused = _refuse_foreign(pool, principal.tenant_id, connector, [item])
    if not kept:
        staged.unlink()
        raise BatchRejectedError(
            "the document was rejected",
            rejections=[r.model_copy(update={"index": 0}).model_dump() for r in refused.values()],
        )
    job_id = _submit(request, pool, principal.tenant_id, principal.principal_id, [item])
    return PushResponse(job_id=job_id, accepted=1, rejections=[], warnings=_no_reader_warnings([(0, item)]))


def _declared_type(mime_type: str | None) -> str | None:
    if mime_type is None or not mime_type.strip():
        return None
    mime = mime_type.split(";", 1)[0].strip().lower()
    if mime not in MIME_TYPES:
        raise UnsupportedTypeError(unsupported_type_message(mime))
    return mime


def _detected_type(staged: Path, file: UploadFile) -> str | None:
    with staged.open("rb") as stream:
        head = stream.read(1024)
    return detect_mime(head, filename=file.filename, part_type=file.content_type)


def _upload_fields(*, external_id: str, title: str | None, metadata: str, acl: str) -> DocumentIn:
    """The upload's form fields as a document (its body is the staged file, its type set
    later); a bad field is a 422 whose ``details`` name it, as for a JSON body."""
    parsed: dict[str, object] = {"external_id": external_id, "title": title, "text": ""}
    for name, text in (("metadata", metadata), ("acl", acl)):
        try:
            parsed[name] = validation.parse_json(text, name)
        except InvalidInputError as exc:
            raise _form_error(((name,), exc.message, "value_error")) from None
    try:
        return DocumentIn.model_validate(parsed)
    except ValidationError as exc:
        errors = [(e["loc"], e["msg"], e["type"]) for e in exc.errors(include_url=False)]
        raise _form_error(*errors) from None


def _form_error(*errors: tuple[tuple[int | str, ...], str, str]) -> RequestValidationError:
    return RequestValidationError(
        [{"loc": ("body", *loc), "msg": validation.echo(msg), "type": kind} for loc, msg, kind in errors]
    )


@router.delete(
    "/documents/{external_id:path}",
    response_model=DocumentDeletedOut,
    responses=error_responses(401, 403, 429, 404, 409, 422),
)
def delete_document(
    external_id: str, principal: IngestPrincipal, pool: PoolDep, connector: ConnectorQuery = None
) -> DocumentDeletedOut:
    """Tombstones every chunk in the transaction that answers: no retrieval returns them after.
    With ``connector``, only a document that connector wrote (else 409 ``not_owned_by_connector``)."""
    validation.external_id(external_id)
    with pool.connection() as conn:
        hidden = docs_repo.delete_document(
            conn, tenant_id=principal.tenant_id, external_id=external_id, connector=connector
        )
        audit.record(
            conn,
            actor=principal.principal_id,
            action="document.delete",
            tenant_id=principal.tenant_id,
            target=external_id,
            details={"chunks": hidden, "via": "api"},
        )
    return DocumentDeletedOut(external_id=external_id, deleted=True, chunks_tombstoned=hidden)


@router.put(
    "/documents/{external_id:path}/acl",
    response_model=DocumentAclOut,
    responses=error_responses(401, 403, 409, 429, 404, 413, 422),
)
def put_acl(
    external_id: str,
    body: AclUpdate,
    principal: IngestPrincipal,
    pool: PoolDep,
    connector: ConnectorQuery = None,
) -> DocumentAclOut:
    """Replace a document's ACL; effective for retrieval from this response on. With
    ``connector``, only a document that connector wrote (else 409 ``not_owned_by_connector``)."""
    validation.external_id(external_id)
    acl = Acl(tuple(body.principals), body.public)
    with pool.connection() as conn:
        docs_repo.set_acl(
            conn, tenant_id=principal.tenant_id, external_id=external_id, acl=acl, connector=connector
        )
        audit.record(
            conn,
            actor=principal.principal_id,
            action="document.acl",
            tenant_id=principal.tenant_id,
            target=external_id,
            details={"principals": body.principals, "public": body.public, "via": "api"},
        )
    return DocumentAclOut(
        external_id=external_id, acl=AclView(principals=body.principals, public=body.public)
    )
