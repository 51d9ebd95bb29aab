"""``ragline-mcp``: ragline's retrieval as MCP tools, ``pip install "ragline-client[mcp]"``.

Two tools on the official ``mcp`` SDK: ``search`` (passages with citations, packed within a
token budget) and ``fetch`` (a chunk or a whole document by id). Every call goes to the
ragline API with the caller's credentials, so an agent sees only what its user may read:
over streamable HTTP the MCP request's own ``Authorization: Bearer`` (an end user's OIDC token
or key) when it carries one, else the configured ``RAGLINE_API_KEY`` (or
``RAGLINE_API_TOKEN``); over stdio the configured one. ``RAGLINE_API_URL`` names the server.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, Literal

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError('ragline-mcp needs the MCP SDK: pip install "ragline-client[mcp]"') from exc
from pydantic import BaseModel, Field

from ragline_client.client import AsyncClient
from ragline_client.errors import RaglineError
from ragline_client.models import ChunkOut, DocumentOut, RetrieveOut

INSTRUCTIONS = (
    "Search a ragline knowledge base with `search`; every passage has an id (a chunk id) and"
    " its document's external_id. Read a passage or a whole document with `fetch`. Cite"
    " passages by their `citation`. Only what the signed-in user may read is ever returned."
)

SEARCH_DOC = (
    "Search the knowledge base: ranked passages with citations, and `context`, the top passages"
    ' packed within `max_context_tokens`. `filters` (all optional): {"source": [...],'
    ' "mime_type": [...], "created_after": "2025-01-01", "created_before": ...,'
    ' "metadata": {"key": value or [values]}}. `mode`: hybrid (default), dense or lexical.'
)
FETCH_DOC = (
    "Read a passage by its id (a chunk id from search) or a whole document by its external_id."
    " `kind`: auto (default: a chunk id first, then a document id), chunk or document."
)


class Passage(BaseModel):
    rank: int
    id: str = Field(description="the chunk id, for fetch")
    external_id: str = Field(description="the document's id, for fetch(kind='document')")
    title: str | None
    text: str
    score: float
    page_range: tuple[int, int] | None
    section: str | None
    citation: str = Field(description="how to cite the passage: title, pages, section")


class Citation(BaseModel):
    start: int = Field(description="start of the span in context (characters)")
    end: int
    passages: list[int] = Field(description="ranks of the passages the span quotes")


class SearchOut(BaseModel):
    context: str = Field(description="the top passages packed within max_context_tokens")
    passages: list[Passage]
    citations: list[Citation]
    truncated: bool
    request_id: str


class FetchOut(BaseModel):
    id: str
    kind: Literal["chunk", "document"]
    external_id: str
    title: str | None
    text: str
    metadata: dict[str, Any]
    chunk_ids: list[str]
    truncated: bool


def citation(title: str | None, external_id: str, pages: tuple[int, int] | None, section: list[str]) -> str:
    parts = [title or external_id]
    if pages:
        parts.append(f"p. {pages[0]}" if pages[0] == pages[1] else f"pp. {pages[0]}-{pages[1]}")
    if section:
        parts.append(" > ".join(section))
    return ", ".join(parts)


def search_out(answer: RetrieveOut) -> SearchOut:
    passages = [
        Passage(
            rank=r.rank,
            id=r.chunk_id,
            external_id=r.document_external_id,
            title=r.title,
            text=r.text,
            score=r.score,
            page_range=r.page_range,
            section=" > ".join(r.section_path) or None,
            citation=citation(r.title, r.document_external_id, r.page_range, r.section_path),
        )
        for r in answer.results
    ]
    ctx = answer.context
    cites = [Citation(start=c.start, end=c.end, passages=c.results) for c in ctx.citations]
    return SearchOut(
        context=ctx.text,
        passages=passages,
        citations=cites,
        truncated=ctx.truncated,
        request_id=answer.request_id,
    )


def stitch(chunks: Sequence[ChunkOut]) -> str:
    """A document's text from its leaf chunks in order, overlaps (by character offsets) once."""
    text, end = "", -1
    for c in chunks:
        start, stop = c.char_offsets
        if end < 0 or start >= end or stop - start != len(c.text):
            text += ("\n\n" if text else "") + c.text
        elif stop > end:
            text += c.text[end - start :]
        end = max(end, stop)
    return text


def chunk_fetch(c: ChunkOut) -> FetchOut:
    return FetchOut(
        id=c.chunk_id,
        kind="chunk",
        external_id=c.document_external_id,
        title=c.title,
        text=c.text,
        metadata={"page_range": c.page_range, "section_path": c.section_path, **c.metadata},
        chunk_ids=[c.chunk_id],
        truncated=False,
    )


def document_fetch(d: DocumentOut) -> FetchOut:
    return FetchOut(
        id=d.external_id,
        kind="document",
        external_id=d.external_id,
        title=d.title,
        text=stitch(d.chunks),
        metadata=dict(d.metadata),
        chunk_ids=[c.chunk_id for c in d.chunks],
        truncated=d.truncated,
    )


def _tool_error(exc: RaglineError) -> ToolError:
    return ToolError(f"ragline {exc.code} ({exc.status}): {exc.message}")


def _bearer(ctx: Context, configured: str | None) -> str:
    headers = ctx.headers or {}
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    if configured:
        return configured
    raise ToolError("no credentials: send 'Authorization: Bearer <token>' or set RAGLINE_API_KEY")


def build_server(base_url: str, api_key: str | None, *, timeout: float = 30.0, **settings: Any) -> MCPServer:
    """The MCP server; ``api_key`` is used when a request brings no bearer of its own."""
    server = MCPServer("ragline", instructions=INSTRUCTIONS, **settings)

    def client(ctx: Context) -> AsyncClient:
        return AsyncClient(base_url, _bearer(ctx, api_key), timeout=timeout)

    @server.tool(description=SEARCH_DOC)
    async def search(
        query: str,
        ctx: Context,
        top_k: int = Field(5, ge=1, le=100),
        filters: dict[str, Any] | None = None,
        max_context_tokens: int | None = Field(None, ge=1),
        mode: Literal["hybrid", "dense", "lexical"] = "hybrid",
    ) -> SearchOut:
        try:
            async with client(ctx) as rl:
                answer = await rl.retrieve(
                    query, top_k=top_k, filters=filters, max_context_tokens=max_context_tokens, mode=mode
                )
        except RaglineError as exc:
            raise _tool_error(exc) from exc
        except ValueError as exc:  # filters that do not validate
            raise ToolError(f"invalid filters: {exc}") from exc
        return search_out(answer)

    @server.tool(description=FETCH_DOC)
    async def fetch(id: str, ctx: Context, kind: Literal["auto", "chunk", "document"] = "auto") -> FetchOut:
        try:
            async with client(ctx) as rl:
                if kind in ("auto", "chunk"):
                    try:
                        return chunk_fetch(await rl.chunk(id))
                    except RaglineError as exc:
                        if kind == "chunk" or exc.status != 404:
                            raise
                return document_fetch(await rl.document(id))
        except RaglineError as exc:
            raise _tool_error(exc) from exc

    return server


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ragline-mcp", description="ragline's retrieval as MCP tools")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP: the address to listen on")
    parser.add_argument("--port", type=int, default=8765, help="HTTP: the port to listen on")
    parser.add_argument("--path", default="/mcp", help="HTTP: the endpoint's path")
    args = parser.parse_args(argv)
    url = os.environ.get("RAGLINE_API_URL")
    if not url:
        sys.exit("ragline-mcp: set RAGLINE_API_URL (and RAGLINE_API_KEY or RAGLINE_API_TOKEN)")
    key = os.environ.get("RAGLINE_API_KEY") or os.environ.get("RAGLINE_API_TOKEN")
    if args.transport == "stdio" and not key:
        sys.exit("ragline-mcp: set RAGLINE_API_KEY or RAGLINE_API_TOKEN for the stdio transport")
    server = build_server(url, key)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port, streamable_http_path=args.path)


if __name__ == "__main__":
    main()
