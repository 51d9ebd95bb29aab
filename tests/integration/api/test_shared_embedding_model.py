"""One embedding model per server process (issue 42): the app ``ragline serve`` builds (the
default service hooks) loads the model once for its search service and its ingest runner."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.settings import Settings
from index.embedder import Embedder, OnnxEmbedder
from tests.integration.api.conftest import make_key, push_and_wait
from wiring.embedding import query_embedding_spec

pytestmark = pytest.mark.integration

TENANT = "acme"


def _model(embedder: Embedder) -> object:
    """The loaded model behind ``embedder`` (a shared view's model, or the embedder itself)."""
    return getattr(embedder, "model", embedder)


def test_search_and_the_ingest_runner_share_one_loaded_model(
    db_url: str, tmp_path: Path, onnx_models: Path
) -> None:
    (tmp_path / "models").symlink_to(onnx_models)  # the ONNX export and its int8 copy, made once
    settings = Settings(data_dir=tmp_path, database_url=db_url)
    app = create_app(settings)  # the default hooks, as ``ragline serve`` (api.main.build) has them
    with TestClient(app) as client:
        token = make_key(db_url, TENANT, ["ingest"])
        doc = {"external_id": "one", "title": "One", "text": "Rotate the signing keys every day."}
        push_and_wait(client, token, [doc])  # one document: the runner's inline path embeds it

        runner_embedder = app.state.runner.embedder
        search_embedder = app.state.search.embedders.get(settings.embedding_model).embedder
        assert _model(runner_embedder) is _model(search_embedder)
        assert len(app.state.embedding_models) == 1
        # Each keeps its own batch size over the one model.
        assert runner_embedder.batch_size == settings.ingest.embed_batch_size
        assert search_embedder.batch_size == query_embedding_spec(settings).batch_size

        # An int8 query encoder is another model: it gets its own, the fp32 one stays shared.
        int8 = dataclasses.replace(query_embedding_spec(settings), precision="int8")
        int8_embedder = app.state.embedding_models.get(int8)
        int8_model = _model(int8_embedder)
        assert int8_model is not _model(search_embedder)
        assert isinstance(int8_model, OnnxEmbedder) and int8_model.precision == "int8"
        assert len(app.state.embedding_models) == 2
