"""onnxruntime sessions as every ONNX backend here runs them (embedder and reranker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def cpu_session(model_file: Path, *, threads: int) -> Any:
    """An onnxruntime CPU session: ``threads`` intra-op threads, sequential, no spinning.

    Spinning workers burn the shared cores that the API, Ray workers and the other model need.
    ``run`` of the session is thread-safe.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
