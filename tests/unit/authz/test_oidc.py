"""Which bearers are JWTs of a configured issuer (the rest are API keys), how a token's
subject and groups claim become the issuer's own principal and groups, and that key
principals and other issuers' names cannot be reached from a token."""

from __future__ import annotations

import dataclasses

import jwt
import pytest

from authz.api_keys import create_key
from authz.oidc import Issuer, JwtAuthenticator, _groups, _principal
from core.errors import InvalidInputError
from core.settings import OidcIssuer, OidcSettings

ISSUER = Issuer(
    issuer="https://idp",
    jwks_url="http://127.0.0.1:9/jwks",
    audience=("ragline",),
    tenant="acme",
    tenant_claim=None,
    principal_claim="sub",
    groups_claim="groups",
    roles=frozenset({"query"}),
    algorithms=("RS256",),
    namespace="corp",
)


def _auth() -> JwtAuthenticator:
    return JwtAuthenticator([ISSUER], leeway_s=0, timeout_s=1, cache_s=60, min_refresh_s=60)


def test_only_jwts_of_configured_issuers_are_tokens() -> None:
    auth = _auth()
    assert auth.issuer_of(jwt.encode({"iss": "https://idp"}, "k" * 32, algorithm="HS256")) is ISSUER
    for other in (
        "rl_0123456789ab_" + "x" * 43,  # an API key
        jwt.encode({"iss": "https://elsewhere"}, "k" * 32, algorithm="HS256"),
        jwt.encode({"sub": "no issuer"}, "k" * 32, algorithm="HS256"),
        "a.b.c",
        "...",
    ):
        assert auth.issuer_of(other) is None, other


def test_groups_claim() -> None:
    claims = {"groups": ["eng", "group:ops", "eng", "has space", 3, None, "group:"]}
    assert _groups(claims, "groups", None) == ("group:eng", "group:ops")
    assert _groups(claims, "groups", "corp") == ("group:corp:eng", "group:corp:ops")
    assert _groups({"groups": "eng"}, "groups", None) == ("group:eng",)
    assert _groups({"groups": {"eng": True}}, "groups", None) == ()
    assert _groups({"groups": ["eng"]}, None, None) == ()


def test_token_principals_are_the_issuers_own() -> None:
    claims = {"sub": "alice", "groups": ["eng", "group:admins"]}
    corp = _principal(claims, ISSUER)
    partner = _principal(claims, dataclasses.replace(ISSUER, issuer="https://partner", namespace="partner"))
    assert (corp.principal_id, corp.groups) == ("user:corp:alice", ("group:corp:admins", "group:corp:eng"))
    assert (partner.principal_id, partner.groups) == (
        "user:partner:alice",
        ("group:partner:admins", "group:partner:eng"),
    )
    # Only an explicit mapping gives the shared names keys, the catalog and ACLs use.
    mapped = _principal(claims, dataclasses.replace(ISSUER, map_subjects=True))
    assert (mapped.principal_id, mapped.groups) == ("user:alice", ("group:corp:admins", "group:corp:eng"))
    both = _principal(claims, dataclasses.replace(ISSUER, map_subjects=True, map_groups=True))
    assert both.groups == ("group:admins", "group:eng")
    # A subject cannot smuggle a namespace or a key principal's form in.
    for sub in ("partner:alice", "auth0|1", "a b", ""):
        with pytest.raises(InvalidInputError):
            _principal({"sub": sub}, ISSUER)


def test_no_key_acts_as_an_issuers_user() -> None:
    # The refusal comes before any SQL: no connection is needed to see it.
    with pytest.raises(InvalidInputError, match="key's principal"):
        create_key(None, tenant_id="acme", roles=["query"], principal_id="user:corp:alice")  # type: ignore[arg-type]


def test_issuer_namespaces() -> None:
    base = {"jwks_url": "https://idp/jwks", "audience": "ragline", "tenant": "acme"}
    one, two = OidcIssuer(issuer="https://a", **base), OidcIssuer(issuer="https://b", **base)
    # A default derived from the issuer alone: stable across restarts, distinct per issuer.
    assert one.namespace == OidcIssuer(issuer="https://a", **base).namespace != two.namespace
    assert one.namespace is not None and one.namespace.startswith("iss-")
    for bad in ("", "Corp", "a:b", "-x", "x" * 33, "a b"):
        with pytest.raises(ValueError):
            OidcIssuer(issuer="https://a", namespace=bad, **base)
    with pytest.raises(ValueError, match="namespace"):
        OidcSettings(
            issuers=[
                {"issuer": "https://a", "namespace": "corp", **base},
                {"issuer": "https://b", "namespace": "corp", **base},
            ]
        )
