from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from core.settings import Settings


def test_defaults_are_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGLINE_DATABASE_URL", raising=False)
    s = Settings()
    assert s.data_dir == Path(".ragline")
    assert s.index_dir == Path(".ragline/indexes")
    assert s.api.port == 8000 and s.api.host == "127.0.0.1"
    assert s.ingest.chunk_tokens == 256 and s.ingest.chunk_overlap == 32
    assert s.api.max_batch_documents == 256


def test_env_prefix_and_nesting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGLINE_DATA_DIR", "/tmp/x")
    monkeypatch.setenv("RAGLINE_INGEST__CHUNK_TOKENS", "128")
    monkeypatch.setenv("RAGLINE_API__PORT", "9001")
    s = Settings()
    assert s.data_dir == Path("/tmp/x")
    assert s.ingest.chunk_tokens == 128
    assert s.api.port == 9001


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("RAGLINE_DATABASE_URL", "mysql://x", "must start with postgresql://"),
        ("RAGLINE_API__PORT", "70000", "less than or equal to 65535"),
        ("RAGLINE_INGEST__CHUNK_OVERLAP", "300", "chunk_overlap must be smaller"),
        ("RAGLINE_INDEX__KIND", "annoy", "flat"),
    ],
)
def test_invalid_values_fail_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, fragment: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as info:
        Settings()
    assert fragment in str(info.value)


def test_unknown_field_is_refused() -> None:
    with pytest.raises(ValidationError):
        Settings(no_such_setting=1)  # type: ignore[call-arg]


def test_key_cache_can_not_exceed_one_second(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGLINE_API__KEY_CACHE_SECONDS", "5")
    with pytest.raises(ValidationError):
        Settings()
