"""A tenant's own reranker: the outcome of its gate (``ragline reranker gate``) and turning
it off, each one transaction with its audit entry; what ``ragline status`` shows of it.

The measurement lives above (``evaluation.reranker_gate``); this is the write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

from catalog import audit
from catalog import rerankers as rerankers_repo
from catalog.rerankers import TenantReranker
from core.errors import NotFoundError
from services.caller import Caller

__all__ = ["GateOutcome", "TenantReranker", "record_gate", "tenant_rerankers", "turn_off"]


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """What the row and the audit entry keep of a gate (no query text, no document)."""

    model: str
    passed: bool
    forced_off: bool  # measured and stored, but kept off whatever the numbers
    ndcg_without: float  # mean nDCG@10 over the judged queries, unreranked
    ndcg_with: float  # the same queries reranked by ``model`` as served
    ndcg_difference: float  # mean of the paired per-query differences (with - without)
    interval: tuple[float, float]  # its 95% paired bootstrap interval
    queries: int
    sources: list[str]  # dataset paths and/or "feedback"
    rule: str  # the decision rule, in words
    # The rerank stage as measured against the serving budget (evaluation.reranker_gate's
    # GateLatency: budget_ms, p50_ms, p95_ms, queries, reranked, reranked_share) and why the
    # gate refused the model whatever its nDCG (not reranked within the budget).
    latency: dict[str, Any] | None = None
    refused: list[str] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        return self.passed and not self.forced_off

    def report(self) -> dict[str, Any]:
        """The row's ``gate`` column."""
        return {
            "passed": self.passed,
            "forced_off": self.forced_off,
            "ndcg_without": self.ndcg_without,
            "ndcg_with": self.ndcg_with,
            "ndcg_difference": self.ndcg_difference,
            "interval": list(self.interval),
            "queries": self.queries,
            "sources": self.sources,
            "rule": self.rule,
            "latency": self.latency,
            "refused": self.refused,
        }


def record_gate(conn: psycopg.Connection, caller: Caller, *, tenant_id: str, outcome: GateOutcome) -> None:
    """Store the tenant's reranker as the gate decided (on only when it passed and was not
    forced off) with its report, and audit it as ``reranker.gate``, in one transaction; every
    retrieve of the tenant follows the row from the commit on."""
    with conn.transaction():
        rerankers_repo.set_tenant_reranker(
            conn,
            tenant_id=tenant_id,
            model=outcome.model,
            enabled=outcome.enabled,
            gate=outcome.report(),
            actor=caller.actor,
        )
        details = outcome.report()
        del details["rule"]
        audit.record(
            conn,
            actor=caller.actor,
            action="reranker.gate",
            tenant_id=tenant_id,
            target=tenant_id,
            details={**details, "model": outcome.model, "enabled": outcome.enabled, "via": caller.via},
        )


def turn_off(conn: psycopg.Connection, caller: Caller, *, tenant_id: str) -> TenantReranker:
    """Turn the tenant's reranker off (its model and last gate report kept), audited: its
    retrieves rerank with nothing, not even the server's model, until a gate passes again.

    Raises:
        NotFoundError: no such tenant.
    """
    with conn.transaction():
        if not rerankers_repo.tenant_exists(conn, tenant_id=tenant_id):
            raise NotFoundError(f"no tenant {tenant_id!r}")
        before = rerankers_repo.tenant_reranker(conn, tenant_id=tenant_id)
        model = before.model if before is not None else None
        gate = before.gate if before is not None else None
        rerankers_repo.set_tenant_reranker(
            conn, tenant_id=tenant_id, model=model, enabled=False, gate=gate, actor=caller.actor
        )
        audit.record(
            conn,
            actor=caller.actor,
            action="reranker.off",
            tenant_id=tenant_id,
            target=tenant_id,
            details={"model": model, "had_row": before is not None, "via": caller.via},
        )
        after = rerankers_repo.tenant_reranker(conn, tenant_id=tenant_id)
    if after is None:  # written just above, in this transaction
        raise RuntimeError("the tenant's reranker row vanished")
    return after


def tenant_rerankers(conn: psycopg.Connection) -> list[TenantReranker]:
    """Every tenant's reranker row (``ragline status``)."""
    return rerankers_repo.all_tenant_rerankers(conn)
