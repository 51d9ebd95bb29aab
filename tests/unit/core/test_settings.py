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


def test_request_defaults_follow_a_lowered_maximum() -> None:
    s = Settings(api={"max_top_k": 5}, retrieve={"max_context_tokens": 1000})
    assert s.api.default_top_k == 5
    assert s.retrieve.default_context_tokens == 1000
    assert Settings().api.default_top_k == 8 and Settings().retrieve.default_context_tokens == 1500


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"api": {"max_top_k": 5, "default_top_k": 6}}, "api.default_top_k (6) exceeds api.max_top_k (5)"),
        (
            {"retrieve": {"max_context_tokens": 100, "default_context_tokens": 200}},
            "retrieve.default_context_tokens (200) exceeds retrieve.max_context_tokens (100)",
        ),
    ],
)
def test_an_explicit_default_above_its_maximum_is_refused(overrides: dict, fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(**overrides)
    assert fragment in str(info.value)


def test_an_unknown_nested_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="no_such_field"):
        Settings(ingest={"no_such_field": 1})
    monkeypatch.setenv("RAGLINE_INDEX__POLL_SECOND", "1")  # a typo must not be silently ignored
    with pytest.raises(ValueError, match="poll_second"):
        Settings()


def test_admission_tenant_weights_come_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGLINE_ADMISSION__TENANT_WEIGHTS", '{"acme": 2, "globex": 0.5}')
    assert Settings().admission.tenant_weights == {"acme": 2.0, "globex": 0.5}
    monkeypatch.setenv("RAGLINE_ADMISSION__TENANT_WEIGHTS", '{"acme": 0}')
    with pytest.raises(ValidationError, match="greater than 0"):
        Settings()
