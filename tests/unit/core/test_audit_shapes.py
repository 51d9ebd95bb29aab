"""One shape per audit action: ``catalog.audit.check`` refuses unknown actions and details that
miss or add keys, and every action the source writes is registered."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from catalog.audit import ACTIONS, check

ROOT = Path(__file__).resolve().parents[3]


def test_check_refuses_unknown_actions_and_other_shapes() -> None:
    check("document.delete", {"chunks": 2, "via": "api"})
    with pytest.raises(ValueError, match="unknown audit action"):
        check("document.teleport", {"via": "api"})
    with pytest.raises(ValueError, match=r"missing \['via'\]"):
        check("document.delete", {"chunks": 2})
    with pytest.raises(ValueError, match=r"unexpected \['extra'\]"):
        check("document.delete", {"chunks": 2, "via": "cli", "extra": 1})
    check("retrieve", {**dict.fromkeys(ACTIONS["retrieve"].details), "query": "q"})  # optional key


def test_every_action_written_in_the_source_is_registered() -> None:
    written: set[str] = set()
    for package in ("api", "authz", "catalog", "cli", "jobs", "services", "wiring"):
        for path in (ROOT / package).rglob("*.py"):
            written |= set(re.findall(r'action="([a-z_]+\.[a-z_.]+|retrieve)"', path.read_text()))
    assert written, "found no audit writes: the pattern is stale"
    assert written <= set(ACTIONS), sorted(written - set(ACTIONS))
    every_write_has_via = {
        a for a, s in ACTIONS.items() if a not in ("retrieve", "admin.retrieve", "schema.migrate")
    }
    assert all("via" in ACTIONS[a].details for a in every_write_has_via)
