"""ASGI entry point for uvicorn workers: ``uvicorn --factory api.main:build``."""

from __future__ import annotations

import sys

from fastapi import FastAPI

from api.app import create_app
from core.settings import get_settings


def build() -> FastAPI:
    # Request threads hand the GIL to each other many times per request (event loop, worker
    # threads, the batching embedder); a shorter switch interval cuts that queueing.
    sys.setswitchinterval(0.001)
    return create_app(get_settings())
