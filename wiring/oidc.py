"""The OIDC/JWT authenticator from ``Settings.oidc`` (None when no issuer is configured)."""

from __future__ import annotations

from authz.oidc import Issuer, JwtAuthenticator
from core.settings import OidcSettings


def jwt_authenticator(settings: OidcSettings) -> JwtAuthenticator | None:
    """The authenticator, not started: the caller owns ``start()`` and ``close()``."""
    if not settings.issuers:
        return None
    issuers = [
        Issuer(
            issuer=i.issuer,
            jwks_url=i.jwks_url,
            audience=(i.audience,) if isinstance(i.audience, str) else tuple(i.audience),
            tenant=i.tenant,
            tenant_claim=i.tenant_claim,
            principal_claim=i.principal_claim,
            groups_claim=i.groups_claim,
            roles=frozenset(i.roles),
            algorithms=tuple(i.algorithms),
            # Filled in by OidcIssuer's validator when not given.
            namespace=i.namespace or "",
            map_subjects=i.map_subjects,
            map_groups=i.map_groups,
        )
        for i in settings.issuers
    ]
    return JwtAuthenticator(
        issuers,
        leeway_s=settings.leeway_s,
        timeout_s=settings.jwks_timeout_s,
        cache_s=settings.jwks_cache_s,
        min_refresh_s=settings.jwks_min_refresh_s,
        wait_s=settings.jwks_wait_s,
    )
