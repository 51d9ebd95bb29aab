"""``ragline status``: what the deployment serves and does, from the catalog."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from cli.output import add_json_flag, print_json, print_rows
from core.settings import get_settings

if TYPE_CHECKING:
    from services.status import StatusReport


def register(sub: argparse._SubParsersAction) -> None:
    status = sub.add_parser(
        "status", help="live versions, shards, delta, jobs, last rebuild, schema migration, lag, headroom"
    )
    add_json_flag(status)
    status.set_defaults(handler=_status)


def _bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _status(args: argparse.Namespace) -> int:
    import psycopg

    from catalog.connect import migrated_url
    from services.rerankers import tenant_rerankers
    from services.status import fusion_by_tenant
    from wiring.search import fusion_config
    from wiring.status import deployment_status

    settings = get_settings()
    with psycopg.connect(migrated_url(settings)) as conn:
        report = deployment_status(settings, conn)
        fusion = [
            {"tenant_id": t, **f.describe()} for t, f in fusion_by_tenant(conn, fusion_config(settings))
        ]
        rerankers = [asdict(r) for r in tenant_rerankers(conn)]
    if args.json:
        print_json({**asdict(report), "fusion": fusion, "rerankers": rerankers})
        return 0
    print_rows(_summary(report), ("item", "value"), as_json=False, title="status")
    _tables(report, fusion)
    _rerankers(rerankers, settings.rerank.model)
    return 0


def _rerankers(rows: list[dict[str, Any]], server_model: str | None) -> None:
    """Each tenant's own reranker: its model, on or off, and its last gate's numbers."""
    print_rows(
        [
            {
                "tenant": r["tenant_id"],
                "model": r["model"] or "(none)",
                "enabled": "on" if r["enabled"] else "off",
                "gate": _gate_cell(r["gate"]),
                "decided": f"{r['decided_at']:%Y-%m-%d %H:%M:%S} by {r['decided_by']}",
            }
            for r in rows
        ],
        ("tenant", "model", "enabled", "gate", "decided"),
        as_json=False,
        title=f"rerankers (a tenant without a row: the server's, {server_model or 'none'})",
    )


def _gate_cell(gate: dict[str, Any] | None) -> str:
    if gate is None:
        return "turned off, no gate"
    lo, hi = gate["interval"]
    verdict = "passed" if gate["passed"] else "failed"
    forced = ", forced off" if gate.get("forced_off") else ""
    lat = gate.get("latency")  # gates before issue 44 measured none
    latency = (
        f", rerank p95 {lat['p95_ms']:.0f}/{lat['budget_ms']} ms, {lat['reranked_share']:.0%} reranked"
        if lat
        else ""
    )
    return (
        f"{verdict}{forced}: nDCG@10 {gate['ndcg_without']:.4f} -> {gate['ndcg_with']:.4f}"
        f" ({gate['ndcg_difference']:+.4f}, 95% {lo:+.4f}..{hi:+.4f}), {gate['queries']} queries"
        f"{latency}"
    )


def _summary(report: StatusReport) -> list[dict[str, Any]]:
    """The report's single values, one row each."""
    rebuild = report.last_rebuild
    migration = report.last_migration
    cap = report.capacity
    lag = "none" if report.freshness_lag_s is None else f"{report.freshness_lag_s:.1f} s"
    summary: list[dict[str, Any]] = [
        {"item": "model", "value": report.model},
        {"item": f"alias {report.alias}", "value": report.live_version or "(no version)"},
        {"item": "delta chunks", "value": report.delta_chunks},
        {"item": "catalog position", "value": report.catalog_position},
        {"item": "changes since build", "value": report.changes_since_build},
        {"item": "freshness lag", "value": lag},
        {
            "item": "last index rebuild",
            "value": f"{rebuild.version_id} {rebuild.state} {rebuild.created_at:%Y-%m-%d %H:%M:%S}"
            if rebuild
            else "none",
        },
        {
            # The catalog's schema (catalog/migrations), not a model migration (`ragline reembed`,
            # a job: see the jobs tables).
            "item": "schema migration (last applied)",
            "value": (
                f"{migration.number:03d}_{migration.name} applied {migration.applied_at:%Y-%m-%d %H:%M:%S}"
                if migration
                else "none"
            ),
        },
    ]
    if cap is not None:
        summary += [
            {"item": "RAM to serve", "value": _bytes(cap.serve_ram_bytes)},
            {"item": "RAM headroom after a swap", "value": _bytes(cap.ram_headroom_bytes)},
            {"item": "disk headroom for one more version", "value": _bytes(cap.disk_headroom_bytes)},
        ]
    return summary


def _tables(report: StatusReport, fusion: list[dict[str, Any]]) -> None:
    """Aliases, shards, running jobs and each tenant's fusion, a table each."""
    print_rows(
        [asdict(a) for a in report.aliases],
        ("alias", "version_id", "previous_version"),
        as_json=False,
        title="aliases",
    )
    print_rows(
        [asdict(s) for s in report.shards],
        ("shard", "kind", "vectors", "hidden", "hidden_fraction"),
        as_json=False,
        title="shards",
    )
    print_rows(
        [asdict(j) for j in report.running_jobs],
        ("job_id", "tenant_id", "kind", "state", "progress", "started_at"),
        as_json=False,
        title="running jobs",
    )
    print_rows(
        [
            {
                "tenant": f["tenant_id"],
                "method": f["method"],
                "rrf_k": f["rrf_k"],
                "weights": f"dense {f['weights']['dense']:g}, lexical {f['weights']['lexical']:g}",
                "candidates": f"dense {f['candidates']['dense']}, lexical {f['candidates']['lexical']}",
            }
            for f in fusion
        ],
        ("tenant", "method", "rrf_k", "weights", "candidates"),
        as_json=False,
        title="fusion (settings, then each tenant's stored defaults over them)",
    )
