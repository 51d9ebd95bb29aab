"""deploy/nginx-tls.conf, the TLS front of docs/deployment.md, run by Debian's nginx: plain
HTTP is redirected to HTTPS and HTTPS reaches the API behind it (a local HTTP server here),
with HSTS and the request id passed on."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit.ports import free_port

REPO = Path(__file__).resolve().parents[2]
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

pytestmark = [
    pytest.mark.integration,
    # .ci/run installs Debian's nginx-light: a CI without it fails here instead of skipping.
    pytest.mark.skipif(
        not Path(NGINX).exists() and not os.environ.get("CI"), reason="apt-get install nginx-light"
    ),
]


class _Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        forwarded = self.headers.get("X-Forwarded-Proto")
        body = f"{self.path} {forwarded} {self.headers.get('X-Request-ID')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    cert, key = tmp_path / "fullchain.pem", tmp_path / "privkey.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    http_port, https_port = free_port(), free_port()
    site = (REPO / "deploy" / "nginx-tls.conf").read_text()
    for old, new in (
        ("127.0.0.1:8000", f"127.0.0.1:{api.server_address[1]}"),
        ("/etc/ssl/ragline/fullchain.pem", str(cert)),
        ("/etc/ssl/ragline/privkey.pem", str(key)),
        ("listen 80;", f"listen 127.0.0.1:{http_port};"),
        ("listen 443 ssl http2;", f"listen 127.0.0.1:{https_port} ssl http2;"),
        ("listen [::]:80;", ""),
        ("listen [::]:443 ssl http2;", ""),
    ):
        assert old in site, old
        site = site.replace(old, new)
    (tmp_path / "site.conf").write_text(site)
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
        f"http {{\n access_log off;\n client_body_temp_path {tmp_path};\n proxy_temp_path {tmp_path};\n"
        f" include {tmp_path}/site.conf;\n}}\n"
    )
    args = [NGINX, "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", str(tmp_path / "nginx.conf")]
    check = subprocess.run([*args, "-t"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr
    server = subprocess.Popen([*args, "-g", "daemon off;"], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "nginx.pid").exists() and time.monotonic() < deadline:
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            time.sleep(0.1)
        yield f"http://127.0.0.1:{http_port}", f"https://localhost:{https_port}", cert
    finally:
        server.terminate()
        server.wait(timeout=20)
        api.shutdown()


def test_http_is_redirected_and_https_reaches_the_api(proxy: tuple[str, str, Path]) -> None:
    plain, secure, cert = proxy
    redirect = httpx.get(f"{plain}/readyz", headers={"Host": "localhost"}, follow_redirects=False)
    assert redirect.status_code == 301 and redirect.headers["location"].startswith("https://localhost")
    with httpx.Client(verify=str(cert), timeout=10) as client:
        r = client.get(f"{secure}/readyz")
    assert r.status_code == 200
    path, proto, request_id = r.text.split()
    assert path == "/readyz" and proto == "https" and len(request_id) == 32
    assert r.headers["strict-transport-security"].startswith("max-age=")
