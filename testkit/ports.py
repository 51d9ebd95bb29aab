"""Free TCP ports for the servers a test or a benchmark starts."""

from __future__ import annotations

import random
import socket


def free_port() -> int:
    """A free port below the ephemeral range (Linux: 32768-60999) and above Ray's worker ports
    (10002-19999): a server binds it seconds after it is chosen, after the model loads and
    other processes have opened connections, any of which could take an ephemeral port."""
    for port in random.sample(range(20_000, 32_000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 20000-32000")
