"""The roles a key (or a token) can carry, and what each one lets it do: the one place
role checks are decided.

Two kinds of administrator. A tenant ``admin`` manages its own tenant: keys, principals,
groups, documents, jobs, and sees only its tenant in status, jobs and explain; it implies
``ingest`` and ``query`` in that tenant. A deployment ``operator`` owns what every tenant
shares: index versions and aliases, re-embeds, rebuilds, GC and the deployment status. The
operator role implies nothing else: an operator key reads no tenant's documents unless it
also carries that tenant's roles, and only the CLI or another operator can grant it.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.errors import PermissionDeniedError

INGEST = "ingest"
QUERY = "query"
ADMIN = "admin"
OPERATOR = "operator"

TENANT_ROLES = (INGEST, QUERY, ADMIN)
ROLES = (*TENANT_ROLES, OPERATOR)
# The tenant a CLI-made operator key lives in when none is named: keys need a tenant row,
# and an operator key's tenant grants it nothing.
OPERATOR_TENANT = "operator"


def has_role(roles: Iterable[str], role: str) -> bool:
    """Whether keys holding ``roles`` may act as ``role`` (a tenant admin implies the other
    tenant roles; nothing implies ``operator``)."""
    held = set(roles)
    if role == OPERATOR:
        return OPERATOR in held
    return role in held or ADMIN in held


def require(roles: Iterable[str], role: str) -> None:
    if not has_role(roles, role):
        raise PermissionDeniedError(f"this key lacks the '{role}' role")


def require_any(roles: Iterable[str], *wanted: str) -> None:
    held = list(roles)
    if not any(has_role(held, r) for r in wanted):
        raise PermissionDeniedError(f"this key needs one of the roles {', '.join(wanted)}")


def check_grant(caller_roles: Iterable[str], requested: Iterable[str]) -> None:
    """A key may create keys only with roles it could use itself: tenant roles need the
    tenant ``admin`` role, ``operator`` needs ``operator``."""
    held = list(caller_roles)
    for role in set(requested):
        if role == OPERATOR and not has_role(held, OPERATOR):
            raise PermissionDeniedError("only an operator may create an operator key")
        if role != OPERATOR and not has_role(held, ADMIN):
            raise PermissionDeniedError("only a tenant admin may create tenant keys")
