"""``ragline-mcp`` driven by the MCP SDK's own client, over stdio (the server as a
subprocess) and over streamable HTTP on loopback, against a real ragline server: search with
citations, fetch of a chunk and of a document, and documents the user may not read refused
as if absent. Also the fetch endpoints behind the ``fetch`` tool, through the Python client.
One server for the module, a tenant per test (``live_tenant``)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragline_client import Client, RaglineError
from testkit.ports import free_port
from tests.integration.client.conftest import LiveServer
from tests.integration.client.frameworks import require, seed

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]
QUERY = "how do I rotate signing keys?"


def _salary_chunk(server: LiveServer) -> str:
    with Client(server.url, server.key("query", principal="user:hr-lead")) as hr:
        return hr.retrieve("salary bands", top_k=1).results[0].chunk_id


def test_fetch_endpoints_check_the_acl(live_tenant: LiveServer) -> None:
    seed(live_tenant)
    salary_chunk = _salary_chunk(live_tenant)
    with Client(live_tenant.url, live_tenant.key("query", principal="user:alice")) as alice:
        hit = alice.retrieve(QUERY, top_k=1).results[0]
        chunk = alice.chunk(hit.chunk_id)
        assert (chunk.chunk_id, chunk.text, chunk.document_external_id) == (hit.chunk_id, hit.text, "keys")
        assert chunk.section_path == hit.section_path and chunk.metadata["team"] == "infra"
        doc = alice.document("keys")
        assert doc.title == "Key rotation" and not doc.truncated
        assert hit.chunk_id in {c.chunk_id for c in doc.chunks}
        # Forbidden and absent answer alike: 404, nothing of the document in the body.
        for call in (lambda: alice.chunk(salary_chunk), lambda: alice.document("salaries")):
            with pytest.raises(RaglineError) as denied:
                call()
            assert denied.value.status == 404 and "salary" not in denied.value.message.lower()
        with pytest.raises(RaglineError) as absent:
            alice.document("no-such-document")
        assert absent.value.status == 404
    # Another tenant's key never reads this tenant's chunks.
    with Client(live_tenant.url, live_tenant.key("query", tenant="globex", principal="user:alice")) as other:
        with pytest.raises(RaglineError) as foreign:
            other.chunk(hit.chunk_id)
        assert foreign.value.status == 404
    # An ingest-only key lacks the query role; deleted documents are gone from fetch too.
    with Client(live_tenant.url, live_tenant.key("ingest")) as ingest:
        with pytest.raises(RaglineError) as no_role:
            ingest.document("keys")
        assert no_role.value.status == 403
        ingest.delete("keys")
    with Client(live_tenant.url, live_tenant.key("query", principal="user:alice")) as alice:
        with pytest.raises(RaglineError) as deleted:
            alice.chunk(hit.chunk_id)
        assert deleted.value.status == 404


async def _exercise(mcp: Any, salary_chunk: str) -> None:
    tools = {t.name for t in (await mcp.list_tools()).tools}
    assert tools == {"search", "fetch"}
    found = await mcp.call_tool("search", {"query": QUERY, "top_k": 3, "max_context_tokens": 200})
    assert not found.is_error, found.content
    out = found.structured_content
    top = out["passages"][0]
    assert top["external_id"] == "keys" and top["citation"].startswith("Key rotation, ")
    assert "salaries" not in {p["external_id"] for p in out["passages"]}
    assert out["context"] and out["citations"] and out["citations"][0]["passages"]
    filtered = await mcp.call_tool("search", {"query": QUERY, "filters": {"metadata": {"team": "nobody"}}})
    assert filtered.structured_content["passages"] == []
    chunk = await mcp.call_tool("fetch", {"id": top["id"]})
    assert chunk.structured_content["kind"] == "chunk" and chunk.structured_content["text"] == top["text"]
    doc = await mcp.call_tool("fetch", {"id": "keys"})
    assert (
        doc.structured_content["kind"] == "document"
        and "retire the old signing key" in doc.structured_content["text"]
    )
    for forbidden in ({"id": "salaries"}, {"id": salary_chunk}, {"id": salary_chunk, "kind": "chunk"}):
        refused = await mcp.call_tool("fetch", forbidden)
        assert refused.is_error and "not_found" in refused.content[0].text
        assert "salary" not in refused.content[0].text.lower()


def test_mcp_over_stdio(live_tenant: LiveServer) -> None:
    require("mcp")
    from mcp import Client as McpClient
    from mcp import StdioServerParameters

    seed(live_tenant)
    salary_chunk = _salary_chunk(live_tenant)
    key = live_tenant.key("query", principal="user:alice")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ragline_client.mcp_server"],
        env={"RAGLINE_API_URL": live_tenant.url, "RAGLINE_API_KEY": key, "PYTHONPATH": str(REPO)},
    )

    async def run() -> None:
        async with McpClient(params) as mcp:
            await _exercise(mcp, salary_chunk)

    asyncio.run(run())


@pytest.fixture
def mcp_http(live_tenant: LiveServer) -> Iterator[str]:
    """``ragline-mcp --transport http`` on a loopback port, with no configured key: every
    call must bring its user's bearer."""
    port = free_port()
    env = {**os.environ, "RAGLINE_API_URL": live_tenant.url, "PYTHONPATH": str(REPO)}
    env.pop("RAGLINE_API_KEY", None)
    env.pop("RAGLINE_API_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragline_client.mcp_server", "--transport", "http", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    said = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                    pytest.fail(f"ragline-mcp did not start: {said}")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_mcp_over_streamable_http_uses_the_callers_token(live_tenant: LiveServer, mcp_http: str) -> None:
    require("mcp")
    import httpx2
    from mcp import Client as McpClient
    from mcp.client.streamable_http import streamable_http_client

    seed(live_tenant)
    salary_chunk = _salary_chunk(live_tenant)
    alice = live_tenant.key("query", principal="user:alice")
    bob = live_tenant.key("query", principal="user:bob")

    def connect(token: str | None) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return McpClient(streamable_http_client(mcp_http, http_client=httpx2.AsyncClient(headers=headers)))

    async def run() -> None:
        async with connect(alice) as mcp:
            await _exercise(mcp, salary_chunk)
        # Bob (not in group:eng) asks the same server: his token, his documents only.
        async with connect(bob) as mcp:
            found = await mcp.call_tool("search", {"query": QUERY})
            assert {p["external_id"] for p in found.structured_content["passages"]} == {"lunch"}
            refused = await mcp.call_tool("fetch", {"id": "keys"})
            assert refused.is_error
        async with connect(None) as mcp:
            anonymous = await mcp.call_tool("search", {"query": QUERY})
            assert anonymous.is_error and "no credentials" in anonymous.content[0].text
        async with connect("rl_000000000000_" + "x" * 43) as mcp:
            bad = await mcp.call_tool("search", {"query": QUERY})
            assert bad.is_error and "401" in bad.content[0].text

    asyncio.run(run())


def test_readme_mcp_example_runs(
    live_tenant: LiveServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The "MCP server" example in README.md, run as written. Where ``ragline-mcp`` is not
    installed as a script (a worktree venv), a shim on PATH runs the same module."""
    require("mcp")
    import shutil

    seed(live_tenant)
    if shutil.which("ragline-mcp") is None:
        shim = tmp_path / "bin" / "ragline-mcp"
        shim.parent.mkdir()
        shim.write_text(
            f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m ragline_client.mcp_server "$@"\n'
        )
        shim.chmod(0o755)
        monkeypatch.setenv("PATH", f"{shim.parent}:{os.environ['PATH']}")
    section = (REPO / "README.md").read_text().split("## MCP server", 1)[1]
    code = (
        section.split("```python\n", 1)[1]
        .split("```", 1)[0]
        .replace("http://localhost:8000", live_tenant.url)
    )
    exec(compile(code, "README.md", "exec"), {"query_key": live_tenant.key("query", principal="user:alice")})
    out = capfd.readouterr().out
    citation, text = out.split("\n", 1)
    assert citation == "Key rotation, Operations > Rotating signing keys"
    assert text.split()[:4] == ["Operations", "Rotating", "signing", "keys"], text
