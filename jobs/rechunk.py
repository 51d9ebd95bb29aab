"""Re-chunking for a model migration with new chunk settings, from what was parsed.

Each live document whose current version was cut with other settings becomes a new version,
chunked again from its stored parsed text (``document_texts``) or, for documents ingested
before that was stored, from its stored parent sections; one with neither is reported as not
re-chunkable. The new version's leaves are embedded with every model the catalog needs (the
serving one, so the live version keeps answering from its delta, and the target), and
committed in one transaction like any new version, so deletes and ACL changes meanwhile are
never undone: a document that changed under the pass is left for the next pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psycopg

from catalog import documents as docs_repo
from catalog import reembed as reembed_repo
from catalog import secrets as secrets_repo
from catalog.chunkings import rechunked_hash
from catalog.reembed import ParentSection, StaleDocument
from core.records import ParsedDocument, Section, SectionKind
from index.embedder import Embedder
from ingest.chunking import chunk_document
from ingest.parsed_store import decode_parsed, encode_parsed
from ingest.pipeline import ChunkingConfig, with_version

BATCH_DOCUMENTS = 16


@dataclass(slots=True)
class RechunkCounts:
    from_text: int = 0
    from_parents: int = 0
    changed_meanwhile: int = 0
    not_rechunkable: list[str] = field(default_factory=list)  # "tenant/external_id"

    def as_json(self) -> dict[str, object]:
        return {
            "from_parsed_text": self.from_text,
            "from_parent_sections": self.from_parents,
            "changed_meanwhile": self.changed_meanwhile,
            "not_rechunkable": list(self.not_rechunkable),
        }


def from_parents(parents: Sequence[ParentSection]) -> ParsedDocument | None:
    """A parsed document rebuilt from parent sections placed at their offsets."""
    if not parents:
        return None
    size = max(p.char_end for p in parents)
    chars = ["\n"] * size
    for p in parents:
        chars[p.char_start : p.char_start + len(p.text)] = p.text
    sections = tuple(
        Section(
            p.text,
            SectionKind(p.kind) if p.kind in SectionKind._value2member_map_ else SectionKind.PARAGRAPH,
            tuple(p.section_path),
            p.char_start,
            p.char_start + len(p.text),
            p.page_start,
            p.page_end,
        )
        for p in parents
    )
    return ParsedDocument("".join(chars)[:size], sections)


def _source(conn: psycopg.Connection, doc: StaleDocument) -> tuple[ParsedDocument | None, bytes | None, bool]:
    blob = reembed_repo.parsed_text(conn, doc_id=doc.doc_id, version=doc.version)
    if blob is not None:
        return decode_parsed(blob), blob, True
    return (
        from_parents(reembed_repo.parent_sections(conn, doc_id=doc.doc_id, version=doc.version)),
        None,
        False,
    )


def rechunk_pass(
    conn: psycopg.Connection,
    *,
    chunking: ChunkingConfig,
    models: Callable[[], list[str]],
    embedder_for: Callable[[str], Embedder],
    target_model: str,
    counts: RechunkCounts,
    skipped: set[int],
) -> int:
    """Re-chunk every stale document once; returns how many new versions were committed."""
    done = 0
    while True:
        stale = reembed_repo.stale_documents(
            conn, chunking=chunking.label, exclude=sorted(skipped), limit=BATCH_DOCUMENTS
        )
        conn.commit()
        if not stale:
            return done
        names = sorted({*models(), target_model})
        for doc in stale:
            done += _rechunk_one(conn, doc, chunking, names, embedder_for, target_model, counts, skipped)


def _rechunk_one(
    conn: psycopg.Connection,
    doc: StaleDocument,
    chunking: ChunkingConfig,
    names: list[str],
    embedder_for: Callable[[str], Embedder],
    target_model: str,
    counts: RechunkCounts,
    skipped: set[int],
) -> int:
    parsed, blob, stored = _source(conn, doc)
    if parsed is None:
        counts.not_rechunkable.append(f"{doc.tenant_id}/{doc.external_id}")
        skipped.add(doc.doc_id)
        return 0
    chunks = chunk_document(
        parsed,
        tenant_id=doc.tenant_id,
        external_id=doc.external_id,
        version=0,
        count_tokens=embedder_for(target_model).count_tokens,
        chunk_tokens=chunking.chunk_tokens,
        overlap_tokens=chunking.overlap_tokens,
    )
    leaves = [c.embedding_text for c in chunks if c.level == 0]
    if not leaves:
        counts.not_rechunkable.append(f"{doc.tenant_id}/{doc.external_id}")
        skipped.add(doc.doc_id)
        return 0
    vectors = {name: embedder_for(name).embed(leaves) for name in names}
    with conn.transaction():
        current = docs_repo.get_document(
            conn, tenant_id=doc.tenant_id, external_id=doc.external_id, lock=True
        )
        if current is None or current.state != "active" or current.current_version != doc.version:
            counts.changed_meanwhile += 1  # a push, delete or new version won: next pass decides
            return 0
        version = docs_repo.next_version(conn, doc=current)
        docs_repo.commit_version(
            conn,
            doc=current,
            version=version,
            mime_type=current.mime_type,
            title=current.title,
            metadata=current.metadata,
            acl=current.acl,
            content_hash=rechunked_hash(doc.content_hash, chunking.label),
            byte_size=len(parsed.text.encode()),
            page_count=parsed.page_count,
            warnings=parsed.warnings,
            chunks=with_version(
                chunks,
                tenant_id=doc.tenant_id,
                external_id=doc.external_id,
                version=version,
                key=secrets_repo.chunk_id_key(conn),
            ),
            vectors=vectors[target_model],
            model=target_model,
            extra_vectors={n: v for n, v in vectors.items() if n != target_model},
            parsed_body=blob or encode_parsed(parsed),  # stored from now on
            chunking=chunking.label,
        )
    if stored:
        counts.from_text += 1
    else:
        counts.from_parents += 1
    return 1
