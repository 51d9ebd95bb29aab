"""A test identity provider: signing keys it makes, a JWKS endpoint it serves on loopback
(counting fetches, rotatable, slow, or silent to test the timeout), and tokens it signs."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

AUDIENCE = "ragline"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Idp:
    def __init__(self, issuer: str = "https://idp.test/realms/acme") -> None:
        self.issuer = issuer
        self.private: dict[str, Any] = {}
        self.published: list[str] = []
        self.hits = 0
        self.delay_s = 0.0  # how long the JWKS endpoint sleeps before it answers
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                idp.hits += 1
                time.sleep(idp.delay_s)
                body = json.dumps({"keys": [idp.public_jwk(k) for k in idp.published]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.jwks_url = f"http://127.0.0.1:{self._server.server_address[1]}/jwks"

    def add_key(self, kid: str, kind: str = "RSA", *, publish: bool = True) -> None:
        self.private[kid] = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if kind == "RSA"
            else ec.generate_private_key(ec.SECP256R1())
        )
        if publish:
            self.published.append(kid)

    def alg(self, kid: str) -> str:
        return "RS256" if isinstance(self.private[kid], rsa.RSAPrivateKey) else "ES256"

    def public_jwk(self, kid: str) -> dict[str, Any]:
        key = self.private[kid].public_key()
        codec = RSAAlgorithm if isinstance(key, rsa.RSAPublicKey) else ECAlgorithm
        return {**codec.to_jwk(key, as_dict=True), "kid": kid, "use": "sig", "alg": self.alg(kid)}

    def claims(self, sub: str = "alice", **over: Any) -> dict[str, Any]:
        now = int(time.time())
        base = {
            "iss": self.issuer,
            "aud": AUDIENCE,
            "sub": sub,
            "iat": now,
            "exp": now + 300,
            "tenant": "acme",
        }
        return {k: v for k, v in {**base, **over}.items() if v is not None}

    def token(self, sub: str = "alice", *, kid: str, alg: str | None = None, **over: Any) -> str:
        return jwt.encode(
            self.claims(sub, **over), self.private[kid], algorithm=alg or self.alg(kid), headers={"kid": kid}
        )

    def hs256_with_public_key(self, sub: str, kid: str) -> str:
        """The HS/RS confusion attack: HMAC-signed with the published public key as secret."""
        pem = self.private[kid].public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
        payload = _b64(json.dumps(self.claims(sub)).encode())
        sig = hmac.new(pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
        return f"{header}.{payload}.{_b64(sig)}"

    def unsigned(self, sub: str, kid: str) -> str:
        """``alg: none``: no signature at all."""
        header = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode())
        return f"{header}.{_b64(json.dumps(self.claims(sub)).encode())}."

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def running_idp(issuer: str = "https://idp.test/realms/acme") -> Iterator[Idp]:
    """An identity provider serving its JWKS, holding one published RSA key ``k1``; closed at exit."""
    provider = Idp(issuer)
    provider.add_key("k1")
    try:
        yield provider
    finally:
        provider.close()


def issuer_config(idp: Idp, **over: Any) -> dict[str, Any]:
    return {
        "issuer": idp.issuer,
        "jwks_url": idp.jwks_url,
        "audience": AUDIENCE,
        "tenant_claim": "tenant",
        "groups_claim": "groups",
        **over,
    }


@contextmanager
def silent_endpoint() -> Iterator[str]:
    """A URL whose server accepts connections and never answers (a hung JWKS endpoint)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/jwks"
    finally:
        listener.close()
