""".env.example: every variable docker-compose.yml reads is there, every RAGLINE_* setting in it
is a real setting and loads, and compose accepts it once the one secret is filled in."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel

from core.settings import Settings

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / ".env.example"


def _entries() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in EXAMPLE.read_text().splitlines() if line and line[0] != "#")
    return {k.strip(): v.strip() for k, v in pairs}


def _compose_variables() -> set[str]:
    return set(re.findall(r"\$\{(\w+)", (REPO / "docker-compose.yml").read_text()))


def _is_setting(key: str) -> bool:
    model: type[BaseModel] = Settings
    parts = key.removeprefix("RAGLINE_").lower().split("__")
    for i, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            return False
        annotation = field.annotation
        if i < len(parts) - 1:
            if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
                return False
            model = annotation
    return True


def test_every_variable_compose_reads_is_in_the_example() -> None:
    assert _compose_variables() - set(_entries()) == set()


def test_every_ragline_entry_is_a_setting_or_a_compose_variable() -> None:
    unknown = {k for k in _entries() if k.startswith("RAGLINE_") and not _is_setting(k)}
    assert unknown <= _compose_variables(), unknown - _compose_variables()


def test_the_example_loads_as_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("RAGLINE_")]:
        monkeypatch.delenv(key)
    for key, value in _entries().items():
        monkeypatch.setenv(key, value)  # as a systemd EnvironmentFile passes it, empty ones included
    settings = Settings()
    assert settings.database_url is None and settings.ray_address is None  # empty: the default
    assert settings.data_dir == Path("/data") and settings.api.host == "127.0.0.1"
    assert settings.audit.store_query_text is False
    assert settings.api.max_upload_bytes == int(_entries()["RAGLINE_API__MAX_UPLOAD_BYTES"])


def test_compose_accepts_the_example_once_the_token_is_set(tmp_path: Path) -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose is not installed; .ci/run installs Debian's docker-compose")
        pytest.skip("docker-compose is not installed")
    ours = ("RAGLINE_", "COMPOSE_", "RAY_", "POSTGRES_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}

    def config(env_file: Path) -> subprocess.CompletedProcess[str]:
        cmd = [exe, "--env-file", str(env_file), "-f", str(REPO / "docker-compose.yml"), "config", "-q"]
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)

    refused = config(EXAMPLE)
    assert refused.returncode != 0 and "RAY_AUTH_TOKEN" in refused.stderr
    filled = tmp_path / ".env"
    filled.write_text(EXAMPLE.read_text().replace("RAY_AUTH_TOKEN=\n", "RAY_AUTH_TOKEN=0123abcd\n"))
    accepted = config(filled)
    assert accepted.returncode == 0, accepted.stderr
