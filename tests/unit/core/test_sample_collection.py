"""The BEIR-layout collection the clone ships (``samples/eval``), which the README's
``ragline eval --dataset samples/eval`` example reads: it loads, every judgement names a
document of its corpus, and every question is judged."""

from __future__ import annotations

from pathlib import Path

from core.beir import load_beir

SAMPLE = Path(__file__).resolve().parents[3] / "samples" / "eval"


def test_the_shipped_collection_loads_and_every_judgement_names_a_document() -> None:
    collection = load_beir(SAMPLE)
    corpus = {doc.doc_id: doc for doc in collection.iter_corpus()}
    assert len(corpus) >= 25 and all(doc.title and doc.text for doc in corpus.values())
    assert len(collection.queries) >= 20 and set(collection.qrels) == set(collection.queries)
    judged = {doc_id for graded in collection.qrels.values() for doc_id in graded}
    assert judged <= set(corpus)
    # Graded: the best section 2, a partial answer 1; nothing judged irrelevant is listed.
    grades = [set(graded.values()) for graded in collection.qrels.values()]
    assert all(found <= {1, 2} and 2 in found for found in grades)


def test_its_sections_come_from_the_sample_corpus() -> None:
    """Each section's text is a passage of a file in ``samples/corpus``, so an eval on it
    measures what ``make run`` serves."""
    texts = [path for path in (SAMPLE.parent / "corpus").iterdir() if path.suffix in {".md", ".txt"}]
    sources = {path.stem: path.read_text(encoding="utf-8") for path in texts}
    for doc in load_beir(SAMPLE).iter_corpus():
        source = sources[doc.doc_id.rsplit("-", 1)[0]]
        assert doc.text.splitlines()[0] in source
