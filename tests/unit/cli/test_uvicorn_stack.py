"""``ragline serve``'s event loop and HTTP parser: "auto" takes uvloop and httptools, an
explicit choice that cannot import is a one-line configuration error (exit 2)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from cli.main import main
from cli.uvicorn_stack import uvicorn_stack
from core.errors import ConfigError
from core.settings import Settings, get_settings


@pytest.fixture(autouse=True)
def fresh_settings() -> object:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _settings(tmp_path: Path, **api: str) -> Settings:
    return Settings(data_dir=tmp_path, api=api)


def _without(monkeypatch: pytest.MonkeyPatch, *missing: str) -> None:
    """Fault injection: ``missing`` modules look uninstalled to importlib."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name in missing else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_auto_takes_the_c_stack_where_installed(tmp_path: Path) -> None:
    installed = {m: importlib.util.find_spec(m) is not None for m in ("uvloop", "httptools")}
    assert uvicorn_stack(_settings(tmp_path)) == {
        "loop": "uvloop" if installed["uvloop"] else "asyncio",
        "http": "httptools" if installed["httptools"] else "h11",
    }


def test_auto_falls_back_where_one_is_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "uvloop")
    assert uvicorn_stack(_settings(tmp_path))["loop"] == "asyncio"
    _without(monkeypatch, "uvloop", "httptools")
    assert uvicorn_stack(_settings(tmp_path)) == {"loop": "asyncio", "http": "h11"}


def test_an_explicit_choice_is_kept(tmp_path: Path) -> None:
    stack = uvicorn_stack(_settings(tmp_path, loop="asyncio", http="h11"))
    assert stack == {"loop": "asyncio", "http": "h11"}


def test_an_explicit_choice_that_cannot_import_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without(monkeypatch, "httptools")
    with pytest.raises(ConfigError, match="RAGLINE_API__HTTP=httptools needs the httptools package"):
        uvicorn_stack(_settings(tmp_path, http="httptools"))


def test_serve_refuses_before_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _without(monkeypatch, "uvloop")
    monkeypatch.setenv("RAGLINE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RAGLINE_API__LOOP", "uvloop")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "RAGLINE_API__LOOP=uvloop needs the uvloop package" in err
    assert "Traceback" not in err


def test_an_unknown_loop_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="'auto', 'asyncio' or 'uvloop'"):
        _settings(tmp_path, loop="trio")
