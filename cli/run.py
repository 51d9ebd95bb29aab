"""``ragline run``: the whole platform on one machine, as ``make run`` starts it.

Starts (or reuses) the local PostgreSQL, applies migrations, creates development keys,
ingests the sample corpus through the Ray pipeline, builds an index version and points
``live`` at it, then serves the API and prints a ready-to-paste curl.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from core.settings import Settings, get_settings

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "corpus"
TENANT = "demo"


def _dev_keys(url: str, settings: Settings) -> dict[str, str]:
    """Reuse the keys of an earlier run when they still work, else create them (audited, as
    ``ragline keys create`` is)."""
    import psycopg

    from cli.output import operator
    from services import access
    from services.caller import Caller

    path = settings.data_dir / "dev-keys.json"
    caller = Caller(operator(), "cli")
    with psycopg.connect(url) as conn:
        if path.exists():
            keys = json.loads(path.read_text())
            if access.tokens_valid(conn, list(keys.values())):
                return dict(keys)

        def key(roles: list[str], name: str, principal: str | None = None) -> str:
            issued = access.create_key(
                conn,
                caller,
                access.LOCAL_OPERATOR,
                tenant_id=TENANT,
                roles=roles,
                principal_id=principal,
                name=name,
            )
            return issued.token

        keys = {
            "query": key(["query"], "dev query key", "user:demo"),
            "ingest": key(["ingest"], "dev ingest key"),
            "admin": key(["admin", "operator"], "dev admin key"),
        }
        access.sync_groups(conn, caller, tenant_id=TENANT, principal_id="user:demo", groups=["group:eng"])
    path.write_text(json.dumps(keys, indent=2))
    path.chmod(0o600)
    return keys


def _ingest_samples(settings: Settings) -> None:
    from cli.jobs import ingest_paths

    acl_map = SAMPLES / "acl.json"
    args = argparse.Namespace(
        paths=[SAMPLES],
        tenant=TENANT,
        acl="",
        public=True,
        metadata=[],
        acl_map=acl_map if acl_map.exists() else None,
        no_ray=False,
    )
    job_id, state = ingest_paths(
        args,
        settings.model_copy(
            update={"ingest": settings.ingest.model_copy(update={"inline_max_documents": 0})}
        ),
    )
    print(f"sample corpus: job {job_id} {state}", file=sys.stderr)


def _build_index(url: str, settings: Settings) -> None:
    import psycopg

    from cli.output import operator
    from services import index as index_ops
    from services.caller import Caller
    from wiring import rebuild_config

    with psycopg.connect(url) as conn:
        # Only the first start points ``live`` at a version: later starts leave an operator's
        # swap or rollback alone (fresh documents are served from the delta; the maintenance
        # loop rebuilds on its thresholds).
        if index_ops.serves(conn, alias="live"):
            return
        advice = index_ops.rebuild_advice(
            conn, alias="live", model=settings.embedding_model, tombstone_ratio=0.0001, delta_chunks=1
        )
        if not advice.needed:
            return
        version = index_ops.rebuild(
            conn,
            url,
            rebuild_config(settings),
            caller=Caller(operator(), "cli"),
            swap_alias="live",
            reasons=["first start", *advice.reasons],
        ).version_id
    print(f"index version {version} is live", file=sys.stderr)


def run(settings: Settings) -> int:
    from catalog.connect import database_url
    from catalog.db import apply_migrations
    from cli.uvicorn_stack import serve_app, uvicorn_stack

    stack = uvicorn_stack(settings)  # a bad choice fails before the setup, not after it
    url = database_url(settings)
    apply_migrations(url)
    print(f"PostgreSQL: {url}", file=sys.stderr)
    keys = _dev_keys(url, settings)
    if SAMPLES.exists():
        _ingest_samples(settings)
        _build_index(url, settings)
        import ray

        ray.shutdown()  # the server needs no Ray; give its memory back
    host, port = settings.api.host, settings.api.port
    print(
        f"""
ragline is serving on http://{host}:{port}  (dev keys in {settings.data_dir / "dev-keys.json"})
  query key  (user:demo, group:eng): {keys["query"]}
  ingest key: {keys["ingest"]}
  admin key:  {keys["admin"]}

Console: http://{host}:{port}/console/  (sign in with the admin key)

Try:
  curl -s http://{host}:{port}/v1/retrieve -H 'Authorization: Bearer {keys["query"]}' \\
       -H 'Content-Type: application/json' \\
       -d '{{"query": "how do I fail over the PostgreSQL primary?", "top_k": 5, "max_context_tokens": 400}}'
""",
        file=sys.stderr,
    )
    os.environ["RAGLINE_DATABASE_URL"] = url
    get_settings.cache_clear()  # the app factory must see the resolved URL
    serve_app(stack, host, port)
    return 0
