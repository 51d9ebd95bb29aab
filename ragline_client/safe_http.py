"""Fetching URLs that a remote party chose (a sitemap's ``<loc>``), without letting it point
the fetch at the deployment's own network (server-side request forgery).

Every hop, the first and each redirect alike, must pass three checks: the scheme is http or
https and the URL carries no credentials; the host is one the caller allows
(:class:`HostRule`); and every address the host resolves to is a global unicast address,
unless it lies in a network the operator allowed explicitly. The request then goes to the
address that was checked (the URL's host is swapped for it; ``Host`` and TLS SNI keep the
name, so the certificate is still verified against the name), so a DNS answer that changes
between the check and the connect (DNS rebinding) is never used. Redirects are followed here,
hop by hop, up to a bound. The body is read as a stream and the read stops at the byte limit,
counted after gzip decoding, which is itself bounded while it inflates (a gzip bomb costs at
most the limit).
"""

from __future__ import annotations

import ipaddress
import socket
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import httpx

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}
# RFC 6052's well-known NAT64 prefix: the last 32 bits are the IPv4 address reached.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class FetchRefused(ValueError):
    """A URL, an address or a body the fetch policy refuses; the message names the reason."""


@dataclass(frozen=True, slots=True)
class Fetched:
    """A response read whole (within its limit): the final URL after redirects."""

    url: str
    content_type: str
    body: bytes


@dataclass(frozen=True, slots=True)
class HostRule:
    """The hosts a fetch may reach: ``origin``'s host (on its own port or the scheme's
    standard one) and the ``extra`` hosts (``"host"`` on the standard ports, ``"host:port"``).
    sitemaps.org requires a sitemap's URLs to be on the sitemap's host."""

    origin: tuple[str, int]
    extra: frozenset[tuple[str, int | None]] = frozenset()

    @classmethod
    def same_host(cls, url: str, allow_hosts: Iterable[str] = ()) -> HostRule:
        extra = set()
        for entry in allow_hosts:
            try:
                parsed = httpx.URL(f"http://{entry.strip()}/")
            except httpx.InvalidURL as exc:
                raise ValueError(f"allowed host {entry!r}: {exc}") from exc
            if not parsed.host or "%" in parsed.host or parsed.path != "/" or parsed.userinfo or parsed.query:
                raise ValueError(f"allowed host {entry!r} is not a host or host:port")
            extra.add((_host(parsed), parsed.port))
        try:
            origin = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise ValueError(f"sitemap URL {url!r}: {exc}") from exc
        return cls(origin=(_host(origin), _port(origin)), extra=frozenset(extra))

    def refusal(self, url: httpx.URL) -> str | None:
        """Why ``url`` is off limits, or ``None``."""
        host, port = _host(url), _port(url)
        standard = port == _DEFAULT_PORTS.get(url.scheme)
        if host == self.origin[0] and (port == self.origin[1] or standard):
            return None
        if (host, port) in self.extra or (standard and (host, None) in self.extra):
            return None
        return f"host {url.netloc.decode('ascii')} is neither the sitemap's host nor an allowed host"


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    """What every hop must satisfy. ``allow_networks``: private, loopback or other
    non-global networks the operator allows (say, an intranet site's ``10.1.2.0/24``)."""

    hosts: HostRule
    allow_networks: tuple[IPNetwork, ...] = ()
    max_redirects: int = 5


def networks(values: Iterable[str | IPNetwork]) -> tuple[IPNetwork, ...]:
    """Parse CIDR networks (``"10.0.0.0/8"``, ``"::1/128"``); a bare address is its /32 or /128."""
    return tuple(ipaddress.ip_network(v, strict=False) if isinstance(v, str) else v for v in values)


def address_refusal(address: IPAddress, allowed: tuple[IPNetwork, ...]) -> str | None:
    """Why connecting to ``address`` is refused, or ``None``: anything but a global unicast
    address, unless an allowed network holds it. An IPv4 address embedded in IPv6
    (IPv4-mapped, 6to4, Teredo, NAT64) is judged as that IPv4 address too."""
    if any(address.version == net.version and address in net for net in allowed):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo or (None, None))[1]
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            inner = address_refusal(embedded, allowed)
            if inner is not None:
                return f"{address} embeds {inner}"
    for kind, flag in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("non-global", not address.is_global),
    ):
        if flag:
            return f"{address} is a {kind} address"
    return None


def resolve(url: httpx.URL, allowed: tuple[IPNetwork, ...]) -> str:
    """The address to connect to for ``url``: every address its host resolves to must pass
    :func:`address_refusal` (one bad answer refuses the host), and the first is used."""
    try:
        infos = socket.getaddrinfo(url.host, _port(url), type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpx.ConnectError(f"cannot resolve {url.host}: {exc}") from exc
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    for address in addresses:
        reason = address_refusal(address, allowed)
        if reason is not None:
            raise FetchRefused(f"{url}: {url.host} resolves to {reason}")
    return str(addresses[0])


def fetch(client: httpx.Client, url: str, policy: FetchPolicy, *, max_bytes: int) -> Fetched:
    """GET ``url`` under ``policy``, following redirects hop by hop, reading at most
    ``max_bytes`` (after gzip decoding). Raises :class:`FetchRefused`, or ``httpx.HTTPError``
    (an error status as ``HTTPStatusError``)."""
    current = httpx.URL(url)
    for _ in range(policy.max_redirects + 1):
        check_url(current, policy)
        pinned = current.copy_with(host=resolve(current, policy.allow_networks))
        extensions = {"sni_hostname": current.raw_host.decode("ascii")} if current.scheme == "https" else {}
        request = client.build_request(
            "GET",
            pinned,
            headers={"Host": current.netloc.decode("ascii"), "Accept-Encoding": "gzip"},
            extensions=extensions,
        )
        response = client.send(request, stream=True, follow_redirects=False)
        try:
            location = response.headers.get("location")
            if response.status_code in _REDIRECTS and location:
                current = current.join(location)
                continue
            response.raise_for_status()
            body = _read(response, current, max_bytes)
        finally:
            response.close()
        content_type = response.headers.get("content-type", "")
        return Fetched(url=str(current), content_type=content_type, body=body)
    raise FetchRefused(f"{url}: more than {policy.max_redirects} redirects")


def inflate(chunks: Iterable[bytes], max_bytes: int, what: str) -> Iterator[bytes]:
    """Gunzip ``chunks`` (gzip or zlib framing), refusing as soon as the output would pass
    ``max_bytes``: at most ``max_bytes + 1`` bytes are ever inflated."""
    decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)
    left = max_bytes
    try:
        for chunk in chunks:
            # max_length bounds what one call inflates; the rest waits in unconsumed_tail.
            data = decoder.decompress(chunk, left + 1)
            if len(data) > left:
                raise FetchRefused(f"{what} inflates past {max_bytes} bytes")
            left -= len(data)
            yield data
            if decoder.eof:
                return
    except zlib.error as exc:
        raise FetchRefused(f"{what} is not valid gzip: {exc}") from exc


def check_url(url: httpx.URL, policy: FetchPolicy) -> None:
    """Refuse a URL whose scheme, credentials or host the policy rules out (its addresses
    are checked by :func:`resolve`)."""
    if url.scheme not in _DEFAULT_PORTS:
        raise FetchRefused(f"{url}: scheme {url.scheme or 'none'} is not http or https")
    if url.userinfo:
        raise FetchRefused(f"{url.copy_with(username=None, password=None)}: a URL with credentials")
    reason = policy.hosts.refusal(url)
    if reason is not None:
        raise FetchRefused(f"{url}: {reason}")


def _read(response: httpx.Response, url: httpx.URL, max_bytes: int) -> bytes:
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    declared = response.headers.get("content-length", "")
    if encoding == "identity" and declared.isdigit() and int(declared) > max_bytes:
        raise FetchRefused(f"{url}: body of {declared} bytes exceeds {max_bytes} bytes")
    chunks: Iterable[bytes] = response.iter_raw()
    if encoding in ("gzip", "x-gzip"):
        chunks = inflate(chunks, max_bytes, f"{url}")
    elif encoding not in ("identity", ""):
        raise FetchRefused(f"{url}: content-encoding {encoding} was not asked for")
    body = bytearray()
    for chunk in chunks:
        if len(body) + len(chunk) > max_bytes:
            raise FetchRefused(f"{url}: body exceeds {max_bytes} bytes")
        body += chunk
    return bytes(body)


def _host(url: httpx.URL) -> str:
    return url.raw_host.decode("ascii").lower().rstrip(".")


def _port(url: httpx.URL) -> int:
    return url.port or _DEFAULT_PORTS.get(url.scheme, 0)
