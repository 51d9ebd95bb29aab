"""``/docs`` without internet: Swagger UI 5 from the ``fastapi-swagger`` wheel, served here.

FastAPI's default page loads its script and stylesheet from a CDN and renders blank
offline. FastAPI emits OpenAPI 3.1.0, which Swagger UI reads from 5.0 on (4.x shows "Unable
to render this definition"); the ``fastapi-swagger`` wheel ships Swagger UI 5's built
assets (Apache-2.0) in its ``resources`` folder. Only those files are used, none of the
package's code, so the page stays FastAPI's own ``get_swagger_ui_html``.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"


def swagger_ui_dir() -> Path:
    """The folder holding ``swagger-ui-bundle.js``, ``swagger-ui.css`` and the favicon."""
    return Path(str(files("fastapi_swagger") / "resources"))


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` and its assets; call on an app built with ``docs_url=None``."""
    app.mount(ASSETS, StaticFiles(directory=swagger_ui_dir()), name="swagger-ui-assets")
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
