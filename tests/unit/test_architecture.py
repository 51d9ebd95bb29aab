"""Where operations live (issue 25), checked on the tree: routes take their collaborators as
typed dependencies, audit entries are written by the use-case layer, and a job is created in
one place. ``pyproject.toml``'s import contract keeps the layers; these keep what it cannot
see (calls, not imports)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The installed packages (the wheel's), not the benchmarks or the tests.
PRODUCT = [
    p
    for p in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    if p != "bench"
]
# Audit writes outside services/, each its own actor: the migration runner's own entry, the
# retrieve audit's batch writer (entries shaped by services.search), the re-embed worker's swap.
AUDIT_ELSEWHERE = {"catalog/db.py", "jobs/audit_writer.py", "jobs/reembed_job.py"}


def _calls(attribute: str, receivers: set[str] | None = None) -> dict[str, int]:
    """Files of the product calling ``<receiver>.<attribute>(...)`` (any receiver when None)."""
    found: dict[str, int] = {}
    for package in PRODUCT:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                receiver = node.func.value
                named = isinstance(receiver, ast.Name) and (receivers is None or receiver.id in receivers)
                if node.func.attr == attribute and named:
                    rel = path.relative_to(REPO).as_posix()
                    found[rel] = found.get(rel, 0) + 1
    return found


def test_routes_take_collaborators_as_dependencies() -> None:
    readers = [
        p.relative_to(REPO).as_posix()
        for p in (REPO / "api" / "routes").glob("*.py")
        if "app.state" in p.read_text()
    ]
    assert readers == [], "use the typed dependencies of api/deps.py (SearchDep, RunnerDep, ...)"


def test_audit_entries_are_written_by_the_use_case_layer() -> None:
    writers = {**_calls("record", {"audit"}), **_calls("record_many", {"audit"})}
    assert writers, "the scan found no audit write at all: it stopped checking"
    stray = sorted(f for f in writers if not f.startswith("services/") and f not in AUDIT_ELSEWHERE)
    assert stray == [], "an audit entry belongs to its operation in services/"


def test_an_ingest_job_is_created_in_one_place() -> None:
    creators = _calls("create_job")
    assert sorted(creators) == ["services/ingest.py", "services/migration.py"], creators
    assert creators["services/ingest.py"] == 1
