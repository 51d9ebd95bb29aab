"""OpenTelemetry tracing for a process: off unless configured.

On when ``RAGLINE_TRACING__ENABLED=true`` or the standard variables ask for traces
(``OTEL_TRACES_EXPORTER`` other than ``none``, ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); ``OTEL_SDK_DISABLED=true`` keeps it off. The exporter
is OTLP over HTTP (``opentelemetry-exporter-otlp-proto-http``, which reads its endpoint, headers
and timeout from the ``OTEL_EXPORTER_OTLP_*`` variables) or ``console``; the resource from
``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (service name ``ragline`` by default);
sampling from ``OTEL_TRACES_SAMPLER`` (a statement outside any traced request or job starts no
trace). PostgreSQL statements get spans through ``opentelemetry-instrumentation-psycopg`` on
every pooled connection: the statement with its placeholders, never its parameters. A process
that already has an SDK tracer provider (``opentelemetry-instrument``, an application
embedding ragline, a test) keeps it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from core import tracing
from core.settings import Settings


def tracing_enabled(settings: Settings, environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(
        settings.tracing.enabled
        or exporter
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def configure_tracing(settings: Settings) -> bool:
    """Install the process's tracer provider when tracing is on; True when it is on."""
    if not tracing_enabled(settings):
        tracing.disable_database_spans()
        return False
    tracing.install_provider(export_process=settings.tracing.export_process)
    tracing.enable_database_spans()
    return True


def trace_env(settings: Settings) -> tuple[tuple[str, str], ...]:
    """The ``OTEL_*`` variables a shard server installs to export as this process does."""
    if not tracing_enabled(settings):
        return ()
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("OTEL_")))
