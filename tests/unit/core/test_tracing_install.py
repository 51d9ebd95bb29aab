"""Tracing that exports OTLP from the child needs the OTLP exporter's packages: without them the
server says what to install rather than failing on an import deep in the span export module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# A fresh interpreter (no tracer provider installed yet) where opentelemetry.proto cannot be
# imported, as on an install with opentelemetry-sdk but not the OTLP exporter.
SCRIPT = """
import sys
class NoProto:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry.proto" or name.startswith("opentelemetry.proto."):
            raise ImportError(f"{name} is not installed here")
        return None
sys.meta_path.insert(0, NoProto())
from core import tracing
try:
    tracing.install_provider(export_process=True)
except RuntimeError as exc:
    print("RuntimeError:", exc)
else:
    print("no error")
"""


def test_otlp_export_without_the_exporter_packages_says_what_to_install() -> None:
    env = {"PATH": "/usr/bin:/bin", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("RuntimeError:"), done.stdout + done.stderr
    assert "pip install 'ragline[otel]'" in done.stdout
