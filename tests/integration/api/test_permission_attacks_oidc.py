"""The permission-attack suite again, with every reader authenticated by an OIDC token (tenant
and principal from its claims) instead of an API key: the same oracle, 0 leaks. Ingest and
delegating callers stay API keys (a token's roles are its issuer's: query here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.integration.api import test_permission_attacks as suite
from tests.integration.api.conftest import full_settings, serving_client
from tests.integration.api.oidc_idp import Idp, issuer_config, running_idp

# The suite's tests, collected here so that they run with this module's ``world``.
from tests.integration.api.test_permission_attacks import (  # noqa: F401
    test_as_principal_abuse,
    test_cross_tenant_reads_in_every_mode_and_filter,
    test_filter_injection,
    test_other_tenants_jobs_and_documents_by_id,
    test_role_confusion,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def idp() -> Iterator[Idp]:
    with running_idp() as provider:
        yield provider


@pytest.fixture
def token_client(db_url: str, tmp_path: Path, embedder: Any, idp: Idp) -> Iterator[TestClient]:
    # The directory of record: its subjects and groups are the suite's shared names, as the
    # README's example maps them (an unmapped issuer's are namespaced: test_oidc_issuers.py).
    issuer = issuer_config(idp, map_subjects=True, map_groups=True)
    settings = full_settings(db_url, tmp_path, oidc={"issuers": [issuer]})
    yield from serving_client(settings, embedder)


@pytest.fixture
def world(token_client: TestClient, db_url: str, idp: Idp) -> suite.World:
    world = suite.World(token_client, db_url)
    world.readers = {
        (tenant, principal): idp.token(principal.removeprefix("user:"), kid="k1", tenant=tenant)
        for (tenant, principal) in world.readers
    }
    me = token_client.get(
        "/v1/me", headers={"Authorization": f"Bearer {world.readers[('acme', 'user:alice')]}"}
    )
    assert (me.json()["tenant_id"], me.json()["principal_id"]) == ("acme", "user:alice")  # a token, not a key
    return world
