"""Hostile files of the Office, spreadsheet, e-mail and image kinds, built in milliseconds.

The zip bomb and the billion-laughs part are written with ``zipfile`` around a real DOCX or
XLSX from ``tests/unit/ingest/office_factory.py``; the password-protected file is a real
DOCX encrypted by msoffcrypto-tool (Office's "Encrypt with password").
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

from tests import hostile_factory

LAUGHS = (
    b'<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
    + b"".join(
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'.encode()
        for i in range(1, 10)
    )
    + b']>\n<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b"<w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>"
)
XXE = (
    b'<?xml version="1.0"?>\n<!DOCTYPE d [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b"<w:body><w:p><w:r><w:t>&xxe;</w:t></w:r></w:p></w:body></w:document>"
)


def _replace_part(data: bytes, name: str, body: bytes, *, extra: dict[str, bytes] | None = None) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            target.writestr(item.filename, body if item.filename == name else source.read(item.filename))
        for extra_name, extra_body in (extra or {}).items():
            target.writestr(extra_name, extra_body)
    return out.getvalue()


def zip_bomb(data: bytes, megabytes: int = 1024) -> bytes:
    """``data`` with a member of ``megabytes`` MiB of zeros, ~1 MiB compressed per GiB.

    The deflate stream is one compressed block repeated (``hostile_factory.repeated_flate``);
    ``zipfile`` cannot write precompressed data, so the member is written stored and its
    headers are then patched to say deflated, with the real CRC and size.
    """
    block = bytes(1 << 20)
    raw = hostile_factory.repeated_flate(b"", block, megabytes, b"")[2:-4]  # zlib -> raw deflate
    crc = 0
    for _ in range(megabytes):
        crc = zlib.crc32(block, crc)
    size = megabytes << 20
    out = io.BytesIO(data)
    name = "word/media/zeros.bin"
    with zipfile.ZipFile(out, "a", zipfile.ZIP_STORED) as archive:
        archive.writestr(name, raw)
        offset = archive.getinfo(name).header_offset
    body = bytearray(out.getvalue())
    struct.pack_into("<H", body, offset + 8, zipfile.ZIP_DEFLATED)
    struct.pack_into("<III", body, offset + 14, crc, len(raw), size)
    central = body.rindex(name.encode()) - 46  # the central directory entry comes last
    assert body[central : central + 4] == b"PK\x01\x02"
    struct.pack_into("<H", body, central + 10, zipfile.ZIP_DEFLATED)
    struct.pack_into("<III", body, central + 16, crc, len(raw), size)
    return bytes(body)


def entity_part(docx: bytes, body: bytes = LAUGHS) -> bytes:
    """A DOCX whose main part declares entities (billion laughs, or an external entity)."""
    return _replace_part(docx, "word/document.xml", body)


def encrypted(docx: bytes, password: str = "secret") -> bytes:
    from msoffcrypto.format.ooxml import OOXMLFile

    out = io.BytesIO()
    OOXMLFile(io.BytesIO(docx)).encrypt(password, out)
    return out.getvalue()


def million_cell_csv(rows: int = 100_000, columns: int = 10) -> bytes:
    header = ",".join(f"c{i}" for i in range(columns))
    row = ",".join(str(i) for i in range(columns))
    return (header + "\n" + (row + "\n") * rows).encode()


def million_cell_xlsx(rows: int = 100_000, columns: int = 10) -> bytes:
    """A sheet of ``rows`` x ``columns`` numbers, written as raw sheet XML (openpyxl's writer
    would take a minute for a million cells)."""
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(["x"])
    seed = io.BytesIO()
    book.save(seed)
    cells = "".join(f'<c t="n"><v>{i}</v></c>' for i in range(columns))
    sheet = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
        + "".join(f'<row r="{r}">{cells}</row>' for r in range(1, rows + 1))
        + "</sheetData></worksheet>"
    ).encode()
    return _replace_part(seed.getvalue(), "xl/worksheets/sheet1.xml", sheet)


def huge_png(width: int = 20_000, height: int = 20_000) -> bytes:
    """A real 1-bit PNG of ``width`` x ``height`` white pixels (400M pixels for the default),
    its IDAT built from one compressed block (``hostile_factory.repeated_flate``): ~100 KB,
    in milliseconds."""
    row = b"\x00" + b"\xff" * ((width + 7) // 8)  # filter type 0, then the packed bits
    per_block = (1 << 20) // len(row)
    blocks, rest = divmod(height, per_block)
    idat = hostile_factory.repeated_flate(b"", row, blocks, row * rest)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1 bit, grayscale
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def nested_mime(depth: int = 1000) -> bytes:
    """An e-mail of ``depth`` multipart parts nested one in another, text at the bottom."""
    head = "From: a@example.org\nTo: b@example.org\nSubject: nested\nMIME-Version: 1.0\n"
    parts = [head]
    for level in range(depth):
        parts.append(f'Content-Type: multipart/mixed; boundary="b{level}"\n\n--b{level}\n')
    parts.append("Content-Type: text/plain\n\nThe deepest part mentions the nightjar.\n")
    for level in reversed(range(depth)):
        parts.append(f"--b{level}--\n")
    return "".join(parts).encode()


def ole_header(encrypted_package: bool) -> bytes:
    """The start of an OLE compound file, as legacy .doc/.xls files and encrypted OOXML begin."""
    magic = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
    marker = "EncryptedPackage".encode("utf-16-le") if encrypted_package else b""
    return magic + bytes(504) + marker + bytes(1024)
