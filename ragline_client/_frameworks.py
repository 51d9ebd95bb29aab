"""What the framework adapters (LangChain, LlamaIndex, MCP) share: the retrieve options they
pass through to ``/v1/retrieve`` and the metadata every retrieved passage carries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragline_client.models import ResultOut, RetrieveOut

# ``Client.retrieve``'s keyword arguments besides ``query`` and ``top_k``: mode (hybrid,
# dense or lexical), fusion (how hybrid fuses the two: rrf or convex, k, weights, depths),
# filters, rerank, the context budget (max_context_tokens), expand and as_principal (a
# delegating key acting for a user).
RETRIEVE_OPTIONS = frozenset(
    {"mode", "fusion", "filters", "rerank", "max_context_tokens", "expand", "as_principal"}
)

# The keys ragline sets; a document's own metadata keys never overwrite them.
RESERVED_KEYS = frozenset(
    {
        "external_id",
        "chunk_id",
        "title",
        "score",
        "rank",
        "page",
        "page_range",
        "section",
        "section_path",
        "char_offsets",
        "stage_scores",
        "index_version",
        "fusion",
    }
)


def retrieve_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` if every name is a retrieve option; an unknown name fails at construction
    (a typo such as ``filter=`` would otherwise search unfiltered)."""
    unknown = sorted(set(options) - RETRIEVE_OPTIONS)
    if unknown:
        raise TypeError(f"unknown retrieve option(s) {unknown}; expected some of {sorted(RETRIEVE_OPTIONS)}")
    return dict(options)


def result_metadata(result: ResultOut, answer: RetrieveOut) -> dict[str, Any]:
    """Ids, score and locators of one result, then the document's own metadata."""
    page_range = list(result.page_range) if result.page_range else None
    meta: dict[str, Any] = {
        "external_id": result.document_external_id,
        "chunk_id": result.chunk_id,
        "title": result.title,
        "score": result.score,
        "rank": result.rank,
        "page": page_range[0] if page_range else None,
        "page_range": page_range,
        "section": " > ".join(result.section_path) or None,
        "section_path": list(result.section_path),
        "char_offsets": list(result.char_offsets),
        "stage_scores": dict(result.stage_scores),
        "index_version": answer.index_version,
        "fusion": answer.fusion.model_dump() if answer.fusion is not None else None,
    }
    meta.update({k: v for k, v in result.metadata.items() if k not in RESERVED_KEYS})
    return meta
