"""The connector push API: documents in, jobs out; deletes and ACL changes."""

from __future__ import annotations

import dataclasses
import json
import shutil
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Request, UploadFile, status
from pydantic import ValidationError

from api.deps import AdmittedIngest, IngestPrincipal, PoolDep, SettingsDep
from api.errors import error_responses
from api.schemas import (
    AclIn,
    AclUpdate,
    AclView,
    DocumentAclOut,
    DocumentDeletedOut,
    DocumentIn,
    PushRequest,
    PushResponse,
    Rejection,
)
from catalog import audit
from catalog import documents as docs_repo
from catalog import jobs as jobs_repo
from catalog import principals as principals_repo
from core import validation
from core.errors import BatchRejectedError, InvalidInputError, PayloadTooLargeError
from core.records import Acl

router = APIRouter(prefix="/v1", tags=["documents"])


def _validate_items(raw: list[dict], limit: int) -> tuple[list[jobs_repo.NewItem], list[Rejection]]:
    items: list[jobs_repo.NewItem] = []
    rejections: list[Rejection] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw):
        ext = entry.get("external_id") if isinstance(entry, dict) else None
        ext_str = ext if isinstance(ext, str) else None
        try:
            doc = DocumentIn.model_validate(entry)
            content = doc.content()
        except (ValidationError, ValueError) as exc:
            message = (
                "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
                if isinstance(exc, ValidationError)
                else str(exc)
            )
            rejections.append(
                Rejection(index=index, external_id=ext_str, code="invalid_document", message=message)
            )
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
        items.append(_new_item(doc, content))
    return items, rejections


def _new_item(doc: DocumentIn, content: bytes) -> jobs_repo.NewItem:
    return jobs_repo.NewItem(
        external_id=doc.external_id,
        mime_type=doc.effective_mime,
        title=doc.title,
        metadata=doc.metadata,
        acl=Acl(tuple(sorted(set(doc.acl.principals))), doc.acl.public),
        payload=content,
        byte_size=len(content),
    )


def _submit(request: Request, pool: Any, tenant_id: str, actor: str, items: list[jobs_repo.NewItem]) -> str:
    with pool.connection() as conn:
        principals_repo.ensure_tenant(conn, tenant_id=tenant_id)
        job_id = jobs_repo.create_job(conn, tenant_id=tenant_id, kind="ingest", items=items)
        audit.record(
            conn,
            actor=actor,
            action="ingest.push",
            tenant_id=tenant_id,
            target=str(job_id),
            details={"documents": len(items)},
        )
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
    body: PushRequest, request: Request, principal: AdmittedIngest, pool: PoolDep, settings: SettingsDep
) -> PushResponse:
    """Queue a batch; invalid items are rejected one by one, the rest go into one job.

    A batch whose every document is rejected is a 422 (``all_documents_rejected``) listing
    the rejections in ``error.rejections``; no job is created."""
    if len(body.documents) > settings.api.max_batch_documents:
        raise InvalidInputError(f"at most {settings.api.max_batch_documents} documents per batch")
    items, rejections = _validate_items(body.documents, settings.api.max_body_bytes)
    if not items:
        raise BatchRejectedError(
            f"all {len(rejections)} documents were rejected",
            rejections=[r.model_dump() for r in rejections],
        )
    job_id = _submit(request, pool, principal.tenant_id, principal.principal_id, items)
    return PushResponse(job_id=job_id, accepted=len(items), rejections=rejections)


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
    mime_type: Annotated[str, Form()],
    title: Annotated[str | None, Form(max_length=1000)] = None,
    metadata: Annotated[str, Form(max_length=100_000)] = "{}",
    acl: Annotated[str, Form(max_length=100_000)] = "{}",
) -> PushResponse:
    """A large file, spooled to disk by the multipart parser and staged under the data dir."""
    try:
        doc = DocumentIn.model_validate(
            {
                "external_id": external_id,
                "title": title,
                "content_base64": "",
                "mime_type": mime_type,
                "metadata": json.loads(metadata),
                "acl": AclIn.model_validate(json.loads(acl)).model_dump(),
            }
        )
    except (ValidationError, ValueError) as exc:
        raise InvalidInputError(f"invalid upload fields: {exc}") from exc
    staged = settings.upload_dir / uuid.uuid4().hex
    staged.parent.mkdir(parents=True, exist_ok=True)
    with staged.open("wb") as out:
        shutil.copyfileobj(file.file, out, length=1024 * 1024)
    size = staged.stat().st_size
    if size > settings.api.max_upload_bytes:
        staged.unlink()
        raise PayloadTooLargeError(f"upload exceeds {settings.api.max_upload_bytes} bytes")
    item = dataclasses.replace(
        _new_item(doc, b""), payload=None, payload_path=str(staged.resolve()), byte_size=size
    )
    job_id = _submit(request, pool, principal.tenant_id, principal.principal_id, [item])
    return PushResponse(job_id=job_id, accepted=1, rejections=[])


@router.delete(
    "/documents/{external_id:path}",
    response_model=DocumentDeletedOut,
    responses=error_responses(401, 403, 429, 404, 422),
)
def delete_document(external_id: str, principal: IngestPrincipal, pool: PoolDep) -> DocumentDeletedOut:
    """Tombstones every chunk in the transaction that answers: no retrieval returns them after."""
    validation.external_id(external_id)
    with pool.connection() as conn:
        hidden = docs_repo.delete_document(conn, tenant_id=principal.tenant_id, external_id=external_id)
        audit.record(
            conn,
            actor=principal.principal_id,
            action="document.delete",
            tenant_id=principal.tenant_id,
            target=external_id,
            details={"chunks": hidden},
        )
    return DocumentDeletedOut(external_id=external_id, deleted=True, chunks_tombstoned=hidden)


@router.put(
    "/documents/{external_id:path}/acl",
    response_model=DocumentAclOut,
    responses=error_responses(401, 403, 429, 404, 413, 422),
)
def put_acl(external_id: str, body: AclUpdate, principal: IngestPrincipal, pool: PoolDep) -> DocumentAclOut:
    """Replace a document's ACL; effective for retrieval from this response on."""
    validation.external_id(external_id)
    acl = Acl(tuple(body.principals), body.public)
    with pool.connection() as conn:
        docs_repo.set_acl(conn, tenant_id=principal.tenant_id, external_id=external_id, acl=acl)
        audit.record(
            conn,
            actor=principal.principal_id,
            action="document.acl",
            tenant_id=principal.tenant_id,
            target=external_id,
            details={"principals": body.principals, "public": body.public},
        )
    return DocumentAclOut(
        external_id=external_id, acl=AclView(principals=body.principals, public=body.public)
    )
