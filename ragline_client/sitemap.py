"""A sitemap connector (sitemaps.org protocol): the pages a site lists, synced incrementally.

Structurally unlike the filesystem connector: the source is remote, and a page whose
sitemap entry carries ``<lastmod>`` is fingerprinted by it, so an unchanged site costs one
sitemap fetch and no page fetches. Pages without ``lastmod`` are fetched and hashed. A page
dropped from the sitemap is deleted. Every page gets the same ACL (a site has one audience).
A page (or a sitemap of an index) that cannot be fetched fails alone: it is counted as
failed, the run goes on, and nothing is deleted for its absence.

A sitemap is written by whoever runs the site, and the connector runs inside the deployment's
network, so every fetch goes through :mod:`ragline_client.safe_http`: only the sitemap's own
host (the protocol's rule) and ``allow_hosts``; only global addresses unless
``allow_networks`` holds them; redirects re-checked hop by hop; bodies read up to a limit. A
``<loc>`` or a redirect the rules refuse is a failed page naming the reason.
"""

from __future__ import annotations

import base64
import hashlib
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass

import defusedxml
import defusedxml.ElementTree as SafeET
import httpx

from ragline_client.connector import Connector, Item, Listing
from ragline_client.models import MIME_TYPES, AclIn, DocumentIn
from ragline_client.safe_http import (
    Fetched,
    FetchPolicy,
    FetchRefused,
    HostRule,
    IPNetwork,
    check_url,
    fetch,
    inflate,
    networks,
)

_NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
# The protocol's own limits: 50,000 URLs and 50 MB per sitemap file.
MAX_SITEMAP_BYTES = 50 * 1024 * 1024
MAX_URLS = 50_000
# A page goes base64 inside a JSON batch, which the server's body limit (8 MiB by default)
# bounds anyway; a larger page is refused while it is read, not after.
MAX_PAGE_BYTES = 16 * 1024 * 1024
MAX_REDIRECTS = 5
_GZIP_MAGIC = b"\x1f\x8b"


class SitemapError(ValueError):
    """The sitemap cannot be used: too large, not XML, or declaring a DTD."""


@dataclass(frozen=True, slots=True)
class _Page:
    url: str
    lastmod: str | None


class SitemapConnector(Connector):
    """``SitemapConnector("https://docs.example.com/sitemap.xml", name="docs", acl=AclIn(public=True))``.

    Follows a sitemap index to its sitemaps (up to ``max_sitemaps``). External ids are the
    page URLs. ``allow_hosts``: hosts besides the sitemap's own (``"cdn.example.com"``,
    ``"docs.example.com:8443"``) that sitemaps and redirects may name; ``allow_networks``:
    non-global networks (``"10.1.0.0/16"``, ``"127.0.0.0/8"``) the fetches may reach, for a site
    inside the deployment's network.
    """

    def __init__(
        self,
        sitemap_url: str,
        *,
        name: str,
        acl: AclIn,
        http: httpx.Client | None = None,
        max_sitemaps: int = 100,
        allow_hosts: Iterable[str] = (),
        allow_networks: Iterable[str | IPNetwork] = (),
        max_redirects: int = MAX_REDIRECTS,
        max_page_bytes: int = MAX_PAGE_BYTES,
    ) -> None:
        self.sitemap_url = sitemap_url
        self.name = name
        self.acl = acl
        self.http = http or httpx.Client(timeout=30.0)
        self.max_sitemaps = max_sitemaps
        self.max_page_bytes = max_page_bytes
        self.policy = FetchPolicy(
            hosts=HostRule.same_host(sitemap_url, allow_hosts),
            allow_networks=networks(allow_networks),
            max_redirects=max_redirects,
        )
        self._fetched: dict[str, Fetched] = {}

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
                    fingerprint = "sha256:" + hashlib.sha256(self._fetch(page.url).body).hexdigest()
                except (httpx.HTTPError, FetchRefused) as exc:
                    failed[page.url] = _describe(page.url, exc)
                    continue
            items.append(Item(external_id=page.url, fingerprint=fingerprint, acl=self.acl))
        return Listing(items=items, complete=complete, failed=failed)

    def load(self, item: Item) -> DocumentIn:
        try:
            response = self._fetch(item.external_id)
        except (httpx.HTTPError, FetchRefused) as exc:
            raise ValueError(_describe(item.external_id, exc)) from exc
        mime = response.content_type.split(";")[0].strip().lower()
        if mime not in MIME_TYPES:
            raise ValueError(f"{item.external_id} is {mime or 'untyped'}, not one of {', '.join(MIME_TYPES)}")
        return DocumentIn(
            external_id=item.external_id,
            content_base64=base64.b64encode(response.body).decode("ascii"),
            mime_type=mime,
            metadata={"url": item.external_id},
            acl=item.acl,
        )

    def _fetch(self, url: str) -> Fetched:
        if url not in self._fetched:
            self._fetched[url] = fetch(self.http, url, self.policy, max_bytes=self.max_page_bytes)
        return self._fetched[url]

    def _pages(self) -> tuple[list[_Page], dict[str, str]]:
        """The pages the sitemaps list, and the sitemaps of the index and the pages that could
        not be read or were refused (the top sitemap failing raises: there is nothing to sync)."""
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
                root = _parse(fetch(self.http, url, self.policy, max_bytes=MAX_SITEMAP_BYTES).body, url)
            except SitemapError as exc:
                if url == self.sitemap_url:
                    raise
                failed[url] = str(exc)
                continue
            except (httpx.HTTPError, FetchRefused) as exc:
                if url == self.sitemap_url:
                    raise SitemapError(f"cannot read the sitemap: {_describe(url, exc)}") from exc
                failed[url] = _describe(url, exc)
                continue
            if root.tag == f"{_NS}sitemapindex":
                queue += [loc for loc in _locs(root, "sitemap") if loc not in seen]
                continue
            for entry in root.iter(f"{_NS}url"):
                loc = (entry.findtext(f"{_NS}loc") or "").strip()
                if not loc or len(pages) >= MAX_URLS:
                    continue
                refused = self._refusal(loc)
                if refused:
                    failed[loc] = refused
                    continue
                pages[loc] = _Page(loc, (entry.findtext(f"{_NS}lastmod") or "").strip() or None)
        return list(pages.values()), failed

    def _refusal(self, loc: str) -> str | None:
        """Why a listed page is refused before any fetch (scheme, credentials, host), or
        ``None``; its addresses are checked when it is fetched."""
        try:
            check_url(httpx.URL(loc), self.policy)
        except (httpx.InvalidURL, FetchRefused) as exc:
            return f"refused: {exc}"
        return None


def _describe(url: str, exc: Exception) -> str:
    if isinstance(exc, FetchRefused):
        return f"refused: {exc}"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"{url} answered {exc.response.status_code} {exc.response.reason_phrase}"
    return f"{url}: {type(exc).__name__}: {exc}" if str(exc) else f"{url}: {type(exc).__name__}"


def _locs(root: ET.Element, tag: str) -> list[str]:
    return [(e.findtext(f"{_NS}loc") or "").strip() for e in root.iter(f"{_NS}{tag}")]


def _parse(content: bytes, url: str) -> ET.Element:
    if content.startswith(_GZIP_MAGIC):  # sitemap.xml.gz, which the protocol allows
        try:
            content = b"".join(inflate([content], MAX_SITEMAP_BYTES, f"sitemap {url}"))
        except FetchRefused as exc:
            raise SitemapError(str(exc)) from exc
    # A sitemap has no DTD; the parser refuses one (entity expansion, external entities) in
    # whatever encoding the XML comes, where a byte pattern missed UTF-16.
    try:
        return SafeET.fromstring(content, forbid_dtd=True)
    except defusedxml.DefusedXmlException as exc:
        raise SitemapError(f"sitemap {url} declares a DTD or entities") from exc
    except ET.ParseError as exc:
        raise SitemapError(f"sitemap {url} is not valid XML: {exc}") from exc
