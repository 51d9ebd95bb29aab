"""A LangChain retriever over ragline: ``pip install "ragline-client[langchain]"``.

``RaglineRetriever(base_url=..., api_key=..., top_k=5, **retrieve_options)``; ``.invoke(query)``
and ``await .ainvoke(query)`` give ``Document``s whose ``id`` is the chunk id and whose
metadata holds ``external_id``, ``chunk_id``, ``title``, ``score`` and the page/section
locators. Every search goes through ragline's ACL filter for the key (or token) given, so the
retriever sees only what that caller may read. Failures raise ``RaglineError`` (LangChain
reports it to the run's callbacks through ``on_retriever_error`` and re-raises it).
"""

from __future__ import annotations

import threading
from typing import Any

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        'ragline_client.langchain needs langchain-core: pip install "ragline-client[langchain]"'
    ) from exc
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr

from ragline_client._frameworks import result_metadata, retrieve_options
from ragline_client.client import AsyncClient, Client
from ragline_client.models import RetrieveOut


def to_documents(answer: RetrieveOut) -> list[Document]:
    return [
        Document(page_content=r.text, id=r.chunk_id, metadata=result_metadata(r, answer))
        for r in answer.results
    ]


class RaglineRetriever(BaseRetriever):
    """Permission-filtered retrieval from a ragline server as a LangChain retriever."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base_url: str
    api_key: SecretStr
    top_k: int = Field(default=5, ge=1)
    retrieve_options: dict[str, Any] = Field(default_factory=dict)
    timeout: float = 30.0

    _client: Client | None = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, **data: Any) -> None:
        # Anything that is not a field of the retriever is a retrieve option (or a typo).
        options = {k: data.pop(k) for k in list(data) if k not in type(self).model_fields}
        options |= data.pop("retrieve_options", None) or {}
        super().__init__(**data, retrieve_options=retrieve_options(options))

    def _sync_client(self) -> Client:
        with self._lock:
            if self._client is None:
                self._client = Client(self.base_url, self.api_key.get_secret_value(), timeout=self.timeout)
            return self._client

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return to_documents(self._sync_client().retrieve(query, top_k=self.top_k, **self.retrieve_options))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        # One AsyncClient per call: its connections belong to the running event loop.
        async with AsyncClient(
            self.base_url, self.api_key.get_secret_value(), timeout=self.timeout
        ) as client:
            answer = await client.retrieve(query, top_k=self.top_k, **self.retrieve_options)
        return to_documents(answer)

    def close(self) -> None:
        """Close the pooled connections of the synchronous client."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
