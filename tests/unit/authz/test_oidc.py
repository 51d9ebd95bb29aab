"""Which bearers are JWTs of a configured issuer (the rest are API keys), and how a token's
groups claim becomes groups."""

from __future__ import annotations

import jwt

from authz.oidc import Issuer, JwtAuthenticator, _groups

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
    assert _groups(claims, "groups") == ("group:eng", "group:ops")
    assert _groups({"groups": "eng"}, "groups") == ("group:eng",)
    assert _groups({"groups": {"eng": True}}, "groups") == ()
    assert _groups({"groups": ["eng"]}, None) == ()
