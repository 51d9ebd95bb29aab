"""Which reranker a tenant's request gets (``SearchService._rerank_choice``): its own gated
one when the row is on, none when it is off (the server's model neither), the server's when it
has no row; never another tenant's. The rows come from the node's cache, filled here as a
catch-up would leave it, so no database is needed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from catalog.rerankers import TenantReranker
from retrieve.hybrid import StageLog
from retrieve.service import FusionConfig, RerankChoice, RerankConfig, SearchConfig, SearchService


class Named:
    def __init__(self, name: str) -> None:
        self.name = name

    def score(self, query: str, passages: Sequence[str], *, timeout_s: float | None = None) -> list[float]:
        return [0.0] * len(passages)


class Models:
    """Stands in for ``rerank.models.RerankerModels``: one scorer per folder, counted loads."""

    def __init__(self) -> None:
        self.loads: list[str] = []

    def get(self, model: str) -> Named:
        if model.endswith("missing"):
            raise FileNotFoundError(model)
        self.loads.append(model)
        return Named(model)


SERVER = Named("server")


def _row(tenant: str, model: str | None, enabled: bool) -> TenantReranker:
    return TenantReranker(tenant, model, enabled, None, datetime.now(UTC), "operator:test")


def _service(server: Named | None = SERVER) -> tuple[SearchService, Models]:
    models = Models()
    state = SimpleNamespace(view=SimpleNamespace(setting_marks={}, position=5))
    service = SearchService(
        watcher=SimpleNamespace(state=state),  # type: ignore[arg-type]
        read_pool=None,  # type: ignore[arg-type]  # no row is read: every tenant below is cached
        searcher=None,  # type: ignore[arg-type]
        embedders=None,  # type: ignore[arg-type]
        counter=None,  # type: ignore[arg-type]
        config=SearchConfig(
            FusionConfig(60, 1.0, 1.0, 50), RerankConfig(50, 1500, "rrf", "/srv/models/server-rr")
        ),
        reranker=server,
        tenant_rerankers=models,
    )
    service._tenant_reranker.update(
        {
            "on": (_row("on", "/models/acme-rr", True), 5),
            "off": (_row("off", "/models/bad-rr", False), 5),
            "none": (None, 5),
            "gone": (_row("gone", "/models/missing", True), 5),
        }
    )
    return service, models


def _choose(service: SearchService, tenant: str, rerank: bool | None) -> tuple[RerankChoice, StageLog]:
    slog = StageLog()
    return service._rerank_choice(tenant, rerank, slog), slog


def test_an_enabled_row_reranks_with_the_tenants_model_and_names_it() -> None:
    service, models = _service()
    for rerank in (None, True):
        choice, slog = _choose(service, "on", rerank)
        assert isinstance(choice.scorer, Named) and choice.scorer.name == "/models/acme-rr"
        assert choice.name == "acme-rr" and slog.degraded == []
    assert _choose(service, "on", False)[0].scorer is None  # the request's "rerank": false wins
    assert models.loads == ["/models/acme-rr", "/models/acme-rr"]


@pytest.mark.parametrize("server", [SERVER, None])
def test_a_row_that_is_off_reranks_with_nothing_even_when_asked(server: Named | None) -> None:
    service, models = _service(server)
    assert _choose(service, "off", None) == (RerankChoice(None), StageLog())
    choice, slog = _choose(service, "off", True)
    assert choice.scorer is None and choice.name is None
    off = "the tenant's reranker is off (ragline reranker gate)"
    assert slog.degraded == [{"stage": "rerank", "reason": off}]
    assert models.loads == []  # the failed model is never loaded


def test_no_row_is_as_before_the_server_model_or_none() -> None:
    service, _ = _service()
    choice, slog = _choose(service, "none", None)
    assert choice.scorer is SERVER and choice.name == "server-rr" and slog.degraded == []
    bare, _ = _service(None)
    choice, slog = _choose(bare, "none", True)
    assert choice.scorer is None
    assert slog.degraded == [{"stage": "rerank", "reason": "no reranker model is configured"}]


def test_a_model_that_does_not_load_degrades_instead_of_failing_the_search() -> None:
    service, _ = _service()
    choice, slog = _choose(service, "gone", None)
    assert choice.scorer is None
    gone = "the tenant's reranker did not load: FileNotFoundError"
    assert slog.degraded == [{"stage": "rerank", "reason": gone}]


def test_a_later_setting_change_of_the_tenant_drops_its_cached_row() -> None:
    service, _ = _service()
    service.state.view.setting_marks["on"] = 6  # the view applied a change after the read at 5
    with pytest.raises(AttributeError):  # so the row is read again (no pool here)
        _choose(service, "on", None)
    assert _choose(service, "off", True)[0].scorer is None  # other tenants' copies still hold
