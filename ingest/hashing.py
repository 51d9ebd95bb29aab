"""Deterministic content hashes and chunk ids (sha256 over a canonical encoding).

Ids derive from what a chunk is (tenant, document, version, span, level), never from when
it was made, so re-ingesting the same document version is an idempotent upsert. Stored
chunk ids are keyed (HMAC-SHA256 with the deployment's secret, ``catalog.secrets``), so no
one without the key can derive another tenant's ids from a guessed external id and offsets.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from core.errors import InvalidInputError

_CONTENT_DOMAIN = b"ragline/content/v1\x00"
_CHUNK_DOMAIN = b"ragline/chunk/v1\x00"


def content_hash(normalised: bytes, title: str | None, chunking_metadata: Mapping[str, Any]) -> str:
    """Hash a document version: its normalised bytes, title and chunking settings.

    A change of chunking settings (size, overlap, tokenizer) changes the hash, so the
    document is re-chunked even when its bytes did not change.

    Args:
        normalised: The document content after normalisation.
        title: The document title, or ``None``.
        chunking_metadata: JSON-serialisable settings that shape the chunks.

    Returns:
        The sha256 hex digest.

    Raises:
        InvalidInputError: ``chunking_metadata`` holds a value JSON cannot encode.
    """
    try:
        settings = json.dumps(chunking_metadata, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"chunking metadata is not JSON-serialisable: {exc}") from exc
    digest = hashlib.sha256(_CONTENT_DOMAIN)
    # Length prefixes keep field boundaries unambiguous.
    for field in (normalised, json.dumps(title).encode(), settings.encode()):
        digest.update(len(field).to_bytes(8, "big"))
        digest.update(field)
    return digest.hexdigest()


def chunk_id(
    tenant_id: str,
    external_id: str,
    version: int,
    char_start: int,
    char_end: int,
    level: int,
    *,
    key: bytes | None = None,
) -> str:
    """The deterministic id of a chunk: the same span of the same version gets the same id.

    Without ``key`` the id is only provisional (the chunker's, before the version is known;
    never stored); every id written to the catalog is keyed.

    Args:
        tenant_id: The owning tenant.
        external_id: The connector's id of the document.
        version: The document version.
        char_start: Start offset of the chunk in the parsed text.
        char_end: End offset (exclusive).
        level: 0 for a leaf chunk, 1 for a parent.
        key: The deployment's chunk id key: HMAC-SHA256 instead of a plain sha256.

    Returns:
        The hex digest.
    """
    fields = json.dumps([tenant_id, external_id, version, char_start, char_end, level], ensure_ascii=False)
    message = _CHUNK_DOMAIN + fields.encode()
    if key is not None:
        return hmac.new(key, message, hashlib.sha256).hexdigest()
    return hashlib.sha256(message).hexdigest()
