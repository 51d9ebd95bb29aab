"""``/console``: the operator console, a static page and its script and stylesheet.

The files ship in the package (``api/console/``) and are read once when the router is built;
no build step. The page signs in with an admin API key kept in session storage and calls the
JSON API with it as the Bearer header (no cookies, so no CSRF surface). Every answer carries a
strict Content-Security-Policy: scripts and styles only from this origin, no inline code.
URLs in the page are relative, so it works behind any host or path prefix.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from core.errors import NotFoundError
from core.limits import RetrieveLimits

ASSETS = Path(__file__).resolve().parents[1] / "console"
_TYPES = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self';"
    " object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


def build_router(limits: RetrieveLimits) -> APIRouter:
    """The console's page and assets; the page's query boxes take this app's query limit."""
    # Filled in here, not written in the page: the API's limit is a setting (api.max_query_chars).
    page = (ASSETS / "index.html").read_bytes().replace(b"{max_query_chars}", b"%d" % limits.max_query_chars)
    assets = {name: (ASSETS / name).read_bytes() for name in _TYPES}
    router = APIRouter(include_in_schema=False)

    @router.get("/console")
    def console_redirect() -> RedirectResponse:
        # Relative, so a proxy's path prefix survives; asset URLs resolve under /console/.
        return RedirectResponse("console/", status_code=308, headers=SECURITY_HEADERS)

    @router.get("/console/")
    def console_page() -> Response:
        return Response(page, media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)

    @router.get("/console/assets/{name}")
    def console_asset(name: str) -> Response:
        if name not in assets:
            raise NotFoundError(f"no console asset {name}")
        return Response(assets[name], media_type=_TYPES[name], headers=SECURITY_HEADERS)

    return router
