"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api.deps import PoolDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(request: Request, pool: PoolDep) -> JSONResponse:
    """Ready when the database answers and the search indexes are loaded."""
    checks: dict[str, str] = {}
    try:
        with pool.connection(timeout=2.0) as conn:
            conn.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # any failure means not ready; the reason is in the body
        checks["database"] = f"unavailable: {type(exc).__name__}"
    search = getattr(request.app.state, "search", None)
    checks["indexes"] = search.readiness() if search is not None else "not configured"
    ready = all(v in ("ok", "not configured") for v in checks.values())
    return JSONResponse(
        {"status": "ready" if ready else "not_ready", "checks": checks}, status_code=200 if ready else 503
    )
