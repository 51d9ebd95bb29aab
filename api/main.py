"""ASGI entry point for uvicorn workers: ``uvicorn --factory api.main:build``."""

from __future__ import annotations

from fastapi import FastAPI

from api.app import create_app
from core.settings import get_settings


def build() -> FastAPI:
    return create_app(get_settings())
