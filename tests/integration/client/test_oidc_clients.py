"""The README's "End-user identity (OIDC)" section run as written: its
``RAGLINE_OIDC__ISSUERS`` (pointed at a test identity provider on loopback) configures a real
server, and its retriever example runs with an end user's token; ``ragline-mcp`` over stdio
with ``RAGLINE_API_TOKEN`` searches and fetches as that user."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from api.app import create_app
from api.services import ingest_hook, search_hook
from testkit.server import app_in_thread
from tests.integration.api.conftest import full_settings
from tests.integration.api.oidc_idp import Idp, running_idp
from tests.integration.client.conftest import LiveServer
from tests.integration.client.frameworks import require, seed

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]
SECTION = (REPO / "README.md").read_text().split("## End-user identity (OIDC)", 1)[1].split("\n## ", 1)[0]


@pytest.fixture
def idp() -> Iterator[Idp]:
    with running_idp("https://login.example.com/realms/acme") as provider:
        yield provider


@pytest.fixture
def oidc_server(
    db_url: str, tmp_path: Path, embedder: Any, idp: Idp, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LiveServer]:
    """A live server configured by the README's ``export RAGLINE_OIDC__ISSUERS='...'``."""
    value = re.search(r"export RAGLINE_OIDC__ISSUERS='(.*?)'", SECTION, re.S)
    assert value, "the README section sets RAGLINE_OIDC__ISSUERS"
    issuers = json.loads(value.group(1))
    assert issuers[0]["issuer"] == idp.issuer
    issuers[0]["jwks_url"] = idp.jwks_url  # the only change: the test's JWKS endpoint
    # The example's groups are the catalog's (``group:eng``): an explicit mapping (issue 43).
    # A no-op once the README's example says so; the assertion keeps the two honest.
    issuers[0].setdefault("map_groups", True)
    assert issuers[0]["map_groups"] is True
    monkeypatch.setenv("RAGLINE_OIDC__ISSUERS", json.dumps(issuers))
    settings = full_settings(db_url, tmp_path)
    assert settings.oidc.issuers[0].groups_claim == "groups"
    app = create_app(
        settings, hooks=[partial(ingest_hook, embedder=embedder), partial(search_hook, embedder=embedder)]
    )
    with app_in_thread(app) as url:
        app.state.runner.config = dataclasses.replace(app.state.runner.config, use_ray=False)
        yield LiveServer(url=url, db_url=db_url)


def test_readme_oidc_example_runs(
    oidc_server: LiveServer, idp: Idp, capsys: pytest.CaptureFixture[str]
) -> None:
    require("langchain_core")
    seed(oidc_server)
    code = (
        SECTION.split("```python\n", 1)[1]
        .split("```", 1)[0]
        .replace("http://localhost:8000", oidc_server.url)
    )
    # carol is in group:eng by her token alone (the catalog has no groups for her).
    exec(compile(code, "README.md", "exec"), {"user_token": idp.token("carol", kid="k1", groups=["eng"])})
    assert capsys.readouterr().out.strip() == "['keys', 'lunch']"
    exec(compile(code, "README.md", "exec"), {"user_token": idp.token("dave", kid="k1")})
    assert capsys.readouterr().out.strip() == "['lunch']"


def test_mcp_with_an_end_user_token(oidc_server: LiveServer, idp: Idp) -> None:
    require("mcp")
    from mcp import Client as McpClient
    from mcp import StdioServerParameters

    seed(oidc_server)

    def params(token: str) -> StdioServerParameters:
        env = {"RAGLINE_API_URL": oidc_server.url, "RAGLINE_API_TOKEN": token, "PYTHONPATH": str(REPO)}
        return StdioServerParameters(
            command=sys.executable, args=["-m", "ragline_client.mcp_server"], env=env
        )

    async def run() -> None:
        async with McpClient(params(idp.token("carol", kid="k1", groups=["eng"]))) as carol:
            found = await carol.call_tool("search", {"query": "rotate signing keys", "top_k": 5})
            assert "keys" in {p["external_id"] for p in found.structured_content["passages"]}
            assert not (await carol.call_tool("fetch", {"id": "keys"})).is_error
        async with McpClient(params(idp.token("dave", kid="k1"))) as dave:
            found = await dave.call_tool("search", {"query": "rotate signing keys", "top_k": 5})
            assert {p["external_id"] for p in found.structured_content["passages"]} == {"lunch"}
            assert (await dave.call_tool("fetch", {"id": "keys"})).is_error
        expired = idp.token("carol", kid="k1", groups=["eng"], exp=int(time.time()) - 3600)
        async with McpClient(params(expired)) as late:
            refused = await late.call_tool("search", {"query": "rotate signing keys"})
            said = getattr(refused.content[0], "text", "")  # a TextContent's
            assert refused.is_error and "401" in said and "expired" in said

    asyncio.run(run())
