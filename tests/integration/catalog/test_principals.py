"""Groups and the catalog position read together, as the query path does."""

from __future__ import annotations

import psycopg
import pytest

from catalog.changes import current_position
from catalog.principals import groups_and_position, groups_of, replace_groups

pytestmark = pytest.mark.integration


def test_groups_and_position_in_one_statement(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO tenants (tenant_id) VALUES ('acme')")
        assert groups_and_position(conn, tenant_id="acme", principal_id="user:nobody") == (
            (),
            current_position(conn),
        )
        replace_groups(conn, tenant_id="acme", principal_id="user:bob", groups=["group:z", "group:a"])
        conn.commit()
        groups, position = groups_and_position(conn, tenant_id="acme", principal_id="user:bob")
        assert groups == ("group:a", "group:z") == groups_of(conn, tenant_id="acme", principal_id="user:bob")
        assert position == current_position(conn) > 0
        replace_groups(conn, tenant_id="acme", principal_id="user:bob", groups=[])
        conn.commit()
        again = groups_and_position(conn, tenant_id="acme", principal_id="user:bob")
        assert again[0] == () and again[1] > position  # the group change moved the position
