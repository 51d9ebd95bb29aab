"""The CLI commands' tests run ``cli.main.main`` in-process against the test catalog."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core.settings import get_settings
from testkit.server import share_models


@pytest.fixture
def cli_env(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedding_export: Path
) -> Iterator[str]:
    """The command's environment: the test catalog and a data dir of its own (its models
    folder is the session's, so an ingest reuses the one ONNX export); the settings cache is
    cleared on both sides so no other test's settings leak in or out."""
    monkeypatch.setenv("RAGLINE_DATABASE_URL", db_url)
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path / "data"))
    share_models(tmp_path / "data", embedding_export)
    get_settings.cache_clear()
    yield db_url
    get_settings.cache_clear()
