from __future__ import annotations

import pytest

from core.errors import InvalidInputError
from ingest.hashing import chunk_id, content_hash


def test_content_hash_is_deterministic_and_sensitive() -> None:
    base = content_hash(b"hello", "Title", {"chunk_tokens": 256, "overlap": 32})
    assert base == content_hash(b"hello", "Title", {"overlap": 32, "chunk_tokens": 256})
    assert len(base) == 64 and int(base, 16) >= 0
    assert base != content_hash(b"hello!", "Title", {"chunk_tokens": 256, "overlap": 32})
    assert base != content_hash(b"hello", None, {"chunk_tokens": 256, "overlap": 32})
    assert base != content_hash(b"hello", "Title", {"chunk_tokens": 128, "overlap": 32})


def test_content_hash_rejects_unserialisable_metadata() -> None:
    with pytest.raises(InvalidInputError):
        content_hash(b"x", None, {"bad": object()})


def test_chunk_id_is_deterministic_and_field_sensitive() -> None:
    args = ("tenant", "doc-1", 3, 10, 50, 0)
    assert chunk_id(*args) == chunk_id(*args)
    variants = {
        chunk_id("tenant2", "doc-1", 3, 10, 50, 0),
        chunk_id("tenant", "doc-2", 3, 10, 50, 0),
        chunk_id("tenant", "doc-1", 4, 10, 50, 0),
        chunk_id("tenant", "doc-1", 3, 11, 50, 0),
        chunk_id("tenant", "doc-1", 3, 10, 51, 0),
        chunk_id("tenant", "doc-1", 3, 10, 50, 1),
        # Field boundaries are unambiguous: moving a character between fields changes the id.
        chunk_id("tenantd", "oc-1", 3, 10, 50, 0),
    }
    assert chunk_id(*args) not in variants
    assert len(variants) == 7


def test_a_keyed_chunk_id_is_not_derivable_without_the_key() -> None:
    args = ("tenant", "doc-1", 3, 10, 50, 0)
    key, other = b"k" * 32, b"j" * 32
    keyed = chunk_id(*args, key=key)
    assert keyed == chunk_id(*args, key=key) and len(keyed) == 64  # still an idempotent id
    assert keyed != chunk_id(*args) and keyed != chunk_id(*args, key=other)
    assert chunk_id("tenant", "doc-1", 3, 10, 51, 0, key=key) != keyed
