"""The SSRF suite of the sitemap connector: a sitemap is written by whoever runs the site, and
the connector runs inside the deployment's network, so nothing a sitemap (or a redirect) names
may make it fetch another host, an internal address, an endless body or a gzip bomb.

Real HTTP servers on loopback addresses (``testkit.site``): 127.0.0.1 and 127.0.0.2 are two
hosts to the connector. The connector is driven directly (``list_items``/``load``): what is
checked is what it fetches, not what the server stores.
"""

from __future__ import annotations

import ipaddress
import socket
import tracemalloc
import zlib
from collections.abc import Iterator

import httpx
import pytest

from ragline_client import AclIn, Item
from ragline_client.safe_http import address_refusal
from ragline_client.sitemap import SitemapConnector, SitemapError
from testkit.site import StaticSite

LOOPBACK = ["127.0.0.0/8"]


@pytest.fixture
def site() -> Iterator[StaticSite]:
    with StaticSite("127.0.0.1") as s:
        yield s


@pytest.fixture
def other() -> Iterator[StaticSite]:
    """Another host: an internal service the sitemap would like fetched."""
    with StaticSite("127.0.0.2") as s:
        s.pages["/metrics"] = ("text/plain", b"secret_internal_metric 1")
        yield s


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10.0) as client:
        yield client


def _connector(url: str, http: httpx.Client, **options: object) -> SitemapConnector:
    return SitemapConnector(url, name="ssrf", acl=AclIn(public=True), http=http, **options)  # type: ignore[arg-type]


def _gzip_of_zeros(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = bytes(1024 * 1024)
    return b"".join(packer.compress(block) for _ in range(size // len(block))) + packer.flush()


def test_a_loc_on_another_host_or_port_is_refused_and_never_fetched(
    site: StaticSite, other: StaticSite, http: httpx.Client
) -> None:
    with StaticSite("127.0.0.1") as same_ip_other_port:
        same_ip_other_port.pages["/metrics"] = ("text/plain", b"secret")
        site.pages["/ok.txt"] = ("text/plain", b"public page")
        site.urlset(
            "/sitemap.xml",
            {
                f"{site.url}/ok.txt": None,
                f"{other.url}/metrics": None,
                f"{same_ip_other_port.url}/metrics": "2026-01-01",
            },
        )
        listing = _connector(f"{site.url}/sitemap.xml", http, allow_networks=LOOPBACK).list_items(None)
        assert [i.external_id for i in listing.items] == [f"{site.url}/ok.txt"]
        for refused in (f"{other.url}/metrics", f"{same_ip_other_port.url}/metrics"):
            assert "neither the sitemap's host nor an allowed host" in listing.failed[refused]
        assert not other.hits and not same_ip_other_port.hits

    # An index entry on another host is refused the same way; an allowed host is fetched.
    other.urlset("/more.xml", {f"{other.url}/metrics": None})
    site.index("/index.xml", [f"{other.url}/more.xml"])
    listing = _connector(f"{site.url}/index.xml", http, allow_networks=LOOPBACK).list_items(None)
    assert "neither the sitemap's host" in listing.failed[f"{other.url}/more.xml"] and not other.hits
    allowed = _connector(
        f"{site.url}/index.xml",
        http,
        allow_networks=LOOPBACK,
        allow_hosts=[other.url.removeprefix("http://")],
    ).list_items(None)
    assert [i.external_id for i in allowed.items] == [f"{other.url}/metrics"] and not allowed.failed


@pytest.mark.parametrize("host", ["127.0.0.1", "2130706433", "0x7f.0.0.1", "127.1"])
def test_a_loopback_address_in_any_spelling_is_refused_unless_allowed(
    site: StaticSite, http: httpx.Client, host: str
) -> None:
    port = site.server.server_address[1]
    site.urlset("/sitemap.xml", {f"http://{host}:{port}/page.txt": None})
    site.pages["/page.txt"] = ("text/plain", b"internal")
    with pytest.raises(SitemapError, match="loopback address"):
        _connector(f"http://{host}:{port}/sitemap.xml", http).list_items(None)
    assert not site.hits
    # The operator's explicit allowance: the same spelling is then fetched.
    listing = _connector(f"http://{host}:{port}/sitemap.xml", http, allow_networks=LOOPBACK).list_items(None)
    assert len(listing.items) == 1 and not listing.failed


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("100.64.0.1", "non-global"),  # carrier-grade NAT
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:169.254.169.254", "link-local"),
        ("2002:a01:203::1", "private"),  # 6to4 around 10.1.2.3
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 to 169.254.169.254
        ("::127.0.0.1", "reserved"),  # IPv4-compatible (deprecated)
    ],
)
def test_non_global_addresses_are_refused_with_their_kind(address: str, kind: str) -> None:
    reason = address_refusal(ipaddress.ip_address(address), ())
    assert reason is not None and f"{kind} address" in reason
    allowed = (ipaddress.ip_network(address),)
    assert address_refusal(ipaddress.ip_address(address), allowed) is None


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700:4700::1111"])
def test_global_addresses_pass(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address), ()) is None


def test_every_redirect_hop_is_checked_again(site: StaticSite, other: StaticSite, http: httpx.Client) -> None:
    site.redirects["/to-other-host"] = (302, f"{other.url}/metrics")
    site.redirects["/to-file"] = (301, "file:///etc/passwd")
    site.redirects["/hop"] = (307, "/to-other-host")  # relative, then off the host
    site.redirects["/to-localhost"] = (302, f"http://localhost:{site.server.server_address[1]}/ok.txt")
    site.pages["/ok.txt"] = ("text/plain", b"public page")
    site.urlset("/sitemap.xml", {f"{site.url}{p}": None for p in ("/to-other-host", "/to-file", "/hop")})
    # 127.0.0.1 is allowed as an address, 127.0.0.2 is not; allowing the other host by name
    # still leaves its address refused.
    connector = _connector(
        f"{site.url}/sitemap.xml",
        http,
        allow_networks=["127.0.0.1/32"],
        allow_hosts=[other.url.removeprefix("http://")],
    )
    listing = connector.list_items(None)
    assert not listing.items
    assert "127.0.0.2 is a loopback address" in listing.failed[f"{site.url}/to-other-host"]
    assert "127.0.0.2 is a loopback address" in listing.failed[f"{site.url}/hop"]
    assert "scheme file is not http or https" in listing.failed[f"{site.url}/to-file"]
    assert not other.hits
    # A hop to another name of the same address is another host.
    with pytest.raises(ValueError, match="neither the sitemap's host"):
        connector.load(Item(external_id=f"{site.url}/to-localhost", fingerprint="x"))
    assert not site.hits["/ok.txt"]


def test_a_redirect_chain_is_bounded(site: StaticSite, http: httpx.Client) -> None:
    for n in range(10):
        site.redirects[f"/r{n}"] = (302, f"/r{n + 1}")
    site.pages["/r10"] = ("text/plain", b"the end")
    connector = _connector(f"{site.url}/sitemap.xml", http, allow_networks=LOOPBACK, max_redirects=5)
    with pytest.raises(ValueError, match="more than 5 redirects"):
        connector.load(Item(external_id=f"{site.url}/r0", fingerprint="x"))
    assert site.hits["/r5"] == 1 and not site.hits["/r6"]
    doc = connector.load(Item(external_id=f"{site.url}/r6", fingerprint="x"))
    assert doc.metadata["url"] == f"{site.url}/r6"


def test_an_endless_body_stops_at_the_limit(site: StaticSite, http: httpx.Client) -> None:
    site.endless["/endless.html"] = "text/html"
    site.endless["/sitemap.xml"] = "application/xml"
    connector = _connector(
        f"{site.url}/sitemap.xml", http, allow_networks=LOOPBACK, max_page_bytes=1024 * 1024
    )
    with pytest.raises(ValueError, match="exceeds 1048576 bytes"):
        connector.load(Item(external_id=f"{site.url}/endless.html", fingerprint="x"))
    with pytest.raises(SitemapError, match="exceeds 52428800 bytes"):
        connector.list_items(None)


def test_a_gzip_bomb_is_refused_while_it_inflates(site: StaticSite, http: httpx.Client) -> None:
    bomb = _gzip_of_zeros(64 * 1024 * 1024)
    site.pages["/bomb.html"] = ("text/html", bomb)
    site.headers["/bomb.html"] = {"content-encoding": "gzip"}
    connector = _connector(
        f"{site.url}/sitemap.xml", http, allow_networks=LOOPBACK, max_page_bytes=1024 * 1024
    )
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="inflates past 1048576 bytes"):
            connector.load(Item(external_id=f"{site.url}/bomb.html", fingerprint="x"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, peak  # the 64 MiB were never inflated

    # A sitemap.xml.gz (the protocol allows them) is read, and a bomb of one refused.
    site.urlset("/plain.xml", {f"{site.url}/bomb.html": "2026-01-01"})
    site.pages["/sitemap.xml.gz"] = ("application/gzip", zlib.compress(site.pages["/plain.xml"][1], wbits=31))
    gz = _connector(f"{site.url}/sitemap.xml.gz", http, allow_networks=LOOPBACK).list_items(None)
    assert [i.external_id for i in gz.items] == [f"{site.url}/bomb.html"]
    site.pages["/huge.xml.gz"] = ("application/gzip", _gzip_of_zeros(80 * 1024 * 1024))
    with pytest.raises(SitemapError, match="inflates past 52428800 bytes"):
        _connector(f"{site.url}/huge.xml.gz", http, allow_networks=LOOPBACK).list_items(None)


def test_other_schemes_and_url_tricks_are_refused(
    site: StaticSite, other: StaticSite, http: httpx.Client
) -> None:
    port = site.server.server_address[1]
    tricks = [
        "file:///etc/passwd",
        f"gopher://127.0.0.1:{port}/_GET",
        f"ftp://127.0.0.1:{port}/x",
        f"http://127.0.0.1:{port}@{other.url.removeprefix('http://')}/metrics",  # host is 127.0.0.2
        f"http://user:pw@127.0.0.1:{port}/page.txt",
        f"http://[::ffff:127.0.0.2]:{other.server.server_address[1]}/metrics",
        f"http://[::1]:{port}/page.txt",
        f"http://0177.0.0.1:{port}/page.txt",  # octal: httpx refuses to parse it
    ]
    site.urlset("/sitemap.xml", dict.fromkeys(tricks))
    listing = _connector(f"{site.url}/sitemap.xml", http, allow_networks=LOOPBACK).list_items(None)
    assert not listing.items and set(listing.failed) == set(tricks)
    for url in tricks[:3]:
        assert "is not http or https" in listing.failed[url]
    for url in tricks[3:5]:
        assert "a URL with credentials" in listing.failed[url]
    for url in tricks[5:7]:
        assert "is neither the sitemap's host nor an allowed host" in listing.failed[url]
    assert "Invalid IPv4 address" in listing.failed[tricks[7]]
    assert "pw" not in listing.failed[tricks[4]]
    assert not other.hits and list(site.hits) == ["/sitemap.xml"]


def test_the_connection_goes_to_the_address_that_was_checked(
    site: StaticSite, monkeypatch: pytest.MonkeyPatch, http: httpx.Client
) -> None:
    """DNS rebinding: a name that answers an allowed address for the check and an internal one
    afterwards. The fetch connects to the checked address, resolving the name once per hop."""
    port = site.server.server_address[1]
    with StaticSite("127.0.0.2", port) as public:
        public.pages["/page.txt"] = ("text/plain", b"public page")
        site.pages["/page.txt"] = ("text/plain", b"internal page")
        real = socket.getaddrinfo
        answers = iter(["127.0.0.2"])

        def rebinding(host: object, *args: object, **kwargs: object) -> object:
            if host == "rebind.test":  # fault injection: the first answer, then an internal one
                host = next(answers, "127.0.0.1")
            return real(host, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(socket, "getaddrinfo", rebinding)
        connector = _connector(
            f"http://rebind.test:{port}/sitemap.xml", http, allow_networks=["127.0.0.2/32"]
        )
        doc = connector.load(Item(external_id=f"http://rebind.test:{port}/page.txt", fingerprint="x"))
        assert doc.content_base64 == "cHVibGljIHBhZ2U="  # "public page"
        assert not site.hits and public.host_headers == [f"rebind.test:{port}"]
