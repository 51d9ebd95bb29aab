"""Structured JSON logs with the request id; never document text or secrets."""

from __future__ import annotations

import json
import logging
import sys
import time

from core import tracing
from core.context import request_id_var


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": request_id_var.get(),
        }
        trace_id = tracing.current_trace_id()
        if trace_id is not None:
            payload["trace_id"] = trace_id
        job_id = getattr(record, "job_id", None)
        if job_id:
            payload["job_id"] = job_id
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload)


def configure_logging(level: str = "INFO") -> None:
    root = logging.getLogger()
    if any(isinstance(h.formatter, JsonFormatter) for h in root.handlers):
        root.setLevel(level)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root.handlers = [handler]
    root.setLevel(level)
    # fusion_base/onnx_model*: onnxruntime's graph optimiser, one INFO line per fusion on export.
    noisy_loggers = ("fusion_base", "onnx_model", "onnx_model_bert")
    for noisy in ("httpx", "urllib3", "filelock", "sentence_transformers", "bm25s", *noisy_loggers):
        logging.getLogger(noisy).setLevel(logging.WARNING)
