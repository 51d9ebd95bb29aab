"""Which version of a document a swap points back at, and how an index version's chunking
becomes an ingest's (issue 44: chunking is a property of the corpus)."""

from __future__ import annotations

import pytest

from catalog.chunkings import VersionFacts, dominant_chunking, rechunked_hash, same_content_version
from tests import factories

H1 = "a" * 64  # an ingested version's content hash


def _rechunked(version: int, source: str, chunking: str, *, chunks: int = 3) -> VersionFacts:
    return VersionFacts(version, rechunked_hash(source, chunking), chunking, chunks, chunks)


def test_a_rechunked_version_leads_back_to_its_source_and_forward_again() -> None:
    versions = [VersionFacts(1, H1, "256/32", 2, 2), _rechunked(2, H1, "32/4")]
    assert same_content_version(versions, current=2, chunking="256/32") == 1
    assert same_content_version(versions, current=1, chunking="32/4") == 2


def test_a_changed_or_purged_document_has_no_version_to_point_back_at() -> None:
    changed = [VersionFacts(1, H1, "256/32", 2, 2), VersionFacts(2, "b" * 64, "32/4", 4, 4)]
    assert same_content_version(changed, current=2, chunking="256/32") is None
    purged = [VersionFacts(1, H1, "256/32", 2, 0), _rechunked(2, H1, "32/4")]
    assert same_content_version(purged, current=2, chunking="256/32") is None


def test_the_newest_equivalent_version_wins_over_an_older_one() -> None:
    # ingested 256/32, re-chunked 32/4, re-chunked back to 256/32 from v2's text: v3 is newest
    v2 = _rechunked(2, H1, "32/4")
    versions = [VersionFacts(1, H1, "256/32", 2, 2), v2, _rechunked(3, v2.content_hash, "256/32")]
    assert same_content_version(versions, current=2, chunking="256/32") == 3


def test_the_dominant_chunking_ignores_unknown_versions() -> None:
    assert dominant_chunking({None: 9, "32/4": 3, "256/32": 1}) == "32/4"
    assert dominant_chunking({None: 4}) is None
    assert dominant_chunking({"64/8": 2, "32/4": 2}) == "32/4"  # a tie: a stable answer


def test_an_index_versions_label_sets_only_size_and_overlap() -> None:
    base = factories.chunking()
    cut = base.with_label("128/16")
    assert (cut.chunk_tokens, cut.overlap_tokens, cut.label) == (128, 16, "128/16")
    assert (cut.max_chunks, cut.parse_timeout_seconds, cut.ocr) == (
        base.max_chunks,
        base.parse_timeout_seconds,
        base.ocr,
    )
    for bad in ("128", "16/16", "a/b", "128/-1"):
        with pytest.raises(ValueError):
            base.with_label(bad)
