"""Bytes to text: BOMs, UTF-8, detected legacy encodings, and a lossy fallback that never fails.

Legacy encodings are detected by charset-normalizer. Three cheap guards stay in front of it
because its raw answer is wrong on cases we must get right (charset-normalizer 3.5):
a damaged file with a BOM is still that BOM's encoding (it returns no candidate at all); a
damaged UTF-8 file with well-formed multi-byte sequences is UTF-8 with replacements (it
answers cp1250 with chaos 0, "cafĂ©"); and cp1252 wins close calls and evidence-free
guesses (it reads Latin-1 French prose as cp1250, "élčves", and ``déjà`` as UTF-16-BE).

Every decision that loses or reinterprets data is reported as a warning string so the
catalog can show why a document reads oddly, instead of the pipeline crashing on it.
"""

from __future__ import annotations

import codecs
import contextvars
import re

from charset_normalizer import from_bytes

_BOMS: tuple[tuple[bytes, str], ...] = (
    # UTF-32 first: its little-endian BOM starts with the UTF-16 one.
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_NEWLINES = re.compile(r"\r\n?|\u2028|\u2029")
# A well-formed multi-byte UTF-8 sequence: its presence means the file is UTF-8 with damage,
# not a legacy single-byte encoding.
_UTF8_MULTIBYTE = re.compile(rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}")
_CP1252_CHAOS_MARGIN = 0.1
_UTF8_NAMES = frozenset({"utf-8", "utf8", "utf_8"})


def decode_text(data: bytes, *, declared_encoding: str | None = None) -> tuple[str, tuple[str, ...]]:
    """Decode document bytes to normalised text without ever raising on bad input.

    Order: a byte-order mark wins; then strict UTF-8; then ``declared_encoding`` (e.g. an
    HTML ``<meta charset>``); then charset-normalizer's guess; finally UTF-8 with
    replacement characters. Newlines become ``\\n`` and NUL characters are removed.

    Args:
        data: The raw document bytes.
        declared_encoding: An encoding the document itself declares, tried after UTF-8.

    Returns:
        The text and a tuple of warnings such as ``"decoded_as: cp1252"`` or
        ``"invalid_utf8: replaced 3 bytes"``.
    """
    text, warnings = _decode(data, declared_encoding)
    nul_count = text.count("\x00")
    if nul_count:
        text = text.replace("\x00", "")
        warnings.append(f"stripped_nul: removed {nul_count} NUL characters")
    return _NEWLINES.sub("\n", text), tuple(warnings)


def _decode(data: bytes, declared_encoding: str | None) -> tuple[str, list[str]]:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _lossy(data[len(bom) :], encoding)
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError:
        pass
    declared = _known_codec(declared_encoding)
    if declared is not None and declared not in _UTF8_NAMES:
        try:
            return data.decode(declared), [f"decoded_as: {declared}"]
        except UnicodeDecodeError:
            pass
    if not _UTF8_MULTIBYTE.search(data):
        guessed = _guess_encoding(data)
        if guessed is not None:
            try:
                return data.decode(guessed), [f"decoded_as: {guessed}"]
            except (UnicodeDecodeError, LookupError):
                pass
    return _lossy(data, "utf-8")


def _lossy(data: bytes, encoding: str) -> tuple[str, list[str]]:
    """Decode with replacement characters, reporting how many bytes were replaced."""
    try:
        return data.decode(encoding), []
    except UnicodeDecodeError:
        pass
    counter = [0]
    token = _REPLACED.set(counter)
    try:
        text = data.decode(encoding, errors=_HANDLER)
    finally:
        _REPLACED.reset(token)
    label = "invalid_utf8" if encoding == "utf-8" else f"invalid_{encoding.replace('-', '')}"
    return text, [f"{label}: replaced {counter[0]} bytes"]


def _count_and_replace(error: UnicodeError) -> tuple[str, int]:
    """Codec error handler: like ``"replace"``, but counts the bytes it replaced."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    _REPLACED.get()[0] += error.end - error.start
    return "\ufffd", error.end


# Registered once: codec error handlers are process-global; the count travels in a
# context variable so concurrent decodes in threads do not mix their counts.
_HANDLER = "ragline_count_replace"
_REPLACED: contextvars.ContextVar[list[int]] = contextvars.ContextVar("ragline_replaced")
codecs.register_error(_HANDLER, _count_and_replace)


def _known_codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name.strip()).name
    except LookupError:
        return None


def _guess_encoding(data: bytes) -> str | None:
    """Ask charset-normalizer for the most plausible legacy encoding, or ``None``.

    Its ranking is unreliable on short samples (French prose comes back as cp1257), so a
    cp1252 candidate close to the best one wins, and so does cp1252 when the guess has no
    language evidence: it is by far the most common legacy encoding of Western office
    documents and web pages.
    """
    has_nul = b"\x00" in data
    candidates = [
        match
        for match in from_bytes(data)
        # UTF-16/32 without a BOM is only plausible when ASCII shows up as NUL-padded units.
        if has_nul or not match.encoding.startswith(("utf_16", "utf_32"))
    ]
    if not candidates:
        return None
    best = candidates[0]
    for match in candidates:
        if match.encoding == "cp1252" and match.chaos <= best.chaos + _CP1252_CHAOS_MARGIN:
            return "cp1252"
    if best.coherence == 0.0 and _decodes(data, "cp1252"):
        # No language evidence behind the guess (short or symbol-heavy text): EBCDIC or a
        # Cyrillic code page would be a coin toss, cp1252 is the likely truth.
        return "cp1252"
    return _known_codec(best.encoding)


def _decodes(data: bytes, encoding: str) -> bool:
    try:
        data.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True
