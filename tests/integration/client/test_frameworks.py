"""The LangChain and LlamaIndex retrievers against a real server, with the real framework
packages: documents and nodes with ids, scores and locators; ACLs, filters, modes, the
context budget and delegation passed through; ragline's errors raised as the frameworks do.
One server for the module, a tenant per test (``live_tenant``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ragline_client import RaglineError
from tests.integration.api.conftest import make_key
from tests.integration.client.conftest import LiveServer
from tests.integration.client.frameworks import require, seed

pytestmark = pytest.mark.integration

QUERY = "how do I rotate signing keys?"


def _langchain() -> Any:
    require("langchain_core")
    from ragline_client import langchain

    return langchain


def _llama() -> Any:
    require("llama_index.core")
    from ragline_client import llama_index

    return llama_index


def test_langchain_retriever_sync_and_async(live_tenant: LiveServer) -> None:
    lc = _langchain()
    from langchain_core.documents import Document

    seed(live_tenant)
    alice = live_tenant.key("query", principal="user:alice")
    retriever = lc.RaglineRetriever(base_url=live_tenant.url, api_key=alice, top_k=5)
    docs = retriever.invoke(QUERY)
    assert docs and all(isinstance(d, Document) for d in docs)
    top = docs[0]
    assert top.metadata["external_id"] == "keys" and top.id == top.metadata["chunk_id"]
    assert top.metadata["title"] == "Key rotation" and top.metadata["team"] == "infra"
    assert top.metadata["section_path"][-1] == "Rotating signing keys"
    assert top.metadata["section"].endswith("Rotating signing keys") and top.metadata["page"] is None
    assert isinstance(top.metadata["score"], float) and top.metadata["score"] > 0
    # A document's own metadata never overwrites ragline's keys.
    assert top.metadata["score"] != "spoofed"
    assert "signing key" in top.page_content
    # The ACL filter applies: alice (group:eng) never sees the salary bands.
    assert "salaries" not in {d.metadata["external_id"] for d in docs}
    assert {d.metadata["external_id"] for d in asyncio.run(retriever.ainvoke(QUERY))} == {
        d.metadata["external_id"] for d in docs
    }
    retriever.close()


def test_langchain_options_pass_through(live_tenant: LiveServer) -> None:
    lc = _langchain()
    seed(live_tenant)
    alice = live_tenant.key("query", principal="user:alice")
    filtered = lc.RaglineRetriever(
        base_url=live_tenant.url,
        api_key=alice,
        top_k=5,
        mode="lexical",
        filters={"metadata": {"team": "infra"}},
    )
    assert [d.metadata["external_id"] for d in filtered.invoke("signing keys")] == ["keys"]
    one = lc.RaglineRetriever(base_url=live_tenant.url, api_key=alice, top_k=1, mode="dense")
    assert len(one.invoke(QUERY)) == 1
    # A delegating service key acts for the end user it names, with that user's groups.
    service = make_key(
        live_tenant.db_url, live_tenant.tenant, ["query"], principal="service:app", delegate=True
    )
    as_bob = lc.RaglineRetriever(base_url=live_tenant.url, api_key=service, as_principal="user:bob")
    assert {d.metadata["external_id"] for d in as_bob.invoke(QUERY)} == {"lunch"}
    as_hr = lc.RaglineRetriever(base_url=live_tenant.url, api_key=service, as_principal="user:hr-lead")
    assert "salaries" in {d.metadata["external_id"] for d in as_hr.invoke("salary bands")}
    with pytest.raises(TypeError, match="filter"):
        lc.RaglineRetriever(base_url=live_tenant.url, api_key=alice, filter={"source": ["x"]})
    # Fusion passes through: a convex fusion weighing only the lexical leg answers as lexical.
    convex = lc.RaglineRetriever(
        base_url=live_tenant.url,
        api_key=alice,
        top_k=3,
        fusion={"method": "convex", "weights": {"dense": 0.0, "lexical": 1.0}},
    )
    docs = convex.invoke("signing keys")
    assert docs and all(d.metadata["fusion"]["method"] == "convex" for d in docs)
    assert docs[0].metadata["fusion"]["weights"] == {"dense": 0.0, "lexical": 1.0}


def test_langchain_errors_reach_the_callbacks(live_tenant: LiveServer) -> None:
    lc = _langchain()
    from langchain_core.callbacks import BaseCallbackHandler

    class Seen(BaseCallbackHandler):
        errors: list[BaseException] = []

        def on_retriever_error(self, error: BaseException, **kwargs: Any) -> None:
            self.errors.append(error)

    seen = Seen()
    bad = lc.RaglineRetriever(base_url=live_tenant.url, api_key="rl_000000000000_" + "x" * 43)
    with pytest.raises(RaglineError) as caught:
        bad.invoke(QUERY, config={"callbacks": [seen]})
    assert caught.value.status == 401 and caught.value.request_id
    assert seen.errors == [caught.value]
    # A key that may not delegate is refused, not silently searched as itself.
    plain = live_tenant.key("query", principal="user:alice")
    refused = lc.RaglineRetriever(base_url=live_tenant.url, api_key=plain, as_principal="user:hr-lead")
    with pytest.raises(RaglineError) as denied:
        asyncio.run(refused.ainvoke(QUERY))
    assert denied.value.status == 403


def test_llama_index_retriever_sync_and_async(live_tenant: LiveServer) -> None:
    li = _llama()
    from llama_index.core.schema import MetadataMode, NodeWithScore

    seed(live_tenant)
    alice = live_tenant.key("query", principal="user:alice")
    retriever = li.RaglineRetriever(base_url=live_tenant.url, api_key=alice, top_k=5)
    nodes = retriever.retrieve(QUERY)
    assert nodes and all(isinstance(n, NodeWithScore) for n in nodes)
    top = nodes[0]
    assert top.node.metadata["external_id"] == "keys" and top.node.node_id == top.node.metadata["chunk_id"]
    assert top.score == top.node.metadata["score"] and top.node.metadata["title"] == "Key rotation"
    assert top.node.metadata["section_path"][-1] == "Rotating signing keys"
    assert "signing key" in top.node.get_content()
    # The LLM sees the title and section, not the ids and scores.
    llm_text = top.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "Key rotation" in llm_text and top.node.node_id not in llm_text
    assert "salaries" not in {n.node.metadata["external_id"] for n in nodes}
    async_nodes = asyncio.run(retriever.aretrieve(QUERY))
    assert [n.node.node_id for n in async_nodes] == [n.node.node_id for n in nodes]

    budget = li.RaglineRetriever(
        base_url=live_tenant.url, api_key=alice, top_k=2, mode="lexical", max_context_tokens=64, rerank=False
    )
    assert 1 <= len(budget.retrieve("signing keys")) <= 2
    infra = li.RaglineRetriever(
        base_url=live_tenant.url, api_key=alice, filters={"metadata": {"team": "infra"}}
    )
    assert [n.node.metadata["external_id"] for n in infra.retrieve(QUERY)] == ["keys"]
    retriever.close()


def test_llama_index_errors(live_tenant: LiveServer) -> None:
    li = _llama()
    bad = li.RaglineRetriever(base_url=live_tenant.url, api_key="rl_000000000000_" + "x" * 43)
    with pytest.raises(RaglineError) as caught:
        bad.retrieve(QUERY)
    assert caught.value.status == 401
    with pytest.raises(RaglineError) as async_caught:
        asyncio.run(bad.aretrieve(QUERY))
    assert async_caught.value.status == 401
    with pytest.raises(TypeError, match="fuse"):
        li.RaglineRetriever(base_url=live_tenant.url, api_key="k", fuse="rrf")


def test_readme_framework_example_runs(live_tenant: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    """The "LangChain and LlamaIndex" example in README.md, run as written against the server."""
    _langchain(), _llama()
    from tests.integration.client.test_fs_connector import REPO

    seed(live_tenant)
    section = (REPO / "README.md").read_text().split("## LangChain and LlamaIndex", 1)[1]
    code = (
        section.split("```python\n", 1)[1]
        .split("```", 1)[0]
        .replace("http://localhost:8000", live_tenant.url)
    )
    exec(compile(code, "README.md", "exec"), {"query_key": live_tenant.key("query", principal="user:alice")})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("keys Operations > Rotating signing keys ")
    assert "salaries" not in "\n".join(lines) and lines[-1].startswith("['keys'")
