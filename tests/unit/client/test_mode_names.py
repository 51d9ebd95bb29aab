"""One name for the keyword-only mode: ``lexical``, with ``bm25`` accepted as the same mode by
the API's request model (and so the client's) and by ``ragline eval``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api.schemas import RetrieveLimits, retrieve_in_model
from cli.main import build_parser
from evaluation import MODES, resolve_modes

LIMITS = RetrieveLimits(
    max_top_k=100, default_top_k=8, max_query_chars=2000, default_context_tokens=0, max_context_tokens=4000
)


def test_the_api_takes_bm25_as_lexical_and_refuses_other_names() -> None:
    model = retrieve_in_model(LIMITS)
    assert model.model_validate({"query": "q", "mode": "bm25"}).mode == "lexical"
    assert model.model_validate({"query": "q", "mode": "lexical"}).mode == "lexical"
    with pytest.raises(ValidationError):
        model.model_validate({"query": "q", "mode": "keyword"})


def test_eval_names_modes_as_the_api_does() -> None:
    assert "lexical" in MODES and "bm25" not in MODES
    assert resolve_modes(["bm25", "dense", "lexical"]) == ["lexical", "dense"]
    with pytest.raises(SystemExit, match="keyword"):
        resolve_modes(["keyword"])
    default = build_parser().parse_args(["eval", "--dataset", "x"]).modes
    assert resolve_modes(default.split(",")) == ["lexical", "dense", "hybrid", "hybrid+rerank"]
