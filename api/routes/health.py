"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import OptionalSearchDep, PoolDep
from api.schemas import HealthOut, ReadyChecks, ReadyOut
from catalog.db import ping

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthOut)
def healthz() -> HealthOut:
    """The process is up."""
    return HealthOut(status="ok")


@router.get(
    "/readyz",
    response_model=ReadyOut,
    responses={
        503: {"model": ReadyOut, "description": "Not ready: a check failed; its reason is in `checks`."}
    },
)
def readyz(pool: PoolDep, search: OptionalSearchDep) -> JSONResponse:
    """Ready when the database answers and the search indexes are loaded."""
    try:
        with pool.connection(timeout=2.0) as conn:
            ping(conn)
        database = "ok"
    except Exception as exc:  # any failure means not ready; the reason is in the body
        database = f"unavailable: {type(exc).__name__}"
    checks = ReadyChecks(
        database=database, indexes=search.readiness() if search is not None else "not configured"
    )
    ready = all(v in ("ok", "not configured") for v in (checks.database, checks.indexes))
    out = ReadyOut(status="ready" if ready else "not_ready", checks=checks)
    return JSONResponse(out.model_dump(), status_code=200 if ready else 503)
