"""HTML parsing with the standard library's ``html.parser``.

Boilerplate containers (navigation, headers, footers, scripts) are dropped; headings build
the heading path; lists become ``- item`` lines, tables Markdown pipe tables and ``<pre>``
blocks code with their whitespace intact.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from core.records import ParsedDocument, SectionKind
from ingest.decoding import decode_text
from ingest.text import Block, assemble, table_blocks

_DROPPED = frozenset({"script", "style", "nav", "header", "footer", "aside", "noscript", "template"})
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_BLOCK_TAGS = frozenset(
    {
        "p", "div", "section", "article", "main", "blockquote", "figure", "figcaption", "form",
        "dl", "dt", "dd", "hr", "address", "details", "summary", "body", "html", "fieldset",
    }
)  # fmt: skip
_WHITESPACE = re.compile(r"[ \t\r\f\v\n]+")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def parse(data: bytes) -> ParsedDocument:
    """Parse HTML into headings, paragraphs, lists, tables and code blocks.

    Args:
        data: The raw bytes; a ``<meta charset>`` in the first 4 KiB is honoured.

    Returns:
        The parsed document; the title comes from ``<title>``, else the first ``<h1>``.
    """
    blocks, title, warnings = html_blocks(data)
    return assemble(blocks, title=title, warnings=warnings)


def html_blocks(data: bytes) -> tuple[list[Block], str | None, tuple[str, ...]]:
    """The blocks of an HTML document, its title (``<title>``, else the first ``<h1>``) and
    the decoding warnings: for formats that embed HTML (EPUB chapters, e-mail bodies)."""
    declared = _META_CHARSET.search(data[:4096])
    text, warnings = decode_text(data, declared_encoding=declared.group(1).decode() if declared else None)
    parser = _BlockCollector()
    parser.feed(text)
    parser.close()
    parser.finish()
    title = parser.title or next(
        (block.text for block in parser.blocks if block.kind is SectionKind.HEADING and block.level == 1),
        None,
    )
    return parser.blocks, title, warnings


def _inline(text: str) -> str:
    return _WHITESPACE.sub(" ", text)


def _cell(parts: list[str]) -> str:
    return " ".join("".join(parts).split())


class _BlockCollector(HTMLParser):
    """Routes character data to the innermost open container and emits blocks on close."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self.title: str | None = None
        self._skip_depth = 0
        self._title_parts: list[str] | None = None
        self._paragraph: list[str] = []
        self._heading: tuple[int, list[str]] | None = None
        self._pre: list[str] | None = None
        self._pre_depth = 0
        self._list_depth = 0
        self._items: list[tuple[int, list[str]]] = []
        self._table_depth = 0
        self._rows: list[list[list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROPPED:
            self._skip_depth += 1
            return
        if self._skip_depth:
            return
        if tag == "title":
            self._title_parts = []
        elif tag == "pre":
            self._pre_depth += 1
            if self._pre is None:
                self.flush()
                self._pre = []
        elif tag == "br":
            self._data("\n")
        elif self._pre is not None:
            return
        elif tag == "table":
            self._start_table()
        elif self._table_depth:
            self._table_tag(tag)
        elif tag in ("ul", "ol"):
            if not self._list_depth:
                self.flush()
            self._list_depth += 1
        elif tag == "li":
            self._items.append((max(self._list_depth, 1), []))
        elif self._list_depth:
            self._data(" ")
        elif tag in _HEADINGS:
            self.flush()
            self._heading = (_HEADINGS[tag], [])
        elif tag in _BLOCK_TAGS:
            self.flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in _DROPPED:
            self._skip_depth = max(0, self._skip_depth - 1)
            return
        if self._skip_depth:
            return
        if tag == "title" and self._title_parts is not None:
            self.title = " ".join("".join(self._title_parts).split()) or None
            self._title_parts = None
        elif tag == "pre" and self._pre is not None:
            self._pre_depth -= 1
            if self._pre_depth <= 0:
                self.blocks.append(Block("".join(self._pre), SectionKind.CODE))
                self._pre, self._pre_depth = None, 0
        elif self._pre is not None:
            return
        elif tag == "table" and self._table_depth:
            self._end_table()
        elif self._table_depth:
            return
        elif tag in ("ul", "ol") and self._list_depth:
            self._list_depth -= 1
            if not self._list_depth:
                self._emit_list()
        elif tag in _HEADINGS and self._heading is not None:
            level, parts = self._heading
            self.blocks.append(Block(_inline("".join(parts)), SectionKind.HEADING, level=level))
            self._heading = None
        elif tag in _BLOCK_TAGS and not self._list_depth:
            self.flush()

    def handle_data(self, data: str) -> None:
        if self._skip_depth:
            return
        if self._title_parts is not None:
            self._title_parts.append(data)
        elif self._pre is not None:
            self._pre.append(data)
        else:
            self._data(_inline(data))

    def flush(self) -> None:
        """Emit the pending paragraph text, one paragraph per ``<br>``-free run."""
        text = "\n".join(line.strip() for line in "".join(self._paragraph).split("\n") if line.strip())
        self._paragraph = []
        if text:
            self.blocks.append(Block(text, SectionKind.PARAGRAPH))

    def finish(self) -> None:
        """Emit whatever unclosed containers still hold when the input ends."""
        if self._pre is not None:
            self.blocks.append(Block("".join(self._pre), SectionKind.CODE))
            self._pre = None
        if self._table_depth:
            self._table_depth = 1
            self._end_table()
        if self._list_depth:
            self._list_depth = 0
            self._emit_list()
        if self._heading is not None:
            level, parts = self._heading
            self.blocks.append(Block(_inline("".join(parts)), SectionKind.HEADING, level=level))
            self._heading = None
        self.flush()

    def _data(self, text: str) -> None:
        if self._table_depth:
            if self._rows and self._rows[-1]:
                self._rows[-1][-1].append(text)
        elif self._list_depth:
            if not self._items:
                self._items.append((self._list_depth, []))
            self._items[-1][1].append(text)
        elif self._heading is not None:
            self._heading[1].append(text)
        else:
            self._paragraph.append(text)

    def _start_table(self) -> None:
        self._table_depth += 1
        if self._table_depth == 1:
            self.flush()
            self._rows = []

    def _table_tag(self, tag: str) -> None:
        # Only the outermost table has structure; nested tables flatten into its cells.
        if self._table_depth > 1:
            self._data(" ")
        elif tag == "tr":
            self._rows.append([])
        elif tag in ("td", "th"):
            if not self._rows:
                self._rows.append([])
            self._rows[-1].append([])
        else:
            self._data(" ")

    def _end_table(self) -> None:
        self._table_depth -= 1
        if self._table_depth:
            return
        rows = [[_cell(cell) for cell in row] for row in self._rows if row]
        self._rows = []
        self.blocks.extend(table_blocks(rows))

    def _emit_list(self) -> None:
        lines = []
        for depth, parts in self._items:
            text = " ".join("".join(parts).split())
            if text:
                lines.append("  " * (depth - 1) + "- " + text)
        self._items = []
        if lines:
            self.blocks.append(Block("\n".join(lines), SectionKind.LIST))
