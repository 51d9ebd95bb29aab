"""A bad setting in the environment is one line per variable and exit 2, not a traceback."""

from __future__ import annotations

import pytest

from cli.main import main
from core.settings import get_settings


@pytest.fixture(autouse=True)
def fresh_settings() -> object:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_each_bad_variable_is_named_with_its_value(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RAGLINE_EMBEDDING_QUERY_PRECISION", "fp16")
    monkeypatch.setenv("RAGLINE_RETRIEVE__WARM_SECONDS", "-1")
    assert main(["index", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragline: error: invalid configuration:\n")
    assert "  RAGLINE_EMBEDDING_QUERY_PRECISION: Input should be 'fp32' or 'int8' (got 'fp16')" in err
    assert "  RAGLINE_RETRIEVE__WARM_SECONDS: Input should be greater than or equal to 0 (got '-1')" in err
    assert "Traceback" not in err


def test_a_validator_keeps_its_own_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RAGLINE_DATABASE_URL", "mysql://x/y")
    assert main(["index", "list"]) == 2
    err = capsys.readouterr().err
    assert "RAGLINE_DATABASE_URL" in err and "postgresql://" in err


def test_int8_queries_on_torch_are_refused_before_anything_loads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RAGLINE_EMBEDDING_BACKEND", "torch")
    monkeypatch.setenv("RAGLINE_EMBEDDING_QUERY_PRECISION", "int8")
    assert main(["index", "list"]) == 2
    err = capsys.readouterr().err
    assert "  Value error, RAGLINE_EMBEDDING_QUERY_PRECISION=int8 needs RAGLINE_EMBEDDING_BACKEND=onnx" in err
