from __future__ import annotations

from core.records import ParsedDocument, SectionKind
from ingest import html, markdown, text


def _check_offsets(parsed: ParsedDocument) -> None:
    for section in parsed.sections:
        assert parsed.text[section.char_start : section.char_end] == section.text
    assert parsed.text == "\n\n".join(section.text for section in parsed.sections)


def test_text_paragraphs_split_on_blank_lines() -> None:
    parsed = text.parse(b"First para\nstill first.\n\n\n  \nSecond para.\r\n\r\nThird.")
    _check_offsets(parsed)
    assert [s.text for s in parsed.sections] == ["First para\nstill first.", "Second para.", "Third."]
    assert all(s.kind is SectionKind.PARAGRAPH and s.heading_path == () for s in parsed.sections)


MARKDOWN = b"""---
title: front matter is skipped
---
# Guide

Intro paragraph
over two lines.

Install
-------

- step one
- step two
  continued

```python
def main():

    return 1
```

| Name | Value |
|------|------:|
| a    | 1     |

## Usage ##
1. run
2. check
"""


def test_markdown_blocks_and_heading_paths() -> None:
    parsed = markdown.parse(MARKDOWN)
    _check_offsets(parsed)
    kinds = [(s.kind, s.heading_path) for s in parsed.sections]
    assert kinds == [
        (SectionKind.HEADING, ("Guide",)),
        (SectionKind.PARAGRAPH, ("Guide",)),
        (SectionKind.HEADING, ("Guide", "Install")),
        (SectionKind.LIST, ("Guide", "Install")),
        (SectionKind.CODE, ("Guide", "Install")),
        (SectionKind.TABLE, ("Guide", "Install")),
        (SectionKind.HEADING, ("Guide", "Usage")),
        (SectionKind.LIST, ("Guide", "Usage")),
    ]
    assert parsed.title == "Guide"
    code = parsed.sections[4].text
    assert code == "```python\ndef main():\n\n    return 1\n```"
    assert parsed.sections[5].text.splitlines()[1] == "|------|------:|"
    assert "front matter" not in parsed.text


def test_markdown_unclosed_fence_runs_to_end() -> None:
    parsed = markdown.parse(b"Text\n\n```\ncode # not a heading\n")
    assert [s.kind for s in parsed.sections] == [SectionKind.PARAGRAPH, SectionKind.CODE]
    assert "# not a heading" in parsed.sections[1].text


HTML = """<html><head><meta charset="windows-1252"><title>Page Title</title>
<style>.x{color:red}</style><script>var secret = 1;</script></head>
<body><nav>Home | About</nav><header>Site banner</header>
<h1>Main</h1><p>First   paragraph with <b>bold</b>.<br>Second line &amp; more.</p>
<h2>Sub</h2><ul><li>one</li><li>two<ul><li>nested</li></ul></li></ul>
<table><tr><th>Key</th><th>Val</th></tr><tr><td>a|b</td><td>1</td></tr></table>
<pre><code>def f():
    return  1</code></pre>
<aside>Related links</aside><footer>Copyright caf\xe9</footer><p>Caf\xe9 ends.</p></body></html>
"""


def test_html_structure_and_boilerplate_removal() -> None:
    parsed = html.parse(HTML.encode("cp1252"))
    _check_offsets(parsed)
    assert parsed.title == "Page Title"
    by_kind = {s.kind: s for s in parsed.sections}
    assert by_kind[SectionKind.LIST].text == "- one\n- two\n  - nested"
    assert by_kind[SectionKind.TABLE].text == "| Key | Val |\n|---|---|\n| a\\|b | 1 |"
    assert by_kind[SectionKind.CODE].text == "def f():\n    return  1"
    assert by_kind[SectionKind.LIST].heading_path == ("Main", "Sub")
    assert parsed.sections[1].text == "First paragraph with bold.\nSecond line & more."
    for dropped in ("secret", "Home", "Site banner", "Related", "Copyright", "color:red"):
        assert dropped not in parsed.text
    assert parsed.sections[-1].text == "Café ends."
    assert parsed.warnings == ("decoded_as: cp1252",)


def test_html_title_falls_back_to_first_h1() -> None:
    parsed = html.parse(b"<body><h2>Minor</h2><h1>Real Title</h1><p>x</p></body>")
    assert parsed.title == "Real Title"
    assert parsed.sections[-1].heading_path == ("Real Title",)


def test_html_unclosed_containers_are_kept() -> None:
    parsed = html.parse(b"<p>before</p><ul><li>dangling item")
    assert [s.kind for s in parsed.sections] == [SectionKind.PARAGRAPH, SectionKind.LIST]
    assert parsed.sections[1].text == "- dangling item"
