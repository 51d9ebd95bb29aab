"""``/docs`` works without internet: Swagger UI 5's assets come from the fastapi-swagger
package, served by the app itself, and "Authorize" knows the bearer scheme."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration


def test_docs_load_every_asset_from_the_app(foundation_client: TestClient) -> None:
    page = foundation_client.get("/docs")
    assert page.status_code == 200
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    assert assets, page.text
    for url in assets:
        assert not url.startswith(("http://", "https://", "//")), url
        asset = foundation_client.get(url)
        assert asset.status_code == 200 and len(asset.content) > 100, url
    assert "'/openapi.json'" in page.text or '"/openapi.json"' in page.text


def test_openapi_declares_the_bearer_scheme_on_every_authenticated_route(
    foundation_client: TestClient,
) -> None:
    doc = foundation_client.get("/openapi.json").json()
    schemes = doc["components"]["securitySchemes"]
    assert list(schemes.values()) == [
        {"type": "http", "scheme": "bearer", "description": schemes[next(iter(schemes))]["description"]}
    ]
    name = next(iter(schemes))
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if path in ("/healthz", "/readyz"):
                assert "security" not in op, path
            else:
                assert op["security"] == [{name: []}], (method, path)
