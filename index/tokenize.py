"""The lexical tokenizer shared by index builds and queries.

Both sides of BM25 must tokenize identically, so the configuration is a frozen value that
is stored with every lexical shard (and in the manifest) and rebuilt from there at load.

Pipeline: lower-case -> Unicode word split (``\\w+``, so letters, digits and ``_`` of any
script) -> optional English stop-word removal -> optional Snowball English stemming
(PyStemmer). Stop words are removed before stemming so the list can stay in plain form.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

_WORD = re.compile(r"\w+", re.UNICODE)

# Lucene's classic English stop set: short on purpose, BM25's idf already discounts the
# rest of the frequent words, and aggressive lists hurt phrase-like queries ("to be or not").
ENGLISH_STOP_WORDS: frozenset[str] = frozenset(
    (
        "a an and are as at be but by for if in into is it no not of on or such that the their "
        "then there these they this to was will with"
    ).split()
)

# PyStemmer objects are not thread-safe, so each thread gets its own.
_local = threading.local()


def _stemmer(language: str) -> Any:
    cache: dict[str, Any] | None = getattr(_local, "stemmers", None)
    if cache is None:
        cache = {}
        _local.stemmers = cache
    stemmer = cache.get(language)
    if stemmer is None:
        try:
            import Stemmer
        except ImportError as exc:  # pragma: no cover - PyStemmer is a hard dependency
            raise ImportError("stemming needs PyStemmer: pip install PyStemmer") from exc
        stemmer = Stemmer.Stemmer(language)
        cache[language] = stemmer
    return stemmer


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """Configuration of the lexical tokenizer; ``tokenize`` applies it.

    Attributes:
        stem: apply the Snowball English stemmer.
        stop_words: drop ``ENGLISH_STOP_WORDS``.
        language: Snowball algorithm name given to PyStemmer.
    """

    stem: bool = True
    stop_words: bool = True
    language: str = "english"

    def tokenize(self, text: str) -> list[str]:
        """Split ``text`` into index terms.

        Args:
            text: any Unicode text.

        Returns:
            The terms in text order, duplicates kept (BM25 needs term frequencies).
        """
        words = _WORD.findall(text.lower())
        if self.stop_words:
            words = [w for w in words if w not in ENGLISH_STOP_WORDS]
        if self.stem and words:
            words = _stemmer(self.language).stemWords(words)
        return words

    def config(self) -> dict[str, Any]:
        """The JSON-serialisable configuration stored next to an index."""
        return {"stem": self.stem, "stop_words": self.stop_words, "language": self.language}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Tokenizer:
        """Rebuild a tokenizer from ``config()`` output; unknown keys are an error."""
        return cls(**config)
