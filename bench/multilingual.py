"""English BM25 with the multilingual analysis on vs off, and a multilingual lexical check.

Run: ``python -m bench.multilingual``. For each shared collection (``../shared/data/cranfield``,
``cisi``) one ``LexicalShard`` over title + text is built with the production tokenizer
(``index.tokenize.Tokenizer``) as configured today (the baseline) and with
``multilingual=True``; nDCG@10 of both runs is computed in the same process, and the
difference must stay within 0.002 (issue 27). Then ``MULTILINGUAL`` (the same facts in
English, German, French, Spanish, Chinese and Japanese, written here) is indexed both ways,
and each query in every language should rank its own-language document first.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from bench.common import print_table
from core.beir import load_beir
from core.ir_metrics import evaluate_run
from index.bm25_shards import LexicalShard
from index.tokenize import Tokenizer

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"

# (language, document, query): the document answers the query; the other languages' documents
# say the same thing, so only the analysis of the query's own language can put its own first.
MULTILINGUAL = [
    (
        "en",
        "The signing keys of the payment service are rotated every ninety days by the security team.",
        "how often are the signing keys rotated",
    ),
    (
        "de",
        "Die Signaturschlüssel des Zahlungsdienstes werden vom Sicherheitsteam alle neunzig Tage gewechselt.",
        "wie oft werden die Signaturschlüssel des Zahlungsdienstes gewechselt",
    ),
    (
        "fr",
        "Les clés de signature du service de paiement sont changées tous les quatre-vingt-dix jours.",
        "à quelle fréquence les clés de signature du paiement sont-elles changées",
    ),
    (
        "es",
        "Las claves de firma del servicio de pagos se rotan cada noventa días por el equipo de seguridad.",
        "cada cuánto se rotan las claves de firma del servicio de pagos",
    ),
    ("zh", "支付服务的签名密钥由安全团队每九十天轮换一次。", "签名密钥多久轮换一次"),
    (
        "ja",
        "決済サービスの署名鍵はセキュリティチームが九十日ごとに交換します。",
        "署名鍵はどのくらいの頻度で交換しますか",
    ),
]


def _ndcg(root: Path, tokenizer: Tokenizer) -> tuple[float, float]:
    collection = load_beir(root)
    docs = list(collection.iter_corpus())
    started = time.perf_counter()
    shard = LexicalShard.build(
        [f"{d.title} {d.text}" for d in docs], np.arange(len(docs), dtype=np.int64), tokenizer
    )
    run = {}
    for qid, query in collection.queries.items():
        _scores, positions = shard.search(query, 10, allowed=None)
        run[qid] = [docs[p].doc_id for p in positions]
    seconds = time.perf_counter() - started
    return evaluate_run(run, collection.qrels, [10]).table()["ndcg@10"], seconds


def own_language_first(tokenizer: Tokenizer) -> dict[str, bool]:
    """For each language's query: does its own-language document rank first?"""
    shard = LexicalShard.build(
        [doc for _, doc, _ in MULTILINGUAL], np.arange(len(MULTILINGUAL), dtype=np.int64), tokenizer
    )
    out = {}
    for index, (language, _doc, query) in enumerate(MULTILINGUAL):
        _scores, positions = shard.search(query, 3, allowed=None)
        out[language] = len(positions) > 0 and int(positions[0]) == index
    return out


def main() -> None:
    base, multi = Tokenizer(), Tokenizer(multilingual=True)
    rows = []
    for name in ("cranfield", "cisi"):
        root = SHARED / name
        if not root.exists():
            print(f"{root} absent: skipped")
            continue
        ndcg_base, seconds_base = _ndcg(root, base)
        ndcg_multi, seconds_multi = _ndcg(root, multi)
        rows.append(
            [
                name,
                f"{ndcg_base:.4f}",
                f"{ndcg_multi:.4f}",
                f"{ndcg_multi - ndcg_base:+.4f}",
                f"{seconds_multi / seconds_base:.2f}",
            ]
        )
    print_table(["collection", "nDCG@10 english", "nDCG@10 multilingual", "diff", "time ratio"], rows)
    print()
    first = {"english": own_language_first(base), "multilingual": own_language_first(multi)}
    print_table(
        ["analysis", *[lang for lang, _, _ in MULTILINGUAL]],
        [[label, *["yes" if hit else "no" for hit in found.values()]] for label, found in first.items()],
    )


if __name__ == "__main__":
    main()
