"""Deployment secrets kept in the catalog, generated on first use.

In the catalog rather than a file under the data dir because every API replica, ingestion
runner and Ray worker of a deployment must derive the same chunk ids, and the catalog is the
one store they all share (data dirs are per machine).
"""

from __future__ import annotations

import secrets

import psycopg

CHUNK_ID_KEY = "chunk_id_key"


def deployment_secret(conn: psycopg.Connection, *, name: str) -> bytes:
    """The secret ``name``, made (32 random bytes) by whichever caller asks first."""
    row = conn.execute("SELECT secret FROM deployment_secrets WHERE name = %s", (name,)).fetchone()
    if row is not None:
        return bytes(row[0])
    conn.execute(
        "INSERT INTO deployment_secrets (name, secret) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING",
        (name, secrets.token_bytes(32)),
    )
    row = conn.execute("SELECT secret FROM deployment_secrets WHERE name = %s", (name,)).fetchone()
    if row is None:  # the row was inserted or already there: a SELECT must see it
        raise RuntimeError(f"deployment secret {name} vanished")
    return bytes(row[0])


def chunk_id_key(conn: psycopg.Connection) -> bytes:
    """The HMAC key of chunk ids (``ingest.hashing.chunk_id``)."""
    return deployment_secret(conn, name=CHUNK_ID_KEY)
