"""Every setting is documented in README's configuration table and read by the code.

README's table is the operator's reference: a setting missing from it is one nobody can find
(ten were, before issue 25), and a setting nothing reads (``ingest.write_batch_chunks``,
``Settings.pg_dir`` were) promises a knob that turns nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from core.settings import Settings

REPO = Path(__file__).resolve().parents[3]
# The installed packages: where a setting must be read (tests and benchmarks do not count).
PRODUCT = (
    "core", "catalog", "ingest", "index", "retrieve", "rerank", "authz", "jobs", "services", "wiring", "api",
    "evaluation", "cli",
)  # fmt: skip


def setting_variables() -> dict[str, tuple[str, ...]]:
    """``RAGLINE_...`` variable -> the attribute path it sets, for every leaf setting."""
    out: dict[str, tuple[str, ...]] = {}
    for name, field in Settings.model_fields.items():
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            for sub in section.model_fields:
                out[f"RAGLINE_{name.upper()}__{sub.upper()}"] = (name, sub)
        else:
            out[f"RAGLINE_{name.upper()}"] = (name,)
    return out


def documented_variables(readme: str) -> set[str]:
    """The variables README's configuration table names; ``__X`` after a full name is a
    sibling of it (``RAGLINE_API__HOST`` / ``__PORT``)."""
    section = readme.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        first_cell = line.split("|")[1]
        prefix = ""
        for name in re.findall(r"`([A-Z_]+)`", first_cell):
            if name.startswith("__"):
                names.add(prefix + name.removeprefix("__"))
            else:
                names.add(name)
                prefix = name.rsplit("__", 1)[0] + "__" if "__" in name else "RAGLINE_"
    return names


def test_readme_documents_every_setting() -> None:
    documented = documented_variables((REPO / "README.md").read_text())
    missing = sorted(set(setting_variables()) - documented)
    assert not missing, f"settings missing from README's configuration table: {missing}"


def test_readme_documents_no_setting_that_does_not_exist() -> None:
    documented = {
        v for v in documented_variables((REPO / "README.md").read_text()) if v.startswith("RAGLINE_")
    }
    assert documented - set(setting_variables()) == set()


def test_the_table_parser_reads_sibling_names() -> None:
    table = (
        "\n## Configuration\n"
        "| `RAGLINE_API__HOST` / `__PORT` | x | y |\n| `RAGLINE_PG_PORT` | 1 | z |\n"
        "## Next\n"
    )
    assert documented_variables(table) == {"RAGLINE_API__HOST", "RAGLINE_API__PORT", "RAGLINE_PG_PORT"}


def _product_source() -> str:
    files = [p for package in PRODUCT for p in (REPO / package).rglob("*.py")]
    return "\n".join(p.read_text() for p in files if p != REPO / "core" / "settings.py")


def test_every_setting_is_read_by_the_product() -> None:
    source = _product_source()
    leaves = {path[-1] for path in setting_variables().values()}
    properties = {n for n, v in vars(Settings).items() if isinstance(v, property)}
    unread = sorted(n for n in leaves | properties if not re.search(rf"\.{n}\b", source))
    assert not unread, f"settings nothing reads (remove them, or honour them): {unread}"
