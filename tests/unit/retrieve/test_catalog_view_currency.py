"""``CatalogView.chunk_mask`` caches each segment's currency (document known, chunk on its
current version) between writes. Whatever the order of writes and queries, every mask
equals the one computed from scratch: a superseded or deleted chunk is hidden by the first
query after the write, and a cached mask never carries one caller's documents to another."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from authz.acl import AclFilter
from catalog.documents import DocumentRow
from core.records import Acl
from retrieve.catalog_view import CatalogView

T0 = datetime(2026, 1, 1, tzinfo=UTC)
READERS = ("user:ann", "user:bob", "group:eng")


def _doc(
    doc_id: int, version: int | None, *, state: str = "active", reader: str | None = None
) -> DocumentRow:
    return DocumentRow(
        doc_id=doc_id,
        tenant_id="t1",
        external_id=f"d{doc_id}",
        source=None,
        title=None,
        mime_type="text/plain",
        content_hash=None,
        current_version=version,
        metadata={},
        acl=Acl(principals=(reader,) if reader else (), public=reader is None),
        state=state,
        created_at=T0,
        updated_at=T0,
    )


def _reference(
    view: CatalogView, rows: dict[int, DocumentRow], acl: AclFilter, doc_ids: np.ndarray, versions: np.ndarray
) -> np.ndarray:
    """The mask from the documents themselves, with no view arrays."""
    out = np.zeros(len(doc_ids), dtype=bool)
    for i, (doc_id, version) in enumerate(zip(doc_ids.tolist(), versions.tolist(), strict=True)):
        row = rows.get(doc_id)
        if row is None or row.state != "active" or row.current_version != version:
            continue
        out[i] = row.acl.public or bool(set(row.acl.principals) & acl.readers)
    return out


writes = st.tuples(
    st.integers(0, 7),  # document
    st.one_of(st.none(), st.integers(1, 3)),  # its current version (None: no version)
    st.sampled_from(["active", "deleted"]),
    st.one_of(st.none(), st.sampled_from(READERS)),  # None: public
)


@settings(max_examples=60, deadline=None)
@given(
    segment=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 3)), min_size=1, max_size=30),
    steps=st.lists(st.one_of(writes, st.sampled_from(READERS)), min_size=1, max_size=25),
)
def test_cached_masks_equal_masks_from_scratch(segment: list[tuple[int, int]], steps: list[object]) -> None:
    view = CatalogView()
    rows: dict[int, DocumentRow] = {}
    # One segment's chunks: (document, version); documents 8 and 9 are never written (unknown).
    doc_ids = np.array([d for d, _ in segment], dtype=np.int64)
    versions = np.array([v for _, v in segment], dtype=np.int32)
    doc_idx = view.doc_index(doc_ids)
    for step in steps:
        if isinstance(step, tuple):
            doc_id, version, state, reader = step
            rows[doc_id] = _doc(doc_id, version, state=state, reader=reader)
            view.upsert(rows[doc_id])
            doc_idx = view.doc_index(doc_ids)  # a new snapshot maps the documents written
            continue
        acl = AclFilter("t1", frozenset({str(step)}))
        with view.lock:
            first = view.chunk_mask(view.allowed_documents(acl), doc_idx, versions)
            again = view.chunk_mask(view.allowed_documents(acl), doc_idx, versions)  # from the cache
        expected = _reference(view, rows, acl, doc_ids, versions)
        np.testing.assert_array_equal(first, expected)
        np.testing.assert_array_equal(again, expected)


def test_a_superseded_chunk_is_hidden_by_the_first_query_after_the_write() -> None:
    view = CatalogView()
    view.upsert(_doc(1, 1))
    doc_idx = view.doc_index(np.array([1, 1], dtype=np.int64))
    versions = np.array([1, 2], dtype=np.int32)  # chunk 0 on version 1, chunk 1 on version 2
    everyone = AclFilter("t1", frozenset())
    with view.lock:
        assert view.chunk_mask(view.allowed_documents(everyone), doc_idx, versions).tolist() == [True, False]
    view.upsert(_doc(1, 2))  # version 2 goes live: version 1's chunk is superseded
    with view.lock:
        assert view.chunk_mask(view.allowed_documents(everyone), doc_idx, versions).tolist() == [False, True]
    view.upsert(_doc(1, 2, state="deleted"))
    with view.lock:
        assert view.chunk_mask(view.allowed_documents(everyone), doc_idx, versions).tolist() == [False, False]
