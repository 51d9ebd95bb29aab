"""EPUB parsing with EbookLib: one section per chapter, in reading (spine) order.

Each chapter's XHTML goes through the HTML parser (``ingest/html.py``), so its headings,
lists and tables keep their structure; a chapter whose XHTML has no heading of its own gets
its table-of-contents title as one. The chapter's spine position is its page: results say
which chapter they came from. The book's title is its Dublin Core title.
"""

from __future__ import annotations

import io
import posixpath
import warnings as warnings_module
from typing import Any

from core.errors import ParseError
from core.records import ParsedDocument, SectionKind
from ingest.archive import open_zip
from ingest.html import html_blocks
from ingest.limits import check_deadline
from ingest.text import Block, assemble

MAX_CHAPTERS = 5000


def parse(data: bytes) -> ParsedDocument:
    """Parse an EPUB (2 or 3) into chapters.

    Raises:
        ParseError: the container's codes (``zip_bomb``, ``unsafe_xml``,
            ``corrupt_document``, ``encrypted_document`` for DRM-encrypted content) or
            ``corrupt_document`` for a ZIP that is not an EPUB.
    """
    archive = open_zip(data, allow_doctype=True)
    with archive:
        if "META-INF/encryption.xml" in archive.namelist():
            raise ParseError("the e-book's content is encrypted (DRM)", code="encrypted_document")
    epub = _import()
    try:
        with warnings_module.catch_warnings():
            warnings_module.simplefilter("ignore")  # EbookLib's deprecation notices
            book = epub.read_epub(io.BytesIO(data), {"ignore_ncx": False})
    except Exception as exc:  # EpubException, KeyError, lxml errors: all mean "not an EPUB"
        raise ParseError(f"not a readable EPUB ({type(exc).__name__})", code="corrupt_document") from exc
    toc = _toc_titles(book.toc)
    blocks: list[Block] = []
    warnings: list[str] = []
    chapter = 0
    for idref, _linear in book.spine[:MAX_CHAPTERS]:
        check_deadline()
        item = book.get_item_with_id(idref)
        if item is None or not item.media_type.endswith(("html", "xml")):
            continue
        chapter_blocks, _title, decode_warnings = html_blocks(item.get_content())
        warnings.extend(w for w in decode_warnings if w not in warnings)
        if not chapter_blocks:  # the navigation document, a cover image page
            continue
        chapter += 1
        if not any(b.kind is SectionKind.HEADING for b in chapter_blocks[:3]):
            name = toc.get(posixpath.normpath(item.get_name()))
            if name:
                blocks.append(Block(name, SectionKind.HEADING, level=1, page_start=chapter))
        blocks.extend(
            Block(b.text, b.kind, level=b.level, page_start=chapter, page_end=chapter) for b in chapter_blocks
        )
    titles = book.get_metadata("DC", "title")
    title = " ".join(str(titles[0][0]).split()) if titles else None
    return assemble(blocks, title=title or None, page_count=chapter, warnings=tuple(warnings))


def _import() -> Any:
    try:
        from ebooklib import epub
    except ImportError as exc:
        raise ParseError(
            "EPUB support needs EbookLib: pip install ebooklib", code="parser_unavailable"
        ) from exc
    return epub


def _toc_titles(toc: Any, depth: int = 0) -> dict[str, str]:
    """File name -> title from the table of contents (the first entry naming a file wins)."""
    titles: dict[str, str] = {}
    if depth > 20:
        return titles
    for entry in toc:
        if isinstance(entry, tuple | list):
            section, children = entry[0], entry[1]
            titles.update({k: v for k, v in _toc_titles(children, depth + 1).items() if k not in titles})
            entry = section
        href = getattr(entry, "href", None)
        title = getattr(entry, "title", None)
        if href and title:
            titles.setdefault(posixpath.normpath(href.split("#", 1)[0]), " ".join(str(title).split()))
    return titles
