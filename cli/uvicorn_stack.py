"""uvicorn's event loop and HTTP parser for ``ragline serve`` and ``ragline run``."""

from __future__ import annotations

import importlib.util

from core.errors import ConfigError
from core.settings import Settings


def uvicorn_stack(settings: Settings) -> dict[str, str]:
    """uvicorn's ``loop`` and ``http`` from the settings, "auto" resolved here (uvloop and
    httptools when they import, else asyncio and h11) so the start-up line names what runs.
    One named explicitly must import: uvicorn would fail at start-up with a bare ImportError.

    Raises:
        ConfigError: an explicitly named loop or parser is not installed.
    """
    stack: dict[str, str] = {}
    for name, choice, fast, fallback in (
        ("loop", settings.api.loop, "uvloop", "asyncio"),
        ("http", settings.api.http, "httptools", "h11"),
    ):
        installed = importlib.util.find_spec(fast) is not None
        if choice == fast and not installed:
            raise ConfigError(
                f"RAGLINE_API__{name.upper()}={choice} needs the {fast} package, which is not installed"
            )
        stack[name] = (fast if installed else fallback) if choice == "auto" else choice
    return stack


def serve_app(stack: dict[str, str], host: str, port: int, workers: int = 1) -> None:
    """uvicorn serving the app factory (``api.main:build``) with ``stack``'s loop and parser."""
    import uvicorn

    uvicorn.run(
        "api.main:build",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
        loop=stack["loop"],
        http=stack["http"],
    )
