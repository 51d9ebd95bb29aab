"""The image holds every package the project installs, and no secrets, tests or local state.

Read from the Dockerfile and .dockerignore themselves (``tests/dockerctx.py``); the slow
counterpart that builds the wheel and starts the server from it is tests/e2e/test_image.py.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from setuptools import find_packages

from tests.dockerctx import REPO, DockerIgnore, assemble_app, build_context, project_install_run


def _included() -> list[str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return list(pyproject["tool"]["setuptools"]["packages"]["find"]["include"])


def _missing_from_image(app: Path) -> list[str]:
    wanted = find_packages(where=str(REPO), include=_included())
    return sorted(set(wanted) - set(find_packages(where=str(app), include=_included())))


def test_the_image_holds_every_package_pyproject_installs(tmp_path: Path) -> None:
    app = assemble_app(tmp_path)
    assert not _missing_from_image(app)
    assert {"ragline_client", "cli", "api", "core"} <= set(find_packages(where=str(app), include=_included()))
    # package data and the files ``pip install .`` reads
    assert (app / "pyproject.toml").exists() and (app / "README.md").exists()
    migrations = sorted(p.name for p in (REPO / "catalog" / "migrations").glob("*.sql"))
    assert sorted(p.name for p in (app / "catalog" / "migrations").glob("*.sql")) == migrations
    assert (app / "api" / "console" / "index.html").exists()


def test_a_dockerfile_that_lists_packages_one_by_one_is_caught(tmp_path: Path) -> None:
    # The Dockerfile before issue 23: one COPY per package, ragline_client forgotten.
    old = tmp_path / "Dockerfile"
    old.write_text(
        "FROM python:3.11-slim\nWORKDIR /app\nCOPY pyproject.toml README.md ./\n"
        + "".join(f"COPY {p} {p}\n" for p in ("core", "catalog", "ingest", "index", "retrieve", "rerank"))
        + "".join(f"COPY {p} {p}\n" for p in ("authz", "jobs", "wiring", "api", "cli", "samples"))
        + 'ARG EXTRAS=cpu,onnx\nRUN pip install ".[${EXTRAS}]"\n'
    )
    app = assemble_app(tmp_path / "image", dockerfile=old)
    # ... and every package added since (services, evaluation, issue 25): the reason for ``COPY . .``.
    assert _missing_from_image(app) == ["evaluation", "ragline_client", "services"]


def test_the_benchmarks_stay_out_of_the_wheel_and_the_image(tmp_path: Path) -> None:
    # ``ragline eval`` is the product's (evaluation/); bench/ is a checkout's tool (issue 25).
    wheel = set(find_packages(where=str(REPO), include=_included()))
    assert "evaluation" in wheel and not any(p == "bench" or p.startswith("bench.") for p in wheel)
    assert not (assemble_app(tmp_path) / "bench").exists()


def test_the_project_is_installed_with_extras_pyproject_defines() -> None:
    target = project_install_run()
    assert target.startswith(".[") and target.endswith("]"), target
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert set(target[2:-1].split(",")) <= extras


def test_the_build_context_keeps_secrets_tests_and_local_state_out() -> None:
    context = build_context()
    for rel in context:
        top = rel.split("/")[0]
        assert top not in {".git", ".venv", ".ragline", "tests", "docs", "bench", ".pytest_cache"}, rel
        assert "__pycache__" not in rel and not rel.endswith(".pyc"), rel
    ignore = DockerIgnore((REPO / ".dockerignore").read_text())
    for secret in (".env", ".env.production", "deploy/.env", "deploy/tls/server.key", "certs/api.pem"):
        assert ignore.excluded(secret), secret
    for needed in (
        "pyproject.toml",
        "README.md",
        "ragline_client/__init__.py",
        "catalog/migrations/001_x.sql",
    ):
        assert not ignore.excluded(needed), needed


@pytest.mark.parametrize(
    ("patterns", "path", "excluded"),
    [
        ("tests", "tests/unit/test_a.py", True),  # a folder's contents go with it
        ("tests", "core/tests.py", False),
        ("**/__pycache__", "api/routes/__pycache__/x.pyc", True),
        ("*.egg-info", "ragline.egg-info/PKG-INFO", True),
        ("*.egg-info", "sub/ragline.egg-info/PKG-INFO", False),  # * stays in one segment
        ("docs\n!docs/keep.md", "docs/keep.md", False),  # the last matching line wins
        ("!docs/keep.md\ndocs", "docs/keep.md", True),
        ("# a comment\n\n/build", "build/lib/x.py", True),
    ],
)
def test_dockerignore_rules(patterns: str, path: str, excluded: bool) -> None:
    assert DockerIgnore(patterns).excluded(path) is excluded
