"""``POST /v1/feedback``: relevance feedback on a retrieve's results (thumbs, clicks, grades).

Stored per tenant with the principal who gave it; the query text only when the deployment
stores query text, and only from the caller's own retrieve under ``request_id`` (request ids
may be the client's own ``X-Request-ID``: an id someone else used binds no query). A chunk
or document the caller cannot read (another tenant's, deleted, behind an ACL) is answered as
not found, exactly like one that does not exist.
"""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import KeyAuthDep, PoolDep, QueryPrincipal, SettingsDep
from api.errors import error_responses
from ragline_client.models import FeedbackIn, FeedbackOut
from services import access, tenants
from services.caller import Caller

router = APIRouter(prefix="/v1", tags=["retrieve"])


@router.post("/feedback", response_model=FeedbackOut, responses=error_responses(401, 403, 404, 413, 422, 429))
def post_feedback(
    body: FeedbackIn, principal: QueryPrincipal, auth: KeyAuthDep, pool: PoolDep, settings: SettingsDep
) -> FeedbackOut:
    """Record a judgement of one result (``chunk_id``) or document (``external_id``), as the
    caller or as the principal the judged retrieve was made for (``as_principal``)."""
    reader = access.judge_for(auth, principal, body.as_principal)
    with pool.connection() as conn:
        done = tenants.record_feedback(
            conn,
            Caller(principal.principal_id, "api"),
            reader,
            request_id=body.request_id,
            grade=body.grade,
            chunk_id=body.chunk_id,
            external_id=body.external_id,
            store_query_text=settings.audit.store_query_text,
        )
    return FeedbackOut(feedback_id=done.feedback_id, grade=done.grade, query_stored=done.query_stored)
