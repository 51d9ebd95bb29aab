"""``POST /v1/feedback``: relevance feedback on a retrieve's results (thumbs, clicks, grades).

Stored per tenant with the principal who gave it; the query text only when the deployment
stores query text. A chunk or document the caller cannot read (another tenant's, deleted,
behind an ACL) is answered as not found, exactly like one that does not exist.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.deps import PoolDep, QueryPrincipal, SettingsDep
from api.errors import error_responses
from authz.acl import build_acl_filter
from authz.principals import KeyAuthenticator
from catalog import audit
from catalog import feedback as repo
from core.errors import NotFoundError
from ragline_client.models import FeedbackIn, FeedbackOut

router = APIRouter(prefix="/v1", tags=["retrieve"])


@router.post("/feedback", response_model=FeedbackOut, responses=error_responses(401, 403, 404, 413, 422, 429))
def post_feedback(
    body: FeedbackIn, request: Request, principal: QueryPrincipal, pool: PoolDep, settings: SettingsDep
) -> FeedbackOut:
    """Record a judgement of one result (``chunk_id``) or document (``external_id``)."""
    auth: KeyAuthenticator = request.app.state.auth
    readers = sorted(build_acl_filter(auth.with_current_groups(principal).principal).readers)
    tenant = principal.tenant_id
    with pool.connection() as conn, conn.transaction():
        if body.chunk_id is not None:
            doc_id = repo.readable_chunk(conn, tenant_id=tenant, readers=readers, chunk_id=body.chunk_id)
        else:
            assert body.external_id is not None
            doc_id = repo.readable_document(
                conn, tenant_id=tenant, readers=readers, external_id=body.external_id
            )
        if doc_id is None:
            raise NotFoundError("no such chunk or document")
        store = settings.audit.store_query_text
        query = repo.logged_query(conn, tenant_id=tenant, request_id=body.request_id) if store else None
        feedback_id = repo.record(
            conn,
            tenant_id=tenant,
            principal_id=principal.principal_id,
            request_id=body.request_id,
            doc_id=doc_id,
            chunk_id=body.chunk_id,
            grade=body.grade,
            query=query,
        )
        audit.record(
            conn,
            actor=principal.principal_id,
            action="feedback.record",
            tenant_id=tenant,
            target=body.request_id,
            details={
                "feedback_id": feedback_id,
                "grade": body.grade,
                "by": "chunk" if body.chunk_id else "document",
                "via": "api",
            },
        )
    return FeedbackOut(feedback_id=feedback_id, grade=body.grade, query_stored=query is not None)
