"""The connector push API: documents in, jobs out; deletes and ACL changes."""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, File, Form, Query, UploadFile, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from api.deps import AdmittedIngest, IngestPrincipal, PoolDep, RunnerDep, SettingsDep
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
from core import validation
from core.errors import BatchRejectedError, InvalidInputError, PayloadTooLargeError, UnsupportedTypeError
from core.records import Acl
from core.settings import Settings
from ingest.parse import detect_mime
from services import ingest as service
from services.caller import Caller
from services.ingest import NewItem
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


def _validate_items(raw: list[object], limit: int) -> tuple[list[NewItem], list[Rejection]]:
    items: list[NewItem] = []
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


def _new_item(doc: DocumentIn, content: bytes, connector: str | None) -> NewItem:
    return NewItem(
        external_id=doc.external_id,
        mime_type=doc.effective_mime,
        title=doc.title,
        metadata=doc.metadata,
        acl=Acl(tuple(sorted(set(doc.acl.principals))), doc.acl.public),
        payload=content,
        byte_size=len(content),
        connector=connector,
    )


def _rejection_of(refusal: service.Refusal, index: int) -> Rejection:
    return Rejection(index=index, external_id=refusal.external_id, code=refusal.code, message=refusal.message)


def _no_reader_warnings(indexed: list[tuple[int, NewItem]]) -> list[PushWarning]:
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


@router.post(
    "/documents",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=PushResponse,
    responses=error_responses(401, 403, 429, 413, 422),
)
def push_documents(
    body: PushRequest,
    principal: AdmittedIngest,
    pool: PoolDep,
    settings: SettingsDep,
    runner: RunnerDep,
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
    if not items:
        raise _all_rejected(rejections)
    with pool.connection() as conn:
        pushed = service.push(
            conn,
            caller=Caller(principal.principal_id, "api"),
            tenant_id=principal.tenant_id,
            items=items,
            connector=connector,
            policy=queue_policy(settings),
            runner=runner,
        )
    rejections += [
        _rejection_of(pushed.refused[i.external_id], n) for n, i in indexed if i.external_id in pushed.refused
    ]
    rejections.sort(key=lambda r: r.index)
    if pushed.job_id is None:
        raise _all_rejected(rejections)
    warnings = _no_reader_warnings([(n, i) for n, i in indexed if i.external_id not in pushed.refused])
    return PushResponse(
        job_id=str(pushed.job_id), accepted=len(pushed.accepted), rejections=rejections, warnings=warnings
    )


def _all_rejected(rejections: list[Rejection]) -> BatchRejectedError:
    return BatchRejectedError(
        f"all {len(rejections)} documents were rejected", rejections=[r.model_dump() for r in rejections]
    )


@router.post(
    "/documents:upload",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=PushResponse,
    responses=error_responses(400, 401, 403, 429, 413, 422),
)
def upload_document(
    principal: IngestPrincipal,
    pool: PoolDep,
    settings: SettingsDep,
    runner: RunnerDep,
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
    staged, mime = _stage(file, declared, settings)
    item = dataclasses.replace(
        _new_item(doc.model_copy(update={"mime_type": mime}), b"", connector),
        payload=None,
        payload_path=str(staged.resolve()),
        byte_size=staged.stat().st_size,
    )
    with pool.connection() as conn:
        pushed = service.upload(
            conn,
            caller=Caller(principal.principal_id, "api"),
            tenant_id=principal.tenant_id,
            item=item,
            connector=connector,
            policy=queue_policy(settings),
            runner=runner,
        )
    if pushed.job_id is None:
        raise BatchRejectedError(
            "the document was rejected",
            rejections=[_rejection_of(r, 0).model_dump() for r in pushed.refused.values()],
        )
    return PushResponse(
        job_id=str(pushed.job_id), accepted=1, rejections=[], warnings=_no_reader_warnings([(0, item)])
    )


def _stage(file: UploadFile, declared: str | None, settings: Settings) -> tuple[Path, str]:
    """Copy the upload under the data dir and settle its type; nothing stays staged when the
    upload is too large or of a type the server does not parse."""
    staged = settings.upload_dir / uuid.uuid4().hex
    staged.parent.mkdir(parents=True, exist_ok=True)
    with staged.open("wb") as out:
        shutil.copyfileobj(file.file, out, length=1024 * 1024)
    if staged.stat().st_size > settings.api.max_upload_bytes:
        staged.unlink()
        raise PayloadTooLargeError(f"upload exceeds {settings.api.max_upload_bytes} bytes")
    mime = declared or _detected_type(staged, file)
    if mime not in MIME_TYPES:
        staged.unlink()
        raise UnsupportedTypeError(
            unsupported_type_message(mime) if mime else "cannot tell the type of the upload: send mime_type"
        )
    return staged, mime


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
        hidden = service.delete_document(
            conn,
            caller=Caller(principal.principal_id, "api"),
            tenant_id=principal.tenant_id,
            external_id=external_id,
            connector=connector,
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
    with pool.connection() as conn:
        service.set_acl(
            conn,
            caller=Caller(principal.principal_id, "api"),
            tenant_id=principal.tenant_id,
            external_id=external_id,
            acl=Acl(tuple(body.principals), body.public),
            connector=connector,
        )
    return DocumentAclOut(
        external_id=external_id, acl=AclView(principals=body.principals, public=body.public)
    )
