"""The ingestion stages as plain functions: no database, no Ray, a deterministic embedder."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from email.message import EmailMessage

import numpy as np

from core.records import Acl, Failed, ItemRef, Prepared, SourceDocument, Unchanged
from ingest.parse import EML
from ingest.pipeline import embed, hash_source, prepare, with_version
from tests.factories import chunking

CONFIG = chunking(chunk_tokens=16, overlap_tokens=2)
REF = ItemRef(uuid.uuid4(), 0)


def _words(text: str) -> int:
    return len(text.split())


class CountingEmbedder:
    """Row i of a call is [call number, i]: shows how one encode call is split back."""

    model_name = "fake"
    dim = 2
    max_tokens = 512

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(len(texts))
        return np.array([[len(self.calls), i] for i in range(len(texts))], dtype=np.float32)

    def count_tokens(self, text: str) -> int:
        return _words(text)


def _source(text: str, external_id: str = "doc") -> SourceDocument:
    return SourceDocument("t1", external_id, "text/plain", text.encode())


def _prepare(source: SourceDocument, current_hash: str | None = None) -> Prepared | Unchanged | Failed:
    current = (7, 3) if current_hash is not None else None
    return prepare(
        REF, source, current_hash=current_hash, current=current, count_tokens=_words, config=CONFIG
    )


def test_prepare_chunks_new_content() -> None:
    out = _prepare(_source("one two three. " * 20))
    assert isinstance(out, Prepared)
    assert out.ref == REF and out.content_hash == hash_source(out.source, CONFIG)
    assert any(c.level == 0 for c in out.chunks)


def test_same_content_is_unchanged_without_parsing() -> None:
    source = _source("hello world")
    assert _prepare(source, current_hash=hash_source(source, CONFIG)) == Unchanged(REF, 7, 3)


def test_crlf_and_chunking_settings_change_the_hash_as_expected() -> None:
    assert hash_source(_source("a\r\nb"), CONFIG) == hash_source(_source("a\nb"), CONFIG)
    assert hash_source(_source("a"), CONFIG) != hash_source(_source("a"), replace(CONFIG, chunk_tokens=17))


def test_empty_document_fails_instead_of_raising() -> None:
    out = _prepare(_source("   \n  "))
    assert isinstance(out, Failed) and out.code == "empty_document"


def test_embed_is_one_call_split_back_per_document() -> None:
    docs = [_prepare(_source("alpha beta. " * n, f"d{n}")) for n in (3, 30)]
    prepared = [d for d in docs if isinstance(d, Prepared)]
    embedder = CountingEmbedder()
    out = embed(prepared, embedder)  # type: ignore[arg-type]  # a fake without a token counter
    assert len(embedder.calls) == 1
    leaves = [sum(1 for c in p.chunks if c.level == 0) for p in prepared]
    assert [len(e.vectors) for e in out] == leaves
    assert [e.prepared for e in out] == prepared
    assert out[1].vectors[0, 1] == leaves[0]  # the second document's rows follow the first's


def test_with_version_rederives_ids_and_parent_links() -> None:
    out = _prepare(_source("# Title\n\n" + "word " * 80))
    assert isinstance(out, Prepared)
    v2 = with_version(out.chunks, tenant_id="t1", external_id="doc", version=2, key=b"k" * 32)
    ids = {c.chunk_id for c in v2}
    assert ids.isdisjoint(c.chunk_id for c in out.chunks)
    assert any(c.parent_id for c in v2)
    assert all(c.parent_id is None or c.parent_id in ids for c in v2)
    assert with_version(out.chunks, tenant_id="t1", external_id="doc", version=2, key=b"k" * 32) == v2


def test_an_emails_attachments_inherit_its_metadata_and_acl() -> None:
    """Each attachment document has the message's readers and pushed metadata (``source``
    included) and its headers; its own keys win over pushed ones of the same name, and an
    attached message's own headers over the outer message's."""
    inner = EmailMessage()
    inner["From"], inner["Subject"] = "Bob <bob@example.org>", "Dock hours"
    inner.set_content("The dock closes at six on Fridays.")
    outer = EmailMessage()
    outer["From"], outer["To"], outer["Subject"] = "Alice <alice@example.org>", "ops@example.org", "Weekly"
    outer["Date"] = "Tue, 01 Dec 2026 09:30:00 +0000"
    outer.set_content("See the attached notes.")
    outer.add_attachment(b"Cranes are inspected every ninth week.", "text", "plain", filename="notes.txt")
    outer.add_attachment(inner.as_bytes(), "application", "octet-stream", filename="dock.eml")
    pushed = {"source": "share", "attachment_filename": "pushed.bin"}
    acl = Acl(("user:ann",))
    source = SourceDocument("t1", "mail.eml", EML, outer.as_bytes(), metadata=pushed, acl=acl)
    out = _prepare(source)
    assert isinstance(out, Prepared)
    notes, dock = out.children
    assert notes.parsed is not None and dock.parsed is not None
    assert notes.source.acl == acl and dock.source.acl == acl
    headers = {
        "email_from": "Alice <alice@example.org>",
        "email_to": "ops@example.org",
        "email_date": "2026-12-01T09:30:00+00:00",
    }
    own = {"parent_external_id": "mail.eml", "attachment_filename": "notes.txt", "message_subject": "Weekly"}
    # What the commit stores: the file's metadata under the source's (jobs.commit._metadata).
    assert {**notes.parsed.metadata, **notes.source.metadata} == {**headers, "source": "share", **own}
    stored = {**dock.parsed.metadata, **dock.source.metadata}
    assert stored["email_from"] == "Bob <bob@example.org>" and stored["email_to"] == "ops@example.org"
    assert stored["source"] == "share" and stored["attachment_filename"] == "dock.eml"
