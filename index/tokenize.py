"""The lexical tokenizer shared by index builds and queries.

Both sides of BM25 must tokenize identically, so the configuration is a frozen value that
is stored with every lexical shard (and in the manifest) and rebuilt from there at load.

Pipeline: lower-case -> Unicode word split (``\\w+``, so letters, digits and ``_`` of any
script) -> optional English stop-word removal -> optional Snowball English stemming
(PyStemmer). Stop words are removed before stemming so the list can stay in plain form.

``multilingual`` (off by default; an index built without it keeps its stored configuration
and terms byte for byte) adds, per text (a chunk, or a query: both sides take the same
path): runs of Chinese, Japanese or Korean script become overlapping character bigrams, and
the rest is stemmed with the Snowball stemmer of the language py3langid detects, when it
detects one with a stemmer at ``MIN_CONFIDENCE`` or more; otherwise, and for short texts,
the configured language (English) applies, stop words included, exactly as without the
option. Bigrams rather than a dictionary segmenter: no dictionary to ship or keep current,
one rule for Chinese and Japanese alike, and for BM25 they match a query's words wherever a
segmenter would have cut the text differently (the classic CJK choice of Lucene's CJK
analyzer).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

_WORD = re.compile(r"\w+", re.UNICODE)
# Hiragana, katakana, CJK ideographs (with extension A and compatibility), Hangul syllables.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
# ISO 639-1 code -> Snowball algorithm (PyStemmer), for the languages the detector may answer.
SNOWBALL = {
    "en": "english",
    "de": "german",
    "fr": "french",
    "es": "spanish",
    "it": "italian",
    "nl": "dutch",
    "pt": "portuguese",
    "sv": "swedish",
    "da": "danish",
    "no": "norwegian",
    "fi": "finnish",
    "ru": "russian",
}
MIN_CONFIDENCE = 0.9
MIN_DETECT_WORDS = 3

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
_identifier_lock = threading.Lock()
_identifier_instance: Any = None


def _identifier() -> Any:
    """py3langid's model restricted to the languages with a stemmer (loaded once, ~30 MB)."""
    global _identifier_instance
    with _identifier_lock:
        if _identifier_instance is None:
            try:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier
            except ImportError as exc:
                raise ImportError("multilingual analysis needs py3langid: pip install py3langid") from exc
            identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
            identifier.set_languages(sorted(SNOWBALL))
            _identifier_instance = identifier
        return _identifier_instance


def _bigrams(run: str) -> list[str]:
    """Overlapping character pairs of a CJK run; a single character stands alone."""
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


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
    multilingual: bool = False

    def tokenize(self, text: str, language: str | None = None) -> list[str]:
        """Split ``text`` into index terms.

        Args:
            text: any Unicode text.
            language: an ISO 639-1 code of ``SNOWBALL`` to analyze it as instead of detecting
                (a query's ``language``); only where the analysis is ``multilingual``: an
                English-only index has nothing else to match.

        Returns:
            The terms, duplicates kept (BM25 needs term frequencies): words in text order,
            then (``multilingual``) the CJK bigrams in text order.
        """
        lowered = text.lower()
        if not self.multilingual:
            return self._words(_WORD.findall(lowered), self.language)
        bigrams = [gram for run in _CJK.findall(lowered) for gram in _bigrams(run)]
        words = _WORD.findall(_CJK.sub(" ", lowered))
        chosen = SNOWBALL.get(language) if language else None
        return self._words(words, chosen or self._detect(text, len(words))) + bigrams

    def _words(self, words: list[str], language: str) -> list[str]:
        if self.stop_words and language == self.language:
            words = [w for w in words if w not in ENGLISH_STOP_WORDS]
        if self.stem and words:
            words = _stemmer(language).stemWords(words)
        return words

    def _detect(self, text: str, words: int) -> str:
        """The Snowball language of ``text``, or the configured one when unsure."""
        if words < MIN_DETECT_WORDS:
            return self.language
        code, confidence = _identifier().classify(text)
        if confidence < MIN_CONFIDENCE:
            return self.language
        return SNOWBALL.get(code, self.language)

    def config(self) -> dict[str, Any]:
        """The JSON-serialisable configuration stored next to an index (``multilingual``
        only when on, so an index built without it stores what it always did)."""
        config: dict[str, Any] = {"stem": self.stem, "stop_words": self.stop_words, "language": self.language}
        if self.multilingual:
            config["multilingual"] = True
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Tokenizer:
        """Rebuild a tokenizer from ``config()`` output; unknown keys are an error."""
        return cls(**config)
