"""The filter every search takes: tenant AND (public OR any reader) AND request filters.

``AclFilter`` is built only here, from an authenticated ``Principal``; search functions take
it as a required argument, and the same object drives dense, lexical and delta search. The
catalog's tombstones are applied by the serving view that evaluates it (a chunk is live only
while its document is active and on the chunk's version).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from authz.principals import Principal
from core.records import Acl, Metadata


@dataclass(frozen=True, slots=True)
class DocumentFilters:
    """Request filters on document attributes; empty fields filter nothing."""

    sources: frozenset[str] = frozenset()
    mime_types: frozenset[str] = frozenset()
    created_after: datetime | None = None
    created_before: datetime | None = None
    metadata: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def empty(self) -> bool:
        return not (
            self.sources or self.mime_types or self.created_after or self.created_before or self.metadata
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    tenant_id: str
    readers: frozenset[str]
    filters: DocumentFilters = DocumentFilters()

    def admits(
        self,
        *,
        tenant_id: str,
        acl: Acl,
        source: str | None,
        mime_type: str,
        created_at: datetime,
        metadata: Metadata,
    ) -> bool:
        """Reference evaluation for one document (the serving view vectorises the same rule)."""
        if tenant_id != self.tenant_id:
            return False
        if not acl.public and not self.readers.intersection(acl.principals):
            return False
        f = self.filters
        if f.sources and source not in f.sources:
            return False
        if f.mime_types and mime_type not in f.mime_types:
            return False
        if f.created_after and created_at < f.created_after:
            return False
        if f.created_before and created_at >= f.created_before:
            return False
        return all(metadata_text(metadata.get(k)) in allowed for k, allowed in f.metadata.items())


def metadata_text(value: object) -> str | None:
    """Metadata values compare as text so '3' and 3 filter alike."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def build_acl_filter(principal: Principal, filters: DocumentFilters | None = None) -> AclFilter:
    return AclFilter(
        tenant_id=principal.tenant_id, readers=principal.readers, filters=filters or DocumentFilters()
    )
