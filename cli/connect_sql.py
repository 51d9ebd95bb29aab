"""A SQL connector (PostgreSQL, psycopg 3): the rows of a query as documents.

A query file (TOML) names the query and the roles of its columns::

    query = "SELECT id, title, body, team, updated_at, deleted, readers FROM articles"
    key = "id"                      # the external id (unique per row)
    title = "title"                 # optional
    text = ["body"]                 # joined with blank lines: the document's text
    metadata = ["team"]             # optional: stored as metadata, usable in filters
    updated = "updated_at"          # optional monotonic column (timestamp, integer, xmin::text::bigint)
    tombstone = "deleted"           # optional: a row where it is true is deleted
    acl_column = "readers"          # text[] or comma-separated principals ...
    acl_query = "SELECT article_id, principal FROM article_readers"  # ... or a join table
    public = "is_public"            # optional boolean column

Each run reads, in one repeatable-read snapshot, every row's key and readers (cheap: the
keyset comparison that finds deleted rows, and the ACL that a join table can change without
touching the row) and the content only of rows whose ``updated`` value reached the cursor
(``>=``, so rows committed late with the boundary value are not missed: they come back with
the same fingerprint and count as unchanged) or that were never recorded (a row that failed).
The fingerprint is a hash of title, text and metadata; readers go apart, so a changed ACL is
one PUT.
"""

from __future__ import annotations

import base64
import hashlib
import json
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from core.errors import InvalidInputError
from ragline_client import AclIn, Connector, DocumentIn, Item, Listing
from ragline_client.rules import RuleError, acl_principal


@dataclass(frozen=True, slots=True)
class SqlSpec:
    """What the query file says; see the module docstring."""

    query: str
    key: str
    text: list[str]
    title: str | None = None
    metadata: list[str] = field(default_factory=list)
    updated: str | None = None
    tombstone: str | None = None
    acl_column: str | None = None
    acl_query: str | None = None
    public: str | None = None
    mime_type: str = "text/plain"

    @classmethod
    def load(cls, path: Path) -> SqlSpec:
        try:
            raw = tomllib.loads(path.read_text())
            spec = cls(**raw)
        except (OSError, ValueError, TypeError) as exc:
            raise InvalidInputError(f"cannot read the query file {path}: {exc}") from exc
        if not spec.text or not isinstance(spec.text, list):
            raise InvalidInputError(f"{path}: text must list at least one column")
        if not (spec.acl_column or spec.acl_query or spec.public):
            raise InvalidInputError(f"{path}: give acl_column, acl_query or public (who may read a row)")
        if spec.acl_column and spec.acl_query:
            raise InvalidInputError(f"{path}: acl_column and acl_query exclude each other")
        return spec


@dataclass(frozen=True, slots=True)
class _Row:
    title: str | None
    text: str
    metadata: dict[str, Any]

    def fingerprint(self) -> str:
        body = json.dumps([self.title, self.text, self.metadata], sort_keys=True, default=str)
        return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


class SqlConnector(Connector):
    """``SqlConnector(dsn, SqlSpec.load(path), name=..., known=...)``; ``known()`` is the
    recorded state (external id -> fingerprint), read when the cursor has moved before."""

    def __init__(self, dsn: str, spec: SqlSpec, *, name: str, known: Callable[[], Mapping[str, str]]) -> None:
        self.dsn = dsn
        self.spec = spec
        self.name = name
        self.known = known
        self.queries = 0
        self._rows: dict[str, _Row] = {}

    def list_items(self, cursor: str | None) -> Listing:
        recorded = {k: v.split("|acl:")[0] for k, v in self.known().items()} if cursor else {}
        with psycopg.connect(self.dsn) as conn:
            # One snapshot: the keyset, the readers and the content agree with each other.
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            readers = self._readers(conn)
            self._rows, newest = self._content(conn, cursor, [k for k in readers if k not in recorded])
        items = []
        for key, acl in readers.items():
            fingerprint = self._rows[key].fingerprint() if key in self._rows else recorded.get(key)
            if fingerprint is not None:
                items.append(Item(external_id=key, fingerprint=fingerprint, acl=acl))
        moved = None if newest is None or newest == cursor else newest
        return Listing(items=items, cursor=moved, complete=True)

    def _readers(self, conn: psycopg.Connection) -> dict[str, AclIn]:
        """key -> readers of every live row (tombstoned rows left out: they are deleted)."""
        s = self.spec
        cols: list[sql.Composable] = [sql.SQL("q.{}::text AS key").format(sql.Identifier(s.key))]
        public = sql.SQL("q.{}::boolean").format(sql.Identifier(s.public)) if s.public else sql.SQL("false")
        cols.append(sql.SQL("{} AS public").format(public))
        join: sql.Composable = sql.SQL("")
        if s.acl_column:
            cols.append(sql.SQL("q.{} AS readers").format(sql.Identifier(s.acl_column)))
        elif s.acl_query:
            cols.append(sql.SQL("coalesce(a.readers, '{}') AS readers"))
            join = sql.SQL(
                " LEFT JOIN (SELECT k::text AS k, array_agg(p::text) AS readers"
                " FROM ({acl}) AS a0(k, p) GROUP BY 1) AS a ON a.k = q.{key}::text"
            ).format(acl=sql.SQL(s.acl_query), key=sql.Identifier(s.key))
        else:
            cols.append(sql.SQL("'{}'::text[] AS readers"))
        where: sql.Composable = sql.SQL("")
        if s.tombstone:
            where = sql.SQL(" WHERE q.{} IS NOT TRUE").format(sql.Identifier(s.tombstone))
        query = sql.SQL("SELECT {cols} FROM ({q}) AS q{join}{where}").format(
            cols=sql.SQL(", ").join(cols),
            q=sql.SQL(s.query),
            join=join,
            where=where,
        )
        self.queries += 1
        out: dict[str, AclIn] = {}
        for row in conn.execute(query).fetchall():
            out[row[0]] = AclIn(principals=_principals(row[2]), public=bool(row[1]))
        return out

    def _content(
        self, conn: psycopg.Connection, cursor: str | None, unrecorded: list[str]
    ) -> tuple[dict[str, _Row], str | None]:
        s = self.spec
        named = [s.key, *([s.title] if s.title else []), *s.text, *s.metadata]
        named += [s.updated] if s.updated else []
        cols = sql.SQL(", ").join(sql.SQL("q.{}").format(sql.Identifier(c)) for c in dict.fromkeys(named))
        query = sql.SQL("SELECT {cols} FROM ({q}) AS q").format(cols=cols, q=sql.SQL(s.query))
        params: list[Any] = []
        if s.updated and cursor is not None:
            query += sql.SQL(" WHERE q.{u} >= %s OR q.{k}::text = ANY(%s)").format(
                u=sql.Identifier(s.updated), k=sql.Identifier(s.key)
            )
            params = [cursor, unrecorded]
        self.queries += 1
        rows: dict[str, _Row] = {}
        newest: Any = None
        with conn.cursor(row_factory=dict_row) as cur:
            for row in cur.execute(query, params):
                rows[str(row[s.key])] = _Row(
                    title=str(row[s.title]) if s.title and row[s.title] is not None else None,
                    text="\n\n".join(str(row[c]) for c in s.text if row[c] is not None),
                    metadata={c: _meta(row[c]) for c in s.metadata if row[c] is not None},
                )
                value = row[s.updated] if s.updated else None
                if value is not None and (newest is None or value > newest):
                    newest = value
        if newest is None:
            return rows, None
        return rows, newest.isoformat() if isinstance(newest, datetime | date) else str(newest)

    def load(self, item: Item) -> DocumentIn:
        row = self._rows.get(item.external_id)
        if row is None:
            raise ValueError(f"row {item.external_id!r} was not read this run")
        if not row.text.strip():
            raise ValueError(f"row {item.external_id!r} has no text")
        return DocumentIn(
            external_id=item.external_id,
            title=row.title,
            content_base64=base64.b64encode(row.text.encode()).decode("ascii"),
            mime_type=self.spec.mime_type,
            metadata=row.metadata,
            acl=item.acl,
        )


def _principals(value: object) -> list[str]:
    """Readers from a text[] or comma-separated text; entries that are not principals are
    dropped (fail closed: a malformed reader reads nothing)."""
    entries = value if isinstance(value, list) else str(value or "").split(",")
    valid = set()
    for entry in entries:
        try:
            valid.add(acl_principal(str(entry).strip()))
        except RuleError:
            continue
    return sorted(valid)


def _meta(value: object) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)
