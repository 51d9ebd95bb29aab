"""A LlamaIndex retriever over ragline: ``pip install "ragline-client[llamaindex]"``.

``RaglineRetriever(base_url=..., api_key=..., top_k=5, **retrieve_options)``; ``.retrieve(query)``
and ``await .aretrieve(query)`` give ``NodeWithScore``s whose ``TextNode`` id is the chunk id
and whose metadata holds ``external_id``, ``chunk_id``, ``title``, ``score`` and the
page/section locators. Every search goes through ragline's ACL filter for the key (or token)
given. Failures raise ``RaglineError`` out of ``retrieve`` (LlamaIndex ends the retrieval
event and re-raises).
"""

from __future__ import annotations

import threading
from typing import Any

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        'ragline_client.llama_index needs llama-index-core: pip install "ragline-client[llamaindex]"'
    ) from exc

from ragline_client._frameworks import result_metadata, retrieve_options
from ragline_client.client import AsyncClient, Client
from ragline_client.models import RetrieveOut

# Locators and ids help a caller cite; they are noise in the text an LLM or embedder reads.
_HIDDEN_FROM_MODELS = [
    "chunk_id",
    "rank",
    "score",
    "char_offsets",
    "stage_scores",
    "index_version",
    "page_range",
]


def to_nodes(answer: RetrieveOut) -> list[NodeWithScore]:
    nodes = []
    for r in answer.results:
        node = TextNode(
            id_=r.chunk_id,
            text=r.text,
            metadata=result_metadata(r, answer),
            excluded_llm_metadata_keys=list(_HIDDEN_FROM_MODELS),
            excluded_embed_metadata_keys=list(_HIDDEN_FROM_MODELS),
        )
        nodes.append(NodeWithScore(node=node, score=r.score))
    return nodes


class RaglineRetriever(BaseRetriever):
    """Permission-filtered retrieval from a ragline server as a LlamaIndex retriever."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        top_k: int = 5,
        *,
        timeout: float = 30.0,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        **options: Any,
    ) -> None:
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        self.base_url = base_url
        self.top_k = top_k
        self.timeout = timeout
        self.retrieve_options = retrieve_options(options)
        self._api_key = api_key
        self._client: Client | None = None
        self._lock = threading.Lock()
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _sync_client(self) -> Client:
        with self._lock:
            if self._client is None:
                self._client = Client(self.base_url, self._api_key, timeout=self.timeout)
            return self._client

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        answer = self._sync_client().retrieve(
            query_bundle.query_str, top_k=self.top_k, **self.retrieve_options
        )
        return to_nodes(answer)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # One AsyncClient per call: its connections belong to the running event loop.
        async with AsyncClient(self.base_url, self._api_key, timeout=self.timeout) as client:
            answer = await client.retrieve(query_bundle.query_str, top_k=self.top_k, **self.retrieve_options)
        return to_nodes(answer)

    def close(self) -> None:
        """Close the pooled connections of the synchronous client."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
