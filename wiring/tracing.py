"""OpenTelemetry tracing for a process: off unless configured.

On when ``RAGLINE_TRACING__ENABLED=true`` or the standard variables ask for traces
(``OTEL_TRACES_EXPORTER`` other than ``none``, ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); ``OTEL_SDK_DISABLED=true`` keeps it off. The exporter
is OTLP over HTTP (``opentelemetry-exporter-otlp-proto-http``, which reads its endpoint, headers
and timeout from the ``OTEL_EXPORTER_OTLP_*`` variables) or ``console``; the resource from
``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (service name ``ragline`` by default);
sampling from ``OTEL_TRACES_SAMPLER``. A process that already has an SDK tracer provider
(``opentelemetry-instrument``, an application embedding ragline, a test) keeps it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from opentelemetry import trace

from core.settings import Settings

log = logging.getLogger(__name__)


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
        return False
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return True  # someone configured the SDK already: use theirs
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError as exc:
        raise RuntimeError(
            "tracing is configured but opentelemetry-sdk is not installed: pip install 'ragline[otel]'"
        ) from exc
    name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    exporter: SpanExporter
    if name == "console":
        exporter = ConsoleSpanExporter()
    elif name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    else:
        raise RuntimeError(f"OTEL_TRACES_EXPORTER={name!r}: ragline supports otlp (HTTP), console or none")
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "ragline")})
    provider = TracerProvider(resource=resource)  # flushed and shut down at exit
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    log.info("tracing on: exporter %s", name)
    return True
