"""What an OIDC token costs per request against an API key: ``GET /v1/me`` through the whole
app (middleware, authentication, limits), with an API key (the TTL cache makes it a dict
hit) vs a JWT of a configured issuer (unverified issuer lookup, a worker-thread hop, an RS256
or ES256 signature check with the cached JWKS, claim mapping) on every request.

Run: ``python -m bench.auth_tokens --requests 500 --rounds 3``. One local PostgreSQL cluster
(or ``RAGLINE_DATABASE_URL``); the JWKS is served by this process on loopback. The variants
alternate in rounds so drift on a shared machine hits them alike; the table gives p50/p95
per request and the p50 ratio to the key.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import psycopg
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from fastapi.testclient import TestClient
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from api.app import create_app
from authz.api_keys import create_key
from bench.common import print_table
from bench.retrieve import database
from core.settings import Settings

ISSUER = "https://idp.bench"


@contextmanager
def jwks_server(public: dict[str, Any]) -> Iterator[str]:
    body = json.dumps({"keys": list(public.values())}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/jwks"
    finally:
        server.shutdown()


def _latencies_us(client: TestClient, token: str, n: int) -> list[float]:
    headers = {"Authorization": f"Bearer {token}"}
    out = []
    for _ in range(n):
        started = time.perf_counter()
        resp = client.get("/v1/me", headers=headers)
        out.append((time.perf_counter() - started) * 1e6)
        if resp.status_code != 200:
            raise SystemExit(f"/v1/me answered {resp.status_code}: {resp.text}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=500, help="requests per variant and round")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rs_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    es_key = ec.generate_private_key(ec.SECP256R1())
    public = {
        "rs": {**RSAAlgorithm.to_jwk(rs_key.public_key(), as_dict=True), "kid": "rs", "alg": "RS256"},
        "es": {**ECAlgorithm.to_jwk(es_key.public_key(), as_dict=True), "kid": "es", "alg": "ES256"},
    }
    claims = {
        "iss": ISSUER,
        "aud": "ragline",
        "sub": "bench",
        "tenant": "bench",
        "exp": int(time.time()) + 3600,
    }
    tokens = {
        "API key": "",
        "JWT RS256": jwt.encode(claims, rs_key, algorithm="RS256", headers={"kid": "rs"}),
        "JWT ES256": jwt.encode(claims, es_key, algorithm="ES256", headers={"kid": "es"}),
    }
    with (
        tempfile.TemporaryDirectory(prefix="ragline-bench-") as tmp,
        database(Path(tmp)) as url,
        jwks_server(public) as jwks_url,
    ):
        with psycopg.connect(url) as conn:
            tokens["API key"] = create_key(
                conn, tenant_id="bench", roles=["query"], principal_id="user:bench"
            ).token
        issuer = {"issuer": ISSUER, "jwks_url": jwks_url, "audience": "ragline", "tenant_claim": "tenant"}
        settings = Settings(data_dir=Path(tmp), database_url=url, oidc={"issuers": [issuer]})
        samples: dict[str, list[float]] = {name: [] for name in tokens}
        with TestClient(create_app(settings, hooks=[])) as client:
            for token in tokens.values():  # warm-up: caches, JWKS fetch
                _latencies_us(client, token, 20)
            for _ in range(args.rounds):
                for name, token in tokens.items():
                    samples[name] += _latencies_us(client, token, args.requests)
    base = statistics.median(samples["API key"])
    rows = []
    for name, values in samples.items():
        p50 = statistics.median(values)
        p95 = statistics.quantiles(values, n=20)[18]
        rows.append([name, len(values), p50, p95, p50 / base])
    print_table(["bearer", "requests", "p50 µs", "p95 µs", "p50 vs key"], rows)


if __name__ == "__main__":
    main()
