"""``ragline index list|show|rebuild|swap|gc|capacity|verify``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from cli.output import add_json_flag, operator, print_json, print_rows
from core.settings import Settings, get_settings

if TYPE_CHECKING:
    from services.caller import Caller
    from services.index import VersionRow


def register(sub: argparse._SubParsersAction) -> None:
    index = sub.add_parser("index", help="index versions, rebuilds, aliases")
    isub = index.add_subparsers(dest="index_action", required=True)
    lst = isub.add_parser("list", help="versions and aliases")
    add_json_flag(lst)
    lst.set_defaults(handler=_list)
    show = isub.add_parser("show", help="a version: catalog row, shards and manifest")
    show.add_argument("version")
    add_json_flag(show)
    show.set_defaults(handler=_show)
    rebuild = isub.add_parser("rebuild", help="build a new version from the catalog (no re-embedding)")
    rebuild.add_argument("--if-needed", action="store_true", help="only when thresholds are passed")
    rebuild.add_argument("--swap", metavar="ALIAS", help="point ALIAS at the new version when built")
    rebuild.add_argument("--shards", type=int)
    rebuild.set_defaults(handler=_rebuild)
    swap = isub.add_parser("swap", help="point an alias at a version (rollback = swap back)")
    swap.add_argument("--alias", default="live")
    swap.add_argument("--version", required=True)
    swap.set_defaults(handler=_swap)
    gc = isub.add_parser("gc", help="delete versions no alias uses, after the grace period")
    gc.add_argument("--grace-seconds", type=int)
    gc.set_defaults(handler=_gc)
    cap = isub.add_parser("capacity", help="memory and disk for the current corpus, per index kind")
    cap.add_argument(
        "--shard-servers",
        type=int,
        help="RAM per server when N shard servers split the version"
        " (default: index.shard_servers; 0 = in-process only)",
    )
    add_json_flag(cap)
    cap.set_defaults(handler=_capacity)
    verify = isub.add_parser("verify", help="check files and reconcile counts with the catalog")
    verify.add_argument("--alias", default="live")
    verify.set_defaults(handler=_verify)


def _conn(settings: Settings) -> tuple[psycopg.Connection, str]:
    from catalog.connect import migrated_url

    url = migrated_url(settings)
    return psycopg.connect(url), url


def _cli() -> Caller:
    from services.caller import Caller

    return Caller(operator(), "cli")


def _version_dict(v: VersionRow, aliases: dict[str, str]) -> dict[str, object]:
    return {
        "version_id": v.version_id,
        "state": v.state,
        "aliases": sorted(a for a, t in aliases.items() if t == v.version_id),
        "model": v.embedding_model,
        "dim": v.dim,
        "shards": v.n_shards,
        "chunks": v.chunk_count,
        "chunking": v.chunking,  # what new ingests cut with while the version is live
        "position": v.catalog_position,
        "created_at": v.created_at,
        "built_at": v.built_at,
        "path": v.path,
        "error": v.error,
    }


def _list(args: argparse.Namespace) -> int:
    from services.index import list_versions

    conn, _ = _conn(get_settings())
    with conn:
        versions, aliases = list_versions(conn)
        rows = [_version_dict(v, aliases) for v in versions]
    columns = (
        "version_id",
        "state",
        "aliases",
        "model",
        "shards",
        "chunks",
        "chunking",
        "position",
        "built_at",
    )
    print_rows(rows, columns, as_json=args.json, title="index versions")
    return 0


def _show(args: argparse.Namespace) -> int:
    from services.index import get_version, list_versions

    conn, _ = _conn(get_settings())
    with conn:
        row = get_version(conn, args.version)
        _, aliases = list_versions(conn)
    if row is None:
        print(f"ragline: no index version {args.version}", file=sys.stderr)
        return 1
    manifest_path = Path(row.path, "manifest.json")
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else None
    if args.json:
        print_json({**_version_dict(row, aliases), "params": dict(row.params), "manifest": manifest})
        return 0
    for key, value in _version_dict(row, aliases).items():
        print(f"{key:>10}: {'' if value is None else value}")
    if manifest is None:
        print("  manifest: absent")
        return 0
    shards = [
        {
            "shard": i,
            **{k: s.get(k) for k in ("path", "kind", "requested_kind", "n_vectors", "fallback_reason")},
        }
        for i, s in enumerate(manifest.get("shards", []))
    ]
    columns = ("shard", "path", "kind", "requested_kind", "n_vectors", "fallback_reason")
    print_rows(shards, columns, as_json=False, title="shards")
    return 0


def _rebuild(args: argparse.Namespace) -> int:
    from services import index as index_ops
    from wiring import rebuild_config

    settings = get_settings()
    alias = args.swap or "live"
    conn, url = _conn(settings)
    with conn:
        try:
            model = index_ops.rebuild_model(conn, alias=alias, configured_model=settings.embedding_model)
        except index_ops.MigrationRunning as exc:
            print(f"ragline: {exc.message}")
            return 1
        why: list[str] = []
        if args.if_needed:
            advice = index_ops.rebuild_advice(
                conn,
                alias=alias,
                model=model,
                tombstone_ratio=settings.index.rebuild_tombstone_ratio,
                delta_chunks=settings.index.rebuild_delta_chunks,
            )
            if not advice.needed:
                print("no rebuild needed: " + "; ".join(advice.checks))
                return 0
            print("rebuilding: " + "; ".join(advice.reasons) + " (checked: " + "; ".join(advice.checks) + ")")
            why = list(advice.reasons)
        on_ray = index_ops.OnRay(settings.ray_address, settings.data_dir) if settings.ray_address else None
        built = index_ops.rebuild(
            conn,
            url,
            replace(rebuild_config(settings, args.shards), model_name=model),
            caller=_cli(),
            swap_alias=args.swap,
            reasons=why,
            on_ray=on_ray,
        )
        print(f"built {built.version_id}")
        if built.swapped:
            print(f"{built.swapped}: {built.previous} -> {built.version_id}")
    return 0


def _swap(args: argparse.Namespace) -> int:
    from services.index import swap

    conn, _ = _conn(get_settings())
    with conn:
        previous = swap(conn, alias=args.alias, version_id=args.version, caller=_cli())
    print(f"{args.alias}: {previous} -> {args.version}")
    return 0


def _gc(args: argparse.Namespace) -> int:
    from services.index import collect_garbage

    settings = get_settings()
    grace = args.grace_seconds if args.grace_seconds is not None else settings.index.gc_grace_seconds
    conn, _ = _conn(settings)
    with conn:
        report = collect_garbage(conn, grace_seconds=grace, caller=_cli())
    for version_id in report.deleted:
        print(f"deleted {version_id}")
    if not report.deleted:
        print(f"deleted nothing (grace period {grace} s)")
    for version_id, why in report.kept:
        print(f"kept {version_id}: {why}")
    return 0


def _capacity(args: argparse.Namespace) -> int:
    from index.capacity import estimate_capacity, format_report, format_share, split_across_servers
    from index.faiss_shards import choose_kind
    from services.index import corpus_stats

    settings = get_settings()
    conn, _ = _conn(settings)
    with conn:
        stats = corpus_stats(conn, model=settings.embedding_model)
    n, dim = stats.vectors, stats.dim or 384
    ix = settings.index
    per_shard = max(1, n // ix.shards)
    kind = (
        ix.kind
        if ix.kind != "auto"
        else choose_kind(per_shard, flat_max=ix.flat_max_vectors, ivfpq_min=ix.ivfpq_min_vectors)
    )
    report = estimate_capacity(
        n, dim, kind=kind, hnsw_m=ix.hnsw_m, pq_m=ix.pq_m, pq_nbits=ix.pq_nbits, nlist=ix.ivf_nlist
    )
    from index.capacity import model_weight_bytes
    from index.embedder import resolve_model_path

    # One query model per served version: two while a model migration's swap is in progress.
    model_bytes = model_weight_bytes(resolve_model_path(settings.embedding_model))
    n_servers = ix.shard_servers if args.shard_servers is None else args.shard_servers
    if n_servers < 0:
        print("--shard-servers must be >= 0", file=sys.stderr)
        return 2
    share = split_across_servers(report, n_shards=ix.shards, n_servers=n_servers) if n_servers else None
    if args.json:
        print_json(
            {
                **asdict(report),
                "query_model_bytes": model_bytes,
                "migration_query_models_bytes": 2 * model_bytes,
                "shard_servers": asdict(share) if share else None,
            }
        )
    else:
        print(format_report(report))
        mib = model_bytes / 2**20
        print(f"query model (RAM)  {mib:.1f} MiB; {2 * mib:.1f} MiB while a migration swaps models")
        if share is not None:
            print(format_share(share))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from services.index import verify_alias

    conn, _ = _conn(get_settings())
    with conn:
        report = verify_alias(conn, alias=args.alias)
    if report is None:
        print(f"nothing to verify: alias {args.alias} points at no index version yet")
        return 0
    print(json.dumps(report.as_json(), indent=2))
    return 0 if report.ok else 1
