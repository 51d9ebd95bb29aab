"""The permission-attack suite again, with every reader authenticated by an OIDC token from one
of two trusted issuers of both tenants instead of an API key: the directory of record, mapped
onto the shared names (its ``alice`` is ``user:alice``, the keys' and the catalog's), and a
partner realm, not mapped (its ``alice`` is ``user:partner:alice``). Subjects collide on
purpose: both issuers have an ``alice``, and the partner's ``bob``, ``mallory`` and ``root`` are
the names of API keys' principals. The same oracle, 0 leaks: each identity reads what is shared
with it (or public), never what its namesake of another issuer or key may. Ingest and
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

PARTNER = "partner"  # the partner realm's namespace: its principals are user:partner:<sub>
# The partner realm's readers: (tenant, sub, group claims) -> what they may read. Group claims
# name the catalog's groups on purpose: they become the partner's own group:partner:<name>.
PARTNER_READERS: dict[tuple[str, str], tuple[list[str], set[str]]] = {
    ("acme", "alice"): (["eng", "group:eng"], {"public-a", "partner-a", "partner-eng"}),
    ("acme", "bob"): ([], {"public-a"}),
    ("globex", "alice"): (["eng"], {"public-g", "partner-g"}),
    ("globex", "mallory"): (["hr"], {"public-g"}),
}


@pytest.fixture(scope="module")
def idps() -> Iterator[dict[str, Idp]]:
    """Two identity providers, one JWKS server each, for the whole module."""
    with (
        running_idp("https://directory.test/realms/corp") as directory,
        running_idp("https://partner.test/realms/suppliers") as partner,
    ):
        yield {"directory": directory, "partner": partner}


@pytest.fixture
def token_client(db_url: str, tmp_path: Path, embedder: Any, idps: dict[str, Idp]) -> Iterator[TestClient]:
    issuers = [
        # The directory of record, mapped onto the names keys, groups and ACLs use, by choice.
        issuer_config(idps["directory"], map_subjects=True, map_groups=True),
        issuer_config(idps["partner"], namespace=PARTNER),
    ]
    settings = full_settings(db_url, tmp_path, oidc={"issuers": issuers})
    yield from serving_client(settings, embedder)


@pytest.fixture
def world(token_client: TestClient, db_url: str, idps: dict[str, Idp]) -> suite.World:
    world = suite.World(token_client, db_url)
    directory, partner = idps["directory"], idps["partner"]
    world.readers = {
        (tenant, principal): directory.token(principal.removeprefix("user:"), kid="k1", tenant=tenant)
        for (tenant, principal) in world.readers
    }
    for (tenant, sub), (groups, readable) in PARTNER_READERS.items():
        principal = f"user:{PARTNER}:{sub}"
        world.readers[(tenant, principal)] = partner.token(sub, kid="k1", tenant=tenant, groups=groups)
        world.readable[(tenant, principal)] = readable
    # Tokens, not keys: the server names each reader as the oracle does.
    for (tenant, principal), token in world.readers.items():
        me = token_client.get("/v1/me", headers={"Authorization": f"Bearer {token}"}).json()
        assert (me["tenant_id"], me["principal_id"]) == (tenant, principal), me
    return world


def test_namesakes_of_two_issuers_and_a_key_read_only_their_own(
    world: suite.World, idps: dict[str, Idp]
) -> None:
    """In one world: the key's ``user:alice``, the directory's alice (the same principal,
    mapped) and the partner's alice (its own); the partner's ``root``, the admin key's
    principal's name, is a query-only nobody; delegation reaches the partner's alice as herself."""
    partner = f"user:{PARTNER}"
    expected = [
        ("acme", world.keys[("acme", "user:alice")], suite.READABLE[("acme", "user:alice")], "key alice"),
        (
            "acme",
            world.readers[("acme", "user:alice")],
            suite.READABLE[("acme", "user:alice")],
            "directory alice",
        ),
        (
            "acme",
            world.readers[("acme", f"{partner}:alice")],
            PARTNER_READERS[("acme", "alice")][1],
            "partner alice",
        ),
        (
            "globex",
            world.keys[("globex", "user:mallory")],
            suite.READABLE[("globex", "user:mallory")],
            "key mallory",
        ),
        ("globex", world.readers[("globex", f"{partner}:mallory")], {"public-g"}, "partner mallory"),
    ]
    for tenant, token, allowed, what in expected:
        resp = world.retrieve(token, mode="lexical")
        world.expect_only(resp, allowed, tenant, what)
        assert {r["document_external_id"] for r in resp.json()["results"]} == allowed, what
    root = idps["partner"].token("root", kid="k1", tenant="acme", groups=["admins"])
    me = world.client.get("/v1/me", headers=suite._auth(root)).json()
    assert me["principal_id"] == f"{partner}:root"
    world.expect_only(world.retrieve(root), {"public-a"}, "acme", "partner root")
    refused = world.client.get("/v1/admin/principals", headers=suite._auth(root))
    assert refused.status_code == 403, refused.text
    # A delegating service searching as the partner's alice gets her documents, not alice's.
    resp = world.retrieve(world.delegate["acme"], as_principal=f"{partner}:alice", mode="lexical")
    world.expect_only(resp, {"public-a", "partner-a"}, "acme", "delegate as the partner's alice")
    assert {r["document_external_id"] for r in resp.json()["results"]} == {"public-a", "partner-a"}
    assert world.leaks == [] and world.checks == len(expected) + 2
