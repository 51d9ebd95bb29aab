"""What each role lets a key do: a tenant admin implies its tenant's roles, nothing implies
the operator role, and keys can only grant what their creator could use."""

from __future__ import annotations

import pytest

from authz.roles import ADMIN, INGEST, OPERATOR, QUERY, check_grant, has_role, require_any
from core.errors import PermissionDeniedError


def test_admin_implies_tenant_roles_not_operator() -> None:
    assert has_role([ADMIN], INGEST) and has_role([ADMIN], QUERY) and has_role([ADMIN], ADMIN)
    assert not has_role([ADMIN], OPERATOR)
    assert has_role([OPERATOR], OPERATOR)
    for role in (INGEST, QUERY, ADMIN):
        assert not has_role([OPERATOR], role)


def test_require_any() -> None:
    require_any([OPERATOR], ADMIN, OPERATOR)
    require_any([ADMIN], ADMIN, OPERATOR)
    with pytest.raises(PermissionDeniedError):
        require_any([INGEST, QUERY], ADMIN, OPERATOR)


@pytest.mark.parametrize(
    ("caller", "requested", "ok"),
    [
        ([ADMIN], [QUERY, INGEST, ADMIN], True),
        ([ADMIN], [OPERATOR], False),
        ([ADMIN], [ADMIN, OPERATOR], False),
        ([OPERATOR], [OPERATOR], True),
        ([OPERATOR], [QUERY], False),
        ([ADMIN, OPERATOR], [ADMIN, OPERATOR], True),
    ],
)
def test_a_key_grants_only_what_its_creator_holds(caller: list[str], requested: list[str], ok: bool) -> None:
    if ok:
        check_grant(caller, requested)
    else:
        with pytest.raises(PermissionDeniedError):
            check_grant(caller, requested)
