"""A sitemap connector (sitemaps.org protocol): the pages a site lists, synced incrementally.

Structurally unlike the filesystem connector: the source is remote, and a page whose
sitemap entry carries ``<lastmod>`` is fingerprinted by it, so an unchanged site costs one
sitemap fetch and no page fetches. Pages without ``lastmod`` are fetched and hashed. A page
dropped from the sitemap is deleted. Every page gets the same ACL (a site has one audience).
A page (or a sitemap of an index) that cannot be fetched fails alone: it is counted as
failed, the run goes on, and nothing is deleted for its absence.
"""

from __future__ import annotations

import base64
import hashlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import defusedxml
import defusedxml.ElementTree as SafeET
import httpx

from ragline_client.connector import Connector, Item, Listing
from ragline_client.models import MIME_TYPES, AclIn, DocumentIn

_NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
# The protocol's own limits: 50,000 URLs and 50 MB per sitemap file.
MAX_SITEMAP_BYTES = 50 * 1024 * 1024
MAX_URLS = 50_000


class SitemapError(ValueError):
    """The sitemap cannot be used: too large, not XML, or declaring a DTD."""


@dataclass(frozen=True, slots=True)
class _Page:
    url: str
    lastmod: str | None


class SitemapConnector(Connector):
    """``SitemapConnector("https://docs.example.com/sitemap.xml", name="docs", acl=AclIn(public=True))``.

    Follows a sitemap index to its sitemaps (up to ``max_sitemaps``). External ids are the
    page URLs.
    """

    def __init__(
        self,
        sitemap_url: str,
        *,
        name: str,
        acl: AclIn,
        http: httpx.Client | None = None,
        max_sitemaps: int = 100,
    ) -> None:
        self.sitemap_url = sitemap_url
        self.name = name
        self.acl = acl
        self.http = http or httpx.Client(timeout=30.0, follow_redirects=True)
        self.max_sitemaps = max_sitemaps
        self._fetched: dict[str, httpx.Response] = {}

    def list_items(self, cursor: str | None) -> Listing:
        self._fetched.clear()
        items = []
        pages, failed = self._pages()
        # A sitemap of the index that could not be read hides which pages it lists: none of
        # the recorded pages may be taken for deleted this run.
        complete = not failed
        for page in pages:
            if page.lastmod:
                fingerprint = f"lastmod:{page.lastmod}"
            else:
                try:
                    fingerprint = "sha256:" + hashlib.sha256(self._fetch(page.url).content).hexdigest()
                except httpx.HTTPError as exc:
                    failed[page.url] = _describe(page.url, exc)
                    continue
            items.append(Item(external_id=page.url, fingerprint=fingerprint, acl=self.acl))
        return Listing(items=items, complete=complete, failed=failed)

    def load(self, item: Item) -> DocumentIn:
        try:
            response = self._fetch(item.external_id)
        except httpx.HTTPError as exc:
            raise ValueError(_describe(item.external_id, exc)) from exc
        mime = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if mime not in MIME_TYPES:
            raise ValueError(f"{item.external_id} is {mime or 'untyped'}, not one of {', '.join(MIME_TYPES)}")
        return DocumentIn(
            external_id=item.external_id,
            content_base64=base64.b64encode(response.content).decode("ascii"),
            mime_type=mime,
            metadata={"url": item.external_id},
            acl=item.acl,
        )

    def _fetch(self, url: str) -> httpx.Response:
        if url not in self._fetched:
            response = self.http.get(url)
            response.raise_for_status()
            self._fetched[url] = response
        return self._fetched[url]

    def _pages(self) -> tuple[list[_Page], dict[str, str]]:
        """The pages the sitemaps list, and the sitemaps of the index that could not be read
        (the top one failing raises: there is nothing to sync)."""
        pages: dict[str, _Page] = {}
        failed: dict[str, str] = {}
        queue: list[str] = [self.sitemap_url]
        seen: set[str] = set()
        while queue and len(seen) < self.max_sitemaps:
            url = queue.pop(0)
            if url in seen:
                continue
            seen.add(url)
            try:
                root = _parse(self.http.get(url).raise_for_status().content, url)
            except SitemapError as exc:
                if url == self.sitemap_url:
                    raise
                failed[url] = str(exc)
                continue
            except httpx.HTTPError as exc:
                if url == self.sitemap_url:
                    raise SitemapError(f"cannot read the sitemap: {_describe(url, exc)}") from exc
                failed[url] = _describe(url, exc)
                continue
            if root.tag == f"{_NS}sitemapindex":
                queue += [loc for loc in _locs(root, "sitemap") if loc not in seen]
                continue
            for entry in root.iter(f"{_NS}url"):
                loc = (entry.findtext(f"{_NS}loc") or "").strip()
                if loc and len(pages) < MAX_URLS:
                    pages[loc] = _Page(loc, (entry.findtext(f"{_NS}lastmod") or "").strip() or None)
        return list(pages.values()), failed


def _describe(url: str, exc: Exception) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"{url} answered {exc.response.status_code} {exc.response.reason_phrase}"
    return f"{url}: {type(exc).__name__}: {exc}" if str(exc) else f"{url}: {type(exc).__name__}"


def _locs(root: ET.Element, tag: str) -> list[str]:
    return [(e.findtext(f"{_NS}loc") or "").strip() for e in root.iter(f"{_NS}{tag}")]


def _parse(content: bytes, url: str) -> ET.Element:
    if len(content) > MAX_SITEMAP_BYTES:
        raise SitemapError(f"sitemap {url} exceeds {MAX_SITEMAP_BYTES} bytes")
    # A sitemap has no DTD; the parser refuses one (entity expansion, external entities) in
    # whatever encoding the XML comes, where a byte pattern missed UTF-16.
    try:
        return SafeET.fromstring(content, forbid_dtd=True)
    except defusedxml.DefusedXmlException as exc:
        raise SitemapError(f"sitemap {url} declares a DTD or entities") from exc
    except ET.ParseError as exc:
        raise SitemapError(f"sitemap {url} is not valid XML: {exc}") from exc
