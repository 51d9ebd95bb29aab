"""Index versions an alias pins that hold an erased document (issue 43).

Any alias pins a version against GC: ``live``, ``eval``, an operator's own, and each alias's
rollback target. Rebuilding ``live`` alone would leave the erased text in the files of every
other pinned version, so an erasure finds each aliased version whose files hold one of the
erased chunk rows and points its alias at a version built from the purged catalog (one build
per embedding model: every such alias of that model moves to it), then forgets the alias's
rollback target; a rollback target that holds them is forgotten. GC then deletes the old
versions past its grace. Without a rebuild config (``ragline purge --no-rebuild``) nothing is
moved: the aliases still holding the text are returned, so the caller can say so.
"""

from __future__ import annotations

from collections.abc import Collection, MutableMapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import psycopg

from catalog import indexes as indexes_repo
from catalog.indexes import VersionRow
from core.errors import IndexIntegrityError
from index.manifest import read_manifest
from jobs.rebuild_job import RebuildConfig
from services.caller import Caller
from services.index import forget_rollback, rebuild, swap


@dataclass(frozen=True, slots=True)
class PinnedVersion:
    """A version an alias pinned whose files held erased chunks."""

    alias: str
    version_id: str
    rollback: bool  # it was the alias's rollback target (now forgotten), not its target
    serves: str | None  # the version the alias points at now; None: not moved, it still holds them


def holds_rows(version: VersionRow, rows: Collection[int]) -> bool:
    """Whether ``version``'s files index any of ``rows``; True when they cannot be read (an
    erasure must not assume a version it cannot check is clean)."""
    if version.state != "ready":
        return False
    path = Path(version.path)
    try:
        manifest = read_manifest(path)
        indexed = [np.load(path / s.path / "row_ids.npy") for s in manifest.shards]
    except (IndexIntegrityError, OSError, ValueError):
        return True
    wanted = np.fromiter(rows, dtype=np.int64, count=len(rows))
    return any(bool(np.isin(ids, wanted).any()) for ids in indexed)


def clear_pinned(
    conn: psycopg.Connection,
    conninfo: str,
    config: RebuildConfig | None,
    *,
    rows: Collection[int],
    caller: Caller,
    built: MutableMapping[str, str],
) -> tuple[PinnedVersion, ...]:
    """Move every alias off a version holding any of ``rows`` (the erased chunks) and forget
    rollback targets holding them; ``built`` maps embedding model to a version already built
    from the purged catalog (the erasure's ``live`` rebuild), and gains the builds made here.
    With ``config`` None nothing is rebuilt or moved: the holding aliases are returned with
    ``serves`` None. ``conn`` is autocommit."""
    if not rows:
        return ()
    versions = {v.version_id: v for v in indexes_repo.list_versions(conn)}
    holding = {vid for vid, v in versions.items() if vid not in built.values() and holds_rows(v, rows)}
    out: list[PinnedVersion] = []
    for alias in indexes_repo.alias_rows(conn):
        if alias.version_id in holding:
            serves = None
            if config is not None:
                model = versions[alias.version_id].embedding_model
                serves = _built_for(conn, conninfo, config, model=model, caller=caller, built=built)
                swap(conn, alias=alias.alias, version_id=serves, caller=caller, reasons=("purge",))
                forget_rollback(conn, alias=alias.alias, caller=caller)
            out.append(PinnedVersion(alias.alias, alias.version_id, False, serves))
        elif alias.previous_version is not None and alias.previous_version in holding:
            forget_rollback(conn, alias=alias.alias, caller=caller)
            out.append(PinnedVersion(alias.alias, alias.previous_version, True, alias.version_id))
    return tuple(out)


def _built_for(
    conn: psycopg.Connection,
    conninfo: str,
    config: RebuildConfig,
    *,
    model: str,
    caller: Caller,
    built: MutableMapping[str, str],
) -> str:
    if model not in built:
        cfg = replace(config, model_name=model)
        built[model] = rebuild(conn, conninfo, cfg, caller=caller, reasons=("purge",)).version_id
    return built[model]
