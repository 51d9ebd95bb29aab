from __future__ import annotations

from pathlib import Path

import pytest

from tests import model_variants


@pytest.fixture(scope="session")
def model_variants_dir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three test variants of the bundled model, built once per session."""
    root = tmp_path_factory.mktemp("models")
    return {
        "cls": model_variants.cls_pooling(root / "minilm-cls"),
        "proj256": model_variants.projected(root / "minilm-proj256"),
        "random": model_variants.random_weights(root / "minilm-random"),
    }
