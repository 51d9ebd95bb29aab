"""Groups, the catalog position and the key's revocation read together, as the query path
does; a revocation announced at its commit, not before."""

from __future__ import annotations

import psycopg
import pytest

from authz.api_keys import create_key
from catalog.changes import current_position
from catalog.principals import (
    KEYS_CHANNEL,
    ReaderState,
    groups_of,
    listen_revocations,
    reader_state,
    replace_groups,
    revoke_key,
)

pytestmark = pytest.mark.integration


def test_groups_and_position_in_one_statement(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO tenants (tenant_id) VALUES ('acme')")
        nobody = reader_state(conn, tenant_id="acme", principal_id="user:nobody", key_id="oidc:0123")
        assert nobody == ReaderState((), current_position(conn), key_revoked=False)
        replace_groups(conn, tenant_id="acme", principal_id="user:bob", groups=["group:z", "group:a"])
        conn.commit()
        state = reader_state(conn, tenant_id="acme", principal_id="user:bob", key_id="none")
        assert state.groups == ("group:a", "group:z")
        assert state.groups == groups_of(conn, tenant_id="acme", principal_id="user:bob")
        assert state.position == current_position(conn) > 0
        replace_groups(conn, tenant_id="acme", principal_id="user:bob", groups=[])
        conn.commit()
        again = reader_state(conn, tenant_id="acme", principal_id="user:bob", key_id="none")
        assert again.groups == () and again.position > state.position  # the group change moved it


def test_a_revocation_is_read_and_announced_at_commit(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as listener, psycopg.connect(db_url) as conn:
        listen_revocations(listener)
        key = create_key(conn, tenant_id="acme", roles=["query"], principal_id="user:bob")
        conn.commit()
        bob = {"tenant_id": "acme", "principal_id": "user:bob", "key_id": key.key_id}
        assert not reader_state(conn, **bob).key_revoked
        assert revoke_key(conn, key_id=key.key_id)
        assert not list(listener.notifies(timeout=0.2))  # not before the commit
        conn.commit()
        heard = list(listener.notifies(timeout=2.0, stop_after=1))
        assert [(n.channel, n.payload) for n in heard] == [(KEYS_CHANNEL, key.key_id)]
        assert reader_state(conn, **bob).key_revoked
        assert not revoke_key(conn, key_id=key.key_id)  # already revoked: nothing announced
        conn.commit()
        assert not list(listener.notifies(timeout=0.2))
