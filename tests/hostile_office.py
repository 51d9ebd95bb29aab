"""Hostile files of the Office, OpenDocument, spreadsheet, e-mail and image kinds, built in
milliseconds.

The zip bomb and the billion-laughs part are written with ``zipfile`` around a real DOCX,
XLSX or ODF file from ``tests/unit/ingest/office_factory.py``; the password-protected file
is a real DOCX encrypted by msoffcrypto-tool (Office's "Encrypt with password"), or an ODF
file encrypted as LibreOffice's "Save with password" does (``encrypted_odf``).
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


def zip_bomb(data: bytes, megabytes: int = 1024, name: str = "word/media/zeros.bin") -> bytes:
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


def entity_part(data: bytes, body: bytes = LAUGHS, part: str = "word/document.xml") -> bytes:
    """A DOCX (or, with ``part="content.xml"``, an ODF file) whose main part declares entities
    (billion laughs, or an external entity)."""
    return _replace_part(data, part, body)


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


_MANIFEST_NS = "urn:oasis:names:tc:opendocument:xmlns:manifest:1.0"


def encrypted_odf(data: bytes, password: str = "secret") -> bytes:
    """``data`` (an ODF package) encrypted as ODF 1.2 says and LibreOffice writes it: every
    part but ``mimetype`` and the manifest deflated, then AES-256-CBC under a key derived by
    PBKDF2 (100,000 rounds) from the password's SHA-256, stored; the manifest names each
    part's algorithm, IV, salt and checksum in ``manifest:encryption-data``."""
    import base64
    import hashlib
    import os

    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    source = zipfile.ZipFile(io.BytesIO(data))
    start_key = hashlib.sha256(password.encode()).digest()
    kind = source.read("mimetype").decode()
    entries = [f'<manifest:file-entry manifest:full-path="/" manifest:media-type="{kind}"/>']
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        target.writestr("mimetype", kind)
        for item in source.infolist():
            if item.filename in ("mimetype", "META-INF/manifest.xml"):
                continue
            plain = source.read(item)
            packer = zlib.compressobj(9, zlib.DEFLATED, -15)
            deflated = packer.compress(plain) + packer.flush()
            salt, iv = os.urandom(16), os.urandom(16)
            key = hashlib.pbkdf2_hmac("sha1", start_key, salt, 100_000, 32)
            pad = 16 - len(deflated) % 16
            encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
            sealed = encryptor.update(deflated + os.urandom(pad - 1) + bytes([pad])) + encryptor.finalize()
            target.writestr(item.filename, sealed)  # stored: ciphertext does not compress

            def b64(raw: bytes) -> str:
                return base64.b64encode(raw).decode()

            checksum = b64(hashlib.sha256(deflated[:1024]).digest())
            entries.append(
                f'<manifest:file-entry manifest:full-path="{item.filename}" manifest:media-type="text/xml"'
                f' manifest:size="{len(plain)}"><manifest:encryption-data manifest:checksum-type='
                f'"{_MANIFEST_NS}#sha256-1k" manifest:checksum="{checksum}">'
                '<manifest:algorithm manifest:algorithm-name="http://www.w3.org/2001/04/xmlenc#aes256-cbc"'
                f' manifest:initialisation-vector="{b64(iv)}"/><manifest:start-key-generation'
                ' manifest:start-key-generation-name="http://www.w3.org/2000/09/xmldsig#sha256"'
                ' manifest:key-size="32"/><manifest:key-derivation manifest:key-derivation-name="PBKDF2"'
                f' manifest:key-size="32" manifest:iteration-count="100000" manifest:salt="{b64(salt)}"/>'
                "</manifest:encryption-data></manifest:file-entry>"
            )
        manifest = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<manifest:manifest xmlns:manifest="{_MANIFEST_NS}"'
            f' manifest:version="1.2">{"".join(entries)}</manifest:manifest>'
        )
        target.writestr("META-INF/manifest.xml", manifest)
    return out.getvalue()


_ODS_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<office:document-content'
    ' xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
    ' xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"'
    ' xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.2">'
    '<office:body><office:spreadsheet><table:table table:name="Cells">'
)
_ODS_TAIL = "</table:table></office:spreadsheet></office:body></office:document-content>"


def _ods_with_sheet(rows_xml: str) -> bytes:
    """An odfpy-written ODS whose content.xml is replaced by one sheet of ``rows_xml`` (odfpy's
    writer would take minutes for a million cells)."""
    from odf.opendocument import OpenDocumentSpreadsheet

    seed = io.BytesIO()
    OpenDocumentSpreadsheet().save(seed)
    return _replace_part(seed.getvalue(), "content.xml", (_ODS_HEAD + rows_xml + _ODS_TAIL).encode())


def million_cell_ods(rows: int = 100_000, columns: int = 10) -> bytes:
    """A sheet of ``rows`` x ``columns`` numbers, every row written out."""
    cells = "".join(
        f'<table:table-cell office:value-type="float" office:value="{i}"/>' for i in range(columns)
    )
    return _ods_with_sheet(f"<table:table-row>{cells}</table:table-row>" * rows)


def repeated_row_ods(rows: int = 1_048_576, columns: int = 16_384) -> bytes:
    """One row of ``columns`` copies of a number (one cell, ``number-columns-repeated``),
    itself repeated ``rows`` times: 17 billion cells in a few hundred bytes of XML."""
    cell = (
        f'<table:table-cell table:number-columns-repeated="{columns}"'
        ' office:value-type="float" office:value="7"/>'
    )
    return _ods_with_sheet(f'<table:table-row table:number-rows-repeated="{rows}">{cell}</table:table-row>')
