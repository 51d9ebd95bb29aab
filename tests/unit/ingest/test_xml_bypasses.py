"""The Office/EPUB/ODF container check parses every member with defusedxml's parser, so the
ways around a prologue pattern (issue 43) are refused with ``unsafe_xml`` like the plain
case: a DTD in UTF-16 without a byte order mark, a main part not named ``.xml``, an EPUB
chapter named ``.txt``, and XML in an encoding expat cannot read. Each hostile file is a real
document with one part rewritten, and each clean twin (same rewrite, no DTD) still parses, so
the refusal is the DTD's and not the rewrite's."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable

import pytest

from core.errors import ParseError
from core.records import SourceDocument
from ingest.parse import DOCX, EPUB, ODT, parse_document
from tests.unit.ingest import office_factory

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
PROLOGUE = '<?xml version="1.0" encoding="{enc}"?>\n'
DTD = '<!DOCTYPE d [<!ENTITY boom "EXPANDED-ENTITY">]>\n'
BODY = (
    f'<w:document xmlns:w="{W}"><w:body><w:p><w:r><w:t>Kept text {{ref}}</w:t></w:r></w:p></w:body>'
    "</w:document>"
)


def _docx_part(*, dtd: bool, enc: str = "UTF-8", codec: str = "utf-8") -> bytes:
    text = PROLOGUE.format(enc=enc) + (DTD if dtd else "") + BODY.format(ref="&boom;" if dtd else "")
    return text.encode(codec)


def _rewrite(data: bytes, edit: Callable[[str, bytes], tuple[str, bytes]]) -> bytes:
    """Every member through ``edit(name, body) -> (name, body)``; ``mimetype`` stays first."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            name, body = edit(item.filename, source.read(item.filename))
            kind = zipfile.ZIP_STORED if name == "mimetype" else zipfile.ZIP_DEFLATED
            target.writestr(name, body, compress_type=kind)
    return out.getvalue()


def _docx_utf16_no_bom(dtd: bool) -> bytes:
    part = _docx_part(dtd=dtd, enc="UTF-16", codec="utf-16-le")  # no BOM: utf-16-le writes none
    assert not part.startswith(b"\xff\xfe")
    return _rewrite(
        office_factory.docx_bytes(),
        lambda n, b: (n, part) if n == "word/document.xml" else (n, b),
    )


def _docx_main_part_named_bin(dtd: bool) -> bytes:
    def edit(name: str, body: bytes) -> tuple[str, bytes]:
        if name == "word/document.xml":
            return "word/main.bin", _docx_part(dtd=dtd)
        if name in ("_rels/.rels", "[Content_Types].xml"):
            return name, body.replace(b"word/document.xml", b"word/main.bin")
        if name == "word/_rels/document.xml.rels":
            return "word/_rels/main.bin.rels", body
        return name, body

    return _rewrite(office_factory.docx_bytes(), edit)


def _epub_chapter_named_txt(dtd: bool) -> bytes:
    chapter = (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        + ('<!DOCTYPE html [<!ENTITY boom "EXPANDED-ENTITY">]>\n' if dtd else "<!DOCTYPE html>\n")
        + '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>One</title></head>'
        + f"<body><h1>Chapter 1: Keepers</h1><p>Kept text {'&boom;' if dtd else ''}</p></body></html>"
    ).encode()

    def edit(name: str, body: bytes) -> tuple[str, bytes]:
        if name.endswith("ch1.xhtml"):
            return name.replace("ch1.xhtml", "ch1.txt"), chapter
        if name.endswith((".opf", ".ncx", "nav.xhtml")):
            return name, body.replace(b"ch1.xhtml", b"ch1.txt")
        return name, body

    return _rewrite(office_factory.epub_bytes(), edit)


def _odt_content_in(codec: str, enc: str) -> Callable[[bool], bytes]:
    def build(dtd: bool) -> bytes:
        def edit(name: str, body: bytes) -> tuple[str, bytes]:
            if name != "content.xml":
                return name, body
            text = body.decode("utf-8").split("?>", 1)[1]
            head = PROLOGUE.format(enc=enc) + ('<!DOCTYPE d [<!ENTITY boom "x">]>' if dtd else "")
            return name, (head + text).encode(codec)

        return _rewrite(office_factory.odt_bytes(), edit)

    return build


CASES = [
    ("docx_utf16_without_bom", _docx_utf16_no_bom, DOCX),
    ("docx_main_part_named_bin", _docx_main_part_named_bin, DOCX),
    ("epub_chapter_named_txt", _epub_chapter_named_txt, EPUB),
    ("odt_utf32", _odt_content_in("utf-32-le", "UTF-32"), ODT),
]


def _parse(data: bytes, mime: str):
    return parse_document(SourceDocument("t", "d", mime, data))


@pytest.mark.parametrize(("name", "build", "mime"), CASES, ids=[c[0] for c in CASES])
def test_a_dtd_the_prologue_check_missed_is_refused_as_unsafe_xml(name: str, build, mime: str) -> None:
    with pytest.raises(ParseError) as caught:
        parsed = _parse(build(True), mime)
        assert "EXPANDED-ENTITY" not in parsed.text  # what a pass would at least have to keep
    assert caught.value.code == "unsafe_xml", (name, caught.value)
    assert "EXPANDED-ENTITY" not in str(caught.value)


@pytest.mark.parametrize(
    ("name", "build", "mime"), [c for c in CASES if c[0] != "odt_utf32"], ids=[c[0] for c in CASES[:3]]
)
def test_the_same_rewrite_without_a_dtd_still_parses(name: str, build, mime: str) -> None:
    parsed = _parse(build(False), mime)
    assert "Kept text" in parsed.text, (name, parsed.text[:200])


def test_a_multi_byte_legacy_encoding_expat_cannot_read_fails_closed() -> None:
    with pytest.raises(ParseError) as caught:
        _parse(_odt_content_in("shift_jis", "Shift_JIS")(False), ODT)
    assert caught.value.code == "unsafe_xml"


def test_an_xhtml_doctype_without_entities_is_still_accepted_in_an_epub() -> None:
    parsed = _parse(office_factory.epub_bytes(), EPUB)
    assert "Chapter 1 tells of the keepers." in parsed.text
