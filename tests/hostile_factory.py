"""Hostile PDFs written by hand (objects + xref), cheap to build however big they expand.

A Flate stream of a repeated 1 MiB block is built from one compressed block: after a full
flush deflate keeps no history, so every following block compresses to the same bytes, and
the zlib trailer (Adler-32 of the whole) is combined arithmetically. A 4 GiB stream costs
~4 MiB and milliseconds.
"""

from __future__ import annotations

import zlib

_BLOCK = 1 << 20
_ADLER_BASE = 65521


def _adler32_combine(first: int, second: int, second_length: int) -> int:
    """zlib's adler32_combine: the checksum of A+B from those of A and B."""
    rem = second_length % _ADLER_BASE
    sum1 = first & 0xFFFF
    sum2 = (rem * sum1) % _ADLER_BASE
    sum1 += (second & 0xFFFF) + _ADLER_BASE - 1
    sum2 += ((first >> 16) & 0xFFFF) + ((second >> 16) & 0xFFFF) + _ADLER_BASE - rem
    sum1 %= _ADLER_BASE
    sum2 %= _ADLER_BASE
    return sum1 | (sum2 << 16)


def repeated_flate(prefix: bytes, unit: bytes, blocks: int, suffix: bytes) -> bytes:
    """zlib data of ``prefix + unit * n + suffix`` with ``unit * n`` ~ ``blocks`` MiB."""
    block = unit * (_BLOCK // len(unit))
    comp = zlib.compressobj(9)
    head = comp.compress(prefix) + comp.flush(zlib.Z_FULL_FLUSH)
    body = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    tail = comp.compress(suffix) + comp.flush()
    block_adler = zlib.adler32(block)
    adler = zlib.adler32(prefix)
    for _ in range(blocks):
        adler = _adler32_combine(adler, block_adler, len(block))
    adler = _adler32_combine(adler, zlib.adler32(suffix), len(suffix))
    return head + body * blocks + tail[:-4] + adler.to_bytes(4, "big")


def _pdf(objects: list[tuple[str, bytes | None]]) -> bytes:
    """Objects numbered from 1 (1 is the catalog); a stream's dict gets its /Length."""
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, (head, stream) in enumerate(objects, 1):
        offsets.append(len(out))
        if stream is None:
            out += f"{number} 0 obj\n{head}\nendobj\n".encode()
        else:
            out += f"{number} 0 obj\n{head[:-2]} /Length {len(stream)} >>\nstream\n".encode()
            out += stream + b"\nendstream\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


_CATALOG = ("<< /Type /Catalog /Pages 2 0 R >>", None)
_FONT = ("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>", None)


def _text(line: str) -> bytes:
    return f"BT /F1 11 Tf 72 700 Td ({line}) Tj ET".encode()


def _one_page(contents: list[tuple[str, bytes]], xobjects: str = "") -> bytes:
    """One page (object 4) whose content streams are objects 5.. in order."""
    refs = " ".join(f"{5 + i} 0 R" for i in range(len(contents)))
    resources = f"/Font << /F1 3 0 R >> {xobjects}"
    box = "/MediaBox [0 0 612 792]"
    page = f"<< /Type /Page /Parent 2 0 R {box} /Resources << {resources} >> /Contents [{refs}] >>"
    kids = ("<< /Type /Pages /Kids [4 0 R] /Count 1 >>", None)
    return _pdf([_CATALOG, kids, _FONT, (page, None), *[(h, s) for h, s in contents]])


def many_pages(pages: int, word: str) -> bytes:
    """``pages`` pages, each with its own line naming its number (and ``word`` on the last)."""
    objects: list[tuple[str, bytes | None]] = [_CATALOG, ("", None), _FONT]
    kids = []
    for number in range(1, pages + 1):
        kids.append(f"{len(objects) + 1} 0 R")
        page = "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>"
        objects.append((f"{page} /Contents {len(objects) + 2} 0 R >>", None))
        extra = f" {word}" if number == pages else ""
        objects.append(("<< >>", _text(f"Body of page {number} about pump seals{extra}.")))
    objects[1] = (f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {pages} >>", None)
    return _pdf(objects)


def huge_image(megabytes: int, word: str) -> bytes:
    """A page of text and an RGB image whose stream inflates to ``megabytes`` MiB of zeros."""
    side = int((megabytes * _BLOCK / 3) ** 0.5)
    image = repeated_flate(b"", b"\x00", -(-side * side * 3 // _BLOCK), b"")
    head = (
        f"<< /Type /XObject /Subtype /Image /Width {side} /Height {side} /ColorSpace /DeviceRGB"
        " /BitsPerComponent 8 /Filter /FlateDecode >>"
    )
    draw = b"q 500 0 0 500 50 50 cm /Im1 Do Q " + _text(f"A page with a huge picture of {word}.")
    return _one_page([("<< >>", draw), (head, image)], "/XObject << /Im1 6 0 R >>")


def string_bomb(megabytes: int) -> bytes:
    """One text string inflating to ``megabytes`` MiB: MuPDF holds it and every glyph of it."""
    stream = repeated_flate(b"BT /F1 11 Tf 72 700 Td (", b"A", megabytes, b") Tj ET")
    return _one_page([("<< /Filter /FlateDecode >>", stream)])


def whitespace_bomb(megabytes: int, word: str) -> bytes:
    """A content stream of ``megabytes`` MiB of NULs (PDF whitespace), then a line of text:
    MuPDF lexes it inside one call, at ~100 MiB/s, holding no memory."""
    stream = repeated_flate(b"", b"\x00", megabytes, b"")
    return _one_page([("<< /Filter /FlateDecode >>", stream), ("<< >>", _text(f"After the void: {word}."))])
