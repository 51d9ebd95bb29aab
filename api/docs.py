"""``/docs`` without internet: Swagger UI from the ``swagger-ui-bundle`` wheel, served here.

FastAPI's default page loads its script and stylesheet from a CDN and renders blank
offline. The wheel ships Swagger UI's built assets (Apache-2.0, its licence is in the
wheel's metadata); the app serves them under ``/docs/assets``.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` and its assets; call on an app built with ``docs_url=None``."""
    from swagger_ui_bundle import swagger_ui_path

    app.mount(ASSETS, StaticFiles(directory=swagger_ui_path), name="swagger-ui-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API docs",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": True},
        )
