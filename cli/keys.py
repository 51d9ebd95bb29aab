"""``ragline keys create|list|revoke``."""

from __future__ import annotations

import argparse
import sys

from authz.roles import OPERATOR, OPERATOR_TENANT, ROLES
from cli.output import add_json_flag, operator, print_rows
from core.settings import get_settings


def register(sub: argparse._SubParsersAction) -> None:
    keys = sub.add_parser("keys", help="API keys")
    ksub = keys.add_subparsers(dest="keys_action", required=True)
    create = ksub.add_parser("create", help="create a key; the token is printed once")
    create.add_argument(
        "--tenant", help=f"the key's tenant (an operator-only key defaults to '{OPERATOR_TENANT}')"
    )
    create.add_argument(
        "--role",
        action="append",
        required=True,
        choices=list(ROLES),
        help="admin: a tenant's admin; operator: the deployment's (index versions, re-embeds, GC)",
    )
    create.add_argument("--principal", help="user:<id> or service:<id> (default service:<tenant>-<role>)")
    create.add_argument("--delegate", action="store_true", help="may act as an end user (as_principal)")
    create.add_argument("--name")
    create.set_defaults(handler=_create)
    lst = ksub.add_parser("list", help="list keys (never the secret)")
    lst.add_argument("--tenant")
    add_json_flag(lst)
    lst.set_defaults(handler=_list)
    rev = ksub.add_parser(
        "revoke", help="revoke a key by id; servers refuse it once notified (milliseconds, at most 1 s)"
    )
    rev.add_argument("key_id")
    rev.set_defaults(handler=_revoke)


def _conninfo() -> str:
    from catalog.connect import migrated_url

    return migrated_url(get_settings())


def _create(args: argparse.Namespace) -> int:
    import psycopg

    from services import access
    from services.caller import Caller

    tenant = args.tenant
    if tenant is None:
        if set(args.role) != {OPERATOR}:
            print("ragline keys create: --tenant is required for tenant roles", file=sys.stderr)
            return 2
        tenant = OPERATOR_TENANT
    with psycopg.connect(_conninfo()) as conn:
        issued = access.create_key(
            conn,
            Caller(operator(), "cli"),
            access.LOCAL_OPERATOR,
            tenant_id=tenant,
            roles=args.role,
            principal_id=args.principal,
            can_delegate=args.delegate,
            name=args.name,
        )
    print(issued.token)
    return 0


def _list(args: argparse.Namespace) -> int:
    import psycopg

    from services import access

    with psycopg.connect(_conninfo()) as conn:
        keys = access.list_keys(conn, tenant_id=args.tenant)
    rows = [  # never the hash, let alone a secret
        {
            "key_id": k.key_id,
            "tenant_id": k.tenant_id,
            "principal_id": k.principal_id,
            "roles": list(k.roles),
            "delegate": k.can_delegate,
            "state": "revoked" if k.revoked_at else "active",
            "name": k.name,
            "created_at": k.created_at,
            "last_used_at": k.last_used_at,
            "revoked_at": k.revoked_at,
        }
        for k in keys
    ]
    columns = ("key_id", "tenant_id", "principal_id", "roles", "delegate", "state", "name", "last_used_at")
    print_rows(rows, columns, as_json=args.json, title="keys")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    import psycopg

    from core.errors import NotFoundError
    from services import access
    from services.caller import Caller

    with psycopg.connect(_conninfo()) as conn:
        try:
            access.revoke_key(conn, Caller(operator(), "cli"), access.LOCAL_OPERATOR, key_id=args.key_id)
        except NotFoundError:
            print("no such active key")
            return 1
    print("revoked")
    return 0
