"""The sitemap connector reads a remote site's XML with defusedxml's parser, refusing a DTD
in any encoding: the byte pattern it replaced missed a DTD in UTF-16 (issue 43)."""

from __future__ import annotations

import pytest

from ragline_client.sitemap import SitemapError, _locs, _parse

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
SITEMAP = f'<urlset xmlns="{NS}"><url><loc>https://docs.example.com/a.html</loc></url></urlset>'
ENTITY_SITEMAP = (
    '<?xml version="1.0" encoding="{enc}"?><!DOCTYPE urlset [<!ENTITY host "https://evil.example">]>'
    '<urlset xmlns="' + NS + '"><url><loc>&host;/a.html</loc></url></urlset>'
)


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-16", "utf-8"])
def test_a_dtd_is_refused_in_any_encoding(codec: str) -> None:
    data = ENTITY_SITEMAP.format(enc="UTF-8" if codec == "utf-8" else "UTF-16").encode(codec)
    with pytest.raises(SitemapError, match="declares a DTD"):
        _parse(data, "https://docs.example.com/sitemap.xml")


def test_a_plain_sitemap_in_utf16_is_read() -> None:
    root = _parse(SITEMAP.encode("utf-16"), "https://docs.example.com/sitemap.xml")
    assert _locs(root, "url") == ["https://docs.example.com/a.html"]
