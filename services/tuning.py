"""The outcome of ``ragline tune`` for a tenant: its fusion defaults replaced (when the
held-out folds, or the operator, say so) and an audit entry either way.

The search and the statistics live above (``evaluation.tuning``, ``evaluation.cv``); this is
the write, one transaction: the defaults (``services.tenants.set_fusion``, with its own
``fusion.set`` entry) and the ``fusion.tune`` entry that says why they changed or did not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from catalog import audit
from catalog.fusion import FusionOverride
from retrieve.service import FusionConfig
from services.caller import Caller
from services.tenants import set_fusion


@dataclass(frozen=True, slots=True)
class TuningOutcome:
    """What the audit entry keeps of a tuning run (no query text, no document)."""

    applied: bool
    forced: bool
    queries: int
    folds: int
    current: dict[str, Any]  # the fusion before (``FusionConfig.describe``)
    winner: dict[str, Any]  # the setting chosen on every judged query
    ndcg_difference: float  # mean held-out nDCG@10, winner minus current
    interval: tuple[float, float]  # its 95% bootstrap interval
    sources: list[str]  # dataset paths and/or "feedback"


def record_tuning(
    conn: psycopg.Connection,
    caller: Caller,
    *,
    tenant_id: str,
    override: FusionOverride | None,
    base: FusionConfig,
    outcome: TuningOutcome,
) -> None:
    """Store ``override`` as the tenant's fusion defaults (None: leave them) and audit the run
    as ``fusion.tune``, in one transaction: the log never shows a change without its reason."""
    with conn.transaction():
        if override is not None:
            set_fusion(conn, caller, tenant_id=tenant_id, defaults=override, base=base)
        audit.record(
            conn,
            actor=caller.actor,
            action="fusion.tune",
            tenant_id=tenant_id,
            target=tenant_id,
            details={
                "applied": outcome.applied,
                "forced": outcome.forced,
                "fusion": override.given() if override is not None else None,
                "current": outcome.current,
                "winner": outcome.winner,
                "queries": outcome.queries,
                "folds": outcome.folds,
                "ndcg_difference": outcome.ndcg_difference,
                "interval": list(outcome.interval),
                "sources": outcome.sources,
                "via": caller.via,
            },
        )
