"""A static web site on a loopback address, for the sitemap connector's tests: pages by path,
redirects by path, extra headers by path, endless bodies by path (no length, written until
the client hangs up); it counts the GETs of each path.

``StaticSite("127.0.0.2")`` binds another loopback address (all of 127.0.0.0/8 is local on
Linux), which is another host to the connector: the SSRF tests need two.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


class StaticSite:
    """Use as a context manager (the server runs in a thread while it is open)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.pages: dict[str, tuple[str, bytes]] = {}
        self.redirects: dict[str, tuple[int, str]] = {}
        self.headers: dict[str, dict[str, str]] = {}
        self.endless: dict[str, str] = {}  # path -> content type
        self.hits: Counter[str] = Counter()
        self.host_headers: list[str] = []
        self.server = ThreadingHTTPServer((host, port), self._handler())
        self.url = f"http://{host}:{self.server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.hits[self.path] += 1
                site.host_headers.append(self.headers.get("host", ""))
                if self.path in site.endless:
                    self._endless(site.endless[self.path])
                    return
                if self.path in site.redirects:
                    status, location = site.redirects[self.path]
                    self.send_response(status)
                    self.send_header("location", location)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if self.path not in site.pages:
                    self.send_error(404)
                    return
                ctype, body = site.pages[self.path]
                self.send_response(200)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                for name, value in site.headers.get(self.path, {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def _endless(self, ctype: str) -> None:
                self.send_response(200)
                self.send_header("content-type", ctype)
                self.end_headers()
                chunk = b"<p>" + b"x" * 65_536 + b"</p>"
                try:
                    while True:
                        self.wfile.write(chunk)
                except OSError:  # the client stopped reading
                    pass

            def log_message(self, *_: object) -> None:
                pass

        return Handler

    def urlset(self, path: str, locs: Mapping[str, str | None]) -> None:
        """Serve at ``path`` a sitemap listing ``locs`` (full URLs, each with its lastmod or None)."""
        urls = "".join(
            f"<url><loc>{loc}</loc>" + (f"<lastmod>{mod}</lastmod>" if mod else "") + "</url>"
            for loc, mod in locs.items()
        )
        body = f'<?xml version="1.0"?><urlset xmlns="{_NS}">{urls}</urlset>'
        self.pages[path] = ("application/xml", body.encode())

    def index(self, path: str, locs: list[str]) -> None:
        """Serve at ``path`` a sitemap index listing ``locs`` (full URLs)."""
        entries = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
        body = f'<sitemapindex xmlns="{_NS}">{entries}</sitemapindex>'
        self.pages[path] = ("application/xml", body.encode())

    def sitemap(self, entries: Mapping[str, str | None]) -> None:
        """``/sitemap.xml``, an index of ``/pages.xml``, which lists ``entries`` (paths here)."""
        self.urlset("/pages.xml", {f"{self.url}{path}": mod for path, mod in entries.items()})
        self.index("/sitemap.xml", [f"{self.url}/pages.xml"])

    def __enter__(self) -> StaticSite:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.shutdown()
        self.server.server_close()
