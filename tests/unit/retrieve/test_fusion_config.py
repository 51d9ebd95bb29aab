"""FusionConfig: settings < tenant defaults < request, per-leg depths, and its wire form."""

from __future__ import annotations

from catalog.fusion import FusionOverride
from retrieve.service import FusionConfig

SETTINGS = FusionConfig(rrf_k=60, dense_weight=1.0, lexical_weight=1.0, candidates=50)


def test_each_layer_replaces_only_the_fields_it_sets() -> None:
    tenant = FusionOverride(method="convex", lexical_weight=0.5)
    request = FusionOverride(lexical_weight=2.0, dense_candidates=200)
    used = SETTINGS.merged(tenant).merged(request)
    assert used == FusionConfig(60, 1.0, 2.0, 50, "convex", 200, None)
    assert SETTINGS.merged(None) is SETTINGS
    assert SETTINGS.merged(FusionOverride()) == SETTINGS


def test_depth_per_leg_never_below_top_k() -> None:
    cfg = SETTINGS.merged(FusionOverride(dense_candidates=10, lexical_candidates=300))
    assert cfg.depth("dense", 5) == 10
    assert cfg.depth("dense", 40) == 40
    assert cfg.depth("lexical", 5) == 300
    assert SETTINGS.depth("lexical", 5) == 50


def test_describe_names_every_parameter() -> None:
    cfg = SETTINGS.merged(FusionOverride(method="convex", dense_weight=0.3, lexical_candidates=80))
    assert cfg.describe() == {
        "method": "convex",
        "rrf_k": 60,
        "weights": {"dense": 0.3, "lexical": 1.0},
        "candidates": {"dense": 50, "lexical": 80},
    }
