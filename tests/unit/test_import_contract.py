"""The import-layer contract in pyproject.toml: it holds on the tree, and it catches a wrong import.

The second half builds a throwaway tree with the same package names, empty but for one
deliberate upward import (and one circle), and runs ``lint-imports`` on it with the project's
own contract, so a contract that silently stopped checking would fail here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")


def _contract() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]


def _lint(root: Path, config: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), str(config), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _fake_tree(root: Path, extra: dict[str, str]) -> Path:
    """Every contract package as an empty package, plus ``extra`` modules; returns a config file."""
    contract = _contract()
    for package in contract["root_packages"]:
        (root / package).mkdir()
        (root / package / "__init__.py").write_text("")
    (root / "api" / "routes").mkdir()
    (root / "api" / "routes" / "__init__.py").write_text("")
    modules = _contract_modules(contract)
    for module, source in [*modules.items(), *extra.items()]:
        path = root / Path(*module.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        if not (path.parent / "__init__.py").exists():
            (path.parent / "__init__.py").write_text("")
        path.write_text(source or (path.read_text() if path.exists() else ""))
    config = root / "pyproject.toml"
    lines = [
        "[tool.importlinter]",
        f"root_packages = {contract['root_packages']!r}".replace("'", '"'),
        "include_external_packages = false",
    ]
    for c in contract["contracts"]:
        lines.append("[[tool.importlinter.contracts]]")
        lines += [f"{k} = {_toml(v)}" for k, v in c.items()]
    config.write_text("\n".join(lines) + "\n")
    return config


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value).replace("'", '"')


def _contract_modules(contract: dict) -> dict[str, str]:
    """The modules the forbidden contract names (they must exist for lint-imports), with the
    imports its ignore list names in them."""
    out: dict[str, str] = {}
    for c in contract["contracts"]:
        if c.get("type") != "forbidden":
            continue
        for module in c["forbidden_modules"]:
            out.setdefault(module, "")
        for line in c.get("ignore_imports", []):
            importer, imported = (part.strip() for part in line.split("->"))
            out[importer] = out.get(importer, "") + f"import {imported}\n"
            out.setdefault(imported, "")
    return out


def test_the_tree_keeps_the_contract() -> None:
    result = _lint(REPO, REPO / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


def test_a_clean_fake_tree_passes(tmp_path: Path) -> None:
    config = _fake_tree(tmp_path, {"retrieve.service": "import index\nimport catalog\nimport core\n"})
    result = _lint(tmp_path, config)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    config = _fake_tree(tmp_path, {"catalog.jobs": "import api\n"})
    result = _lint(tmp_path, config)
    assert result.returncode != 0
    assert "catalog.jobs -> api" in result.stdout


def test_siblings_in_one_layer_may_not_import_each_other(tmp_path: Path) -> None:
    config = _fake_tree(tmp_path, {"retrieve.service": "import rerank\n"})
    result = _lint(tmp_path, config)
    assert result.returncode != 0
    assert "retrieve.service -> rerank" in result.stdout


def test_a_circle_inside_a_package_breaks_the_contract(tmp_path: Path) -> None:
    config = _fake_tree(
        tmp_path,
        {
            "rerank.cross_encoder": "from rerank import onnx_backend\n",
            "rerank.onnx_backend": "from rerank import cross_encoder\n",
        },
    )
    result = _lint(tmp_path, config)
    assert result.returncode != 0
    assert "No cycles are allowed in rerank" in result.stdout


@pytest.mark.parametrize("importer", ["cli.evaluate", "evaluation.harness", "api.app"])
def test_no_installed_package_imports_the_benchmarks(tmp_path: Path, importer: str) -> None:
    # bench/ is not in the wheel (pyproject's packages.find): an import of it from the product
    # would be a ModuleNotFoundError in the image, so the contract refuses it here.
    config = _fake_tree(tmp_path, {importer: "import bench\n"})
    result = _lint(tmp_path, config)
    assert result.returncode != 0
    assert f"{importer} -> bench" in result.stdout


def test_a_route_writing_the_catalog_directly_breaks_the_contract(tmp_path: Path) -> None:
    # Routes and commands are adapters: the catalog's writes are reached through services/.
    config = _fake_tree(tmp_path, {"api.routes.documents": "from catalog import documents\n"})
    result = _lint(tmp_path, config)
    assert result.returncode != 0
    assert "api.routes.documents -> catalog.documents" in result.stdout


def test_through_the_use_case_layer_is_kept(tmp_path: Path) -> None:
    config = _fake_tree(
        tmp_path,
        {"services.ingest": "from catalog import documents\n", "cli.jobs": "from services import ingest\n"},
    )
    result = _lint(tmp_path, config)
    assert result.returncode == 0, result.stdout + result.stderr
