from __future__ import annotations

from index.tokenize import Tokenizer


def test_lowercases_splits_unicode_and_stems() -> None:
    assert Tokenizer().tokenize("The Running DOGS of Straße_1, café!") == ["run", "dog", "straße_1", "café"]


def test_options_off_keep_every_word() -> None:
    assert Tokenizer(stem=False, stop_words=False).tokenize("The dogs") == ["the", "dogs"]


def test_config_round_trip() -> None:
    tok = Tokenizer(stem=False, stop_words=True)
    assert Tokenizer.from_config(tok.config()) == tok
