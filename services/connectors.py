"""A connector's sync state in the catalog (cursor and item fingerprints), so a restart
resumes where the last run stopped: read, merge, reset. A change is audited
(``connector.state``, ``connector.reset``) in the transaction that makes it."""

from __future__ import annotations

import psycopg

from catalog import audit
from catalog import connectors as repo
from catalog.connectors import ConnectorState, SavedState, StateChange
from services.caller import Caller

__all__ = ["ConnectorState", "SavedState", "StateChange", "get_state", "reset_state", "save_state"]


def get_state(conn: psycopg.Connection, *, tenant_id: str, connector: str) -> ConnectorState:
    """The connector's state in the tenant; an empty one if it never saved."""
    return repo.get_state(conn, tenant_id=tenant_id, connector=connector)


def save_state(
    conn: psycopg.Connection, *, caller: Caller, tenant_id: str, connector: str, change: StateChange
) -> SavedState:
    """Merge fingerprints in or out, move the cursor (None: left as it is) and audit
    ``connector.state`` with the size of the change; returns the counts after it."""
    with conn.transaction():
        saved = repo.merge_state(conn, tenant_id=tenant_id, connector=connector, change=change)
        audit.record(
            conn,
            actor=caller.actor,
            action="connector.state",
            tenant_id=tenant_id,
            target=connector,
            details={
                "cursor": change.cursor is not None,
                "set_documents": len(change.set_documents),
                "remove_documents": len(change.remove_documents),
                "set_groups": len(change.set_groups),
                "remove_groups": len(change.remove_groups),
                "via": caller.via,
            },
        )
    return saved


def reset_state(conn: psycopg.Connection, *, caller: Caller, tenant_id: str, connector: str) -> bool:
    """Forget the connector's state (its next run sends everything) and audit
    ``connector.reset``; False when it had none."""
    with conn.transaction():
        had = repo.reset_state(conn, tenant_id=tenant_id, connector=connector)
        audit.record(
            conn,
            actor=caller.actor,
            action="connector.reset",
            tenant_id=tenant_id,
            target=connector,
            details={"had_state": had, "via": caller.via},
        )
    return had
