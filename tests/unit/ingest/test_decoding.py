from __future__ import annotations

import codecs

from ingest.decoding import decode_text


def test_utf8_passes_through_without_warnings() -> None:
    assert decode_text("naïve café ✓".encode()) == ("naïve café ✓", ())


def test_boms_are_honoured_and_removed() -> None:
    assert decode_text(codecs.BOM_UTF8 + "héllo".encode()) == ("héllo", ())
    assert decode_text("héllo".encode("utf-16")) == ("héllo", ())
    assert decode_text(codecs.BOM_UTF16_BE + "ok".encode("utf-16-be")) == ("ok", ())


def test_invalid_utf8_is_replaced_and_reported() -> None:
    text, warnings = decode_text("café ".encode() + b"\xff\xfe" + " naïve".encode())
    assert text == "café \ufffd\ufffd naïve"
    assert warnings == ("invalid_utf8: replaced 2 bytes",)


def test_cp1252_is_detected() -> None:
    original = "Café crème – “quoted” naïve déjà vu, 5€ per garçon."
    text, warnings = decode_text(original.encode("cp1252"))
    assert text == original
    assert warnings == ("decoded_as: cp1252",)


def test_declared_encoding_is_used_when_utf8_fails() -> None:
    text, warnings = decode_text("Привет мир".encode("koi8-r"), declared_encoding="koi8-r")
    assert text == "Привет мир"
    assert warnings == ("decoded_as: koi8-r",)


def test_newlines_normalised_and_nul_stripped() -> None:
    text, warnings = decode_text(b"a\r\nb\rc\x00d")
    assert text == "a\nb\ncd"
    assert warnings == ("stripped_nul: removed 1 NUL characters",)


def test_binary_garbage_never_raises() -> None:
    text, warnings = decode_text(bytes(range(256)) * 16)
    assert isinstance(text, str) and text
    assert warnings


def test_latin1_prose_is_read_as_cp1252() -> None:
    # charset-normalizer alone ranks cp1250 first here ("élčves").
    original = "Les élèves ont été très sérieux à l'école, même en été."
    assert decode_text(original.encode("latin-1")) == (original, ("decoded_as: cp1252",))
    assert decode_text("déjà".encode("cp1252")) == ("déjà", ("decoded_as: cp1252",))


def test_a_damaged_file_keeps_its_bom_encoding() -> None:
    data = codecs.BOM_UTF16_LE + "ok".encode("utf-16-le") + b"\x00\xd8"
    assert decode_text(data) == ("ok\ufffd", ("invalid_utf16le: replaced 2 bytes",))


def test_declared_encoding_that_does_not_fit_is_ignored() -> None:
    original = "Größe, Übung, Straße und Bäume – schön."
    text, warnings = decode_text(original.encode("cp1252"), declared_encoding="utf-16")
    assert (text, warnings) == (original, ("decoded_as: cp1252",))
