"""Reading BEIR-layout test collections: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``.

Shared by the evaluation harness (``evaluation/``), the reranker's training data (``rerank/``) and
the migration gate, so it sits in ``core`` where every layer may import it.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

Qrels = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class BeirDocument:
    doc_id: str
    title: str
    text: str
    metadata: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class BeirCollection:
    """A BEIR-layout test collection; the corpus is streamed from disk on demand."""

    root: Path
    queries: Mapping[str, str]
    qrels: Qrels

    @property
    def corpus_path(self) -> Path:
        return self.root / "corpus.jsonl"

    def iter_corpus(self) -> Iterator[BeirDocument]:
        """Yield the corpus documents in file order, one line at a time."""
        with self.corpus_path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if line.strip():
                    row = _json_line(line, self.corpus_path, number)
                    metadata = row.get("metadata")
                    yield BeirDocument(
                        doc_id=str(row["_id"]),
                        title=str(row.get("title") or ""),
                        text=str(row.get("text") or ""),
                        metadata=MappingProxyType(dict(metadata) if isinstance(metadata, dict) else {}),
                    )


def _json_line(line: str, path: Path, number: int) -> dict[str, object]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{number}: invalid JSON: {exc.msg}") from exc
    if not isinstance(row, dict) or "_id" not in row:
        raise ValueError(f"{path}:{number}: expected an object with an '_id'")
    return row


def _load_queries(path: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                row = _json_line(line, path, number)
                queries[str(row["_id"])] = str(row.get("text") or "")
    return queries


def _load_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter="\t"), 1):
            if not row or (number == 1 and row[:1] == ["query-id"]):
                continue
            if len(row) != 3:
                raise ValueError(f"{path}:{number}: expected 'query-id corpus-id score', got {row}")
            query_id, doc_id, grade = row
            try:
                qrels.setdefault(query_id, {})[doc_id] = int(grade)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: score {grade!r} is not an integer") from exc
    return qrels


def load_beir(root: Path, split: str = "test") -> BeirCollection:
    """Open a BEIR-layout collection: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``.

    Queries and judgements are read eagerly (they are small); the corpus is streamed by
    :meth:`BeirCollection.iter_corpus`.

    Args:
        root: The collection directory.
        split: The qrels file to read.

    Returns:
        The collection.

    Raises:
        FileNotFoundError: If one of the three files is missing.
        ValueError: On a malformed line (the message names file and line).
    """
    root = Path(root)
    for required in (root / "corpus.jsonl", root / "queries.jsonl", root / "qrels" / f"{split}.tsv"):
        if not required.is_file():
            raise FileNotFoundError(f"BEIR collection file missing: {required}")
    queries = _load_queries(root / "queries.jsonl")
    qrels = _load_qrels(root / "qrels" / f"{split}.tsv")
    frozen = {query_id: MappingProxyType(judged) for query_id, judged in qrels.items()}
    return BeirCollection(root=root, queries=MappingProxyType(queries), qrels=MappingProxyType(frozen))
