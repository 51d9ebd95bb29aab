"""An OTLP/HTTP trace endpoint for tests: a loopback HTTP server in a thread that decodes and
keeps every export it receives (the SDK's exporters post ``ExportTraceServiceRequest``
protobufs to ``/v1/traces``)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span


class OtlpSink:
    """``with OtlpSink() as sink:`` serves on ``sink.url`` until the block ends."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        requests = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server hook's name)
                body = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
                requests.append(ExportTraceServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def resource_spans(self) -> list[ResourceSpans]:
        return [rs for req in list(self.requests) for rs in req.resource_spans]

    @property
    def spans(self) -> list[Span]:
        return [s for rs in self.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def __enter__(self) -> OtlpSink:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
