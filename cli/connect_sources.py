"""``ragline connect git PATH|URL``: a repository's files synced with the readers of an ACL
map and, optionally, CODEOWNERS (``ragline_client.git_source``); ``ragline connect sql DSN``:
the rows of a query with the readers the database names (``cli.connect_sql``);
``ragline connect imap URL``: an account's messages with their folders' ACLs
(``ragline_client.imap_source``).

Registered under ``ragline connect`` next to ``fs`` and ``sitemap``, whose options, ACL map
and run loop (``cli.connect``) it shares.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pathspec

from cli.connect import STILL_FAILING_NOTE, AclMap, _common, _connect, _state_name
from core.errors import InvalidInputError
from ragline_client import Client
from ragline_client.git_source import GitConnector, GitError, GitRepo
from ragline_client.rules import RuleError, acl_principal

CODEOWNERS_PATHS = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")  # GitHub's order


def register(sub: argparse._SubParsersAction) -> None:
    connect = sub.choices["connect"]
    csub = next(a for a in connect._actions if isinstance(a, argparse._SubParsersAction))
    git = csub.add_parser(
        "git",
        help="sync a Git repository's files at a ref: push what the diff changed, keep ids across renames",
        description="Incremental Git sync through the API: the files of supported types at --ref,"
        " readers from --acl-map (and --codeowners). Exit codes: 0 all synced, 3 some items"
        " failed in this run (run again to retry them), 2 invalid arguments, a git or a server"
        " error." + STILL_FAILING_NOTE,
    )
    git.add_argument("source", help="a local repository (work tree or bare) or a URL git can clone")
    git.add_argument("--ref", default="HEAD", help="branch, tag or commit to sync (default: HEAD)")
    git.add_argument(
        "--acl-map",
        type=Path,
        required=True,
        help="JSON: path in the repository, file name or glob -> {principals, public, title, metadata}",
    )
    git.add_argument(
        "--codeowners",
        action="store_true",
        help="add each file's code owners as readers (@user -> user:, @org/team -> group:org/team)",
    )
    git.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ragline" / "git",
        help="where a URL is mirrored (default: ~/.cache/ragline/git)",
    )
    _common(git, "git-<repo>-<hash>")
    git.set_defaults(handler=_git)
    table = csub.add_parser(
        "sql",
        help="sync the rows of a PostgreSQL query: push new and changed rows, delete vanished ones",
        description="Incremental SQL sync through the API: a query file (TOML) names the query,"
        " its key, title, text, metadata, monotonic, tombstone and ACL columns (or an ACL join"
        " query). Exit codes: 0 all synced, 3 some rows failed in this run (run again to retry"
        " them), 2 invalid arguments, a database or a server error." + STILL_FAILING_NOTE,
    )
    table.add_argument("dsn", help="libpq connection string or URL of the source database")
    table.add_argument("--query-file", type=Path, required=True, help="TOML: query and column roles")
    _common(table, "sql-<db>-<hash>")
    table.set_defaults(handler=_sql)
    mail = csub.add_parser(
        "imap",
        help="sync an IMAP account's messages with the readers their folders' ACLs name",
        description="Incremental IMAP sync through the API: every message of the account's"
        " folders, readers from the owner and the folder's ACL (RFC 4314), expunged messages"
        " deleted, a folder whose UIDVALIDITY changed synced again. Exit codes: 0 all synced,"
        " 3 some messages failed in this run (run again to retry them), 2 invalid arguments, an"
        " IMAP or a server error." + STILL_FAILING_NOTE,
    )
    mail.add_argument("imap_url", help="imap://USER@HOST[:PORT] or imaps://USER@HOST[:PORT]")
    mail.add_argument(
        "--password-file", type=Path, help="the account's password (default: $RAGLINE_IMAP_PASSWORD)"
    )
    _common(mail, "imap-<user>-<hash>")
    mail.set_defaults(handler=_imap)


class CodeOwners:
    """Owners per path from the CODEOWNERS file at a commit: gitignore-style patterns, the
    last matching line wins, as on GitHub and GitLab."""

    def __init__(self, repo: GitRepo) -> None:
        self.repo = repo
        self._rules: dict[str, list[tuple[pathspec.PathSpec, list[str]]]] = {}

    def __call__(self, path: str, commit: str) -> Sequence[str]:
        owners: list[str] = []
        for spec, principals in self._load(commit):
            if spec.match_file(path):
                owners = principals
        return owners

    def _load(self, commit: str) -> list[tuple[pathspec.PathSpec, list[str]]]:
        if commit not in self._rules:
            rules: list[tuple[pathspec.PathSpec, list[str]]] = []
            for line in self._text(commit).splitlines():
                fields = line.split("#", 1)[0].split()
                if len(fields) >= 1:
                    spec = pathspec.PathSpec.from_lines("gitignore", [fields[0]])
                    rules.append((spec, sorted({p for o in fields[1:] if (p := owner_principal(o))})))
            self._rules[commit] = rules
        return self._rules[commit]

    def _text(self, commit: str) -> str:
        for candidate in CODEOWNERS_PATHS:
            try:
                return self.repo.git("show", f"{commit}:{candidate}")
            except GitError:
                continue
        return ""


def owner_principal(owner: str) -> str | None:
    """``@alice`` -> ``user:alice``, ``@org/team`` -> ``group:org/team``, an e-mail address
    -> ``user:<address>``; anything else (not a valid principal) is left out."""
    if owner.startswith("@"):
        name = owner[1:]
        principal = f"group:{name}" if "/" in name else f"user:{name}"
    elif "@" in owner:
        principal = f"user:{owner}"
    else:
        return None
    try:
        return acl_principal(principal)
    except RuleError:
        return None


def default_git_name(source: str) -> str:
    local = Path(source)
    identity = str(local.resolve()) if local.exists() else source
    stem = identity.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    return _state_name("git", stem, identity)


def _git(args: argparse.Namespace) -> int:
    from ingest.files import MIME_BY_SUFFIX

    acl_map = AclMap.load(args.acl_map)
    if not args.url or not args.key:
        raise InvalidInputError("give --url and --key (or RAGLINE_API_URL and RAGLINE_API_KEY)")
    name = args.name or default_git_name(args.source)
    try:
        repo = GitRepo.open(args.source, cache_dir=args.cache_dir)
    except GitError as exc:
        print(f"ragline: error: {exc}", file=sys.stderr)
        return 2
    with Client(args.url, args.key) as state_client:
        connector = GitConnector(
            repo,
            ref=args.ref,
            name=name,
            rules=acl_map,
            mime_by_suffix=MIME_BY_SUFFIX,
            known=lambda: state_client.connector_state(name).documents,
            owners=CodeOwners(repo) if args.codeowners else None,
        )
        try:
            return _connect(args, connector, watch=None)
        except GitError as exc:
            print(f"ragline: error: {exc}", file=sys.stderr)
            return 2
        finally:
            connector.close()


def _sql(args: argparse.Namespace) -> int:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from cli.connect_sql import SqlConnector, SqlSpec

    spec = SqlSpec.load(args.query_file)
    if not args.url or not args.key:
        raise InvalidInputError("give --url and --key (or RAGLINE_API_URL and RAGLINE_API_KEY)")
    try:
        where = conninfo_to_dict(args.dsn)
    except psycopg.ProgrammingError as exc:
        raise InvalidInputError(f"invalid DSN: {exc}") from exc
    label = f"{where.get('host', 'local')}-{where.get('dbname', '')}"
    # The password is no part of the identity: the name stays when it rotates.
    identity = f"{label}|{args.query_file.resolve()}"
    name = args.name or _state_name("sql", label, identity)
    with Client(args.url, args.key) as state_client:
        connector = SqlConnector(
            args.dsn, spec, name=name, known=lambda: state_client.connector_state(name).documents
        )
        try:
            return _connect(args, connector, watch=None)
        except psycopg.Error as exc:
            print(f"ragline: error: the source database: {exc}".rstrip(), file=sys.stderr)
            return 2


def _imap(args: argparse.Namespace) -> int:
    from urllib.parse import unquote, urlsplit

    from ragline_client.imap_source import ImapConnector, ImapError

    parts = urlsplit(args.imap_url)
    if parts.scheme not in ("imap", "imaps") or not parts.hostname or not parts.username:
        raise InvalidInputError(f"{args.imap_url!r} is not imap://USER@HOST[:PORT] (or imaps://)")
    if args.password_file is not None:
        password = args.password_file.read_text().rstrip("\n")
    else:
        password = unquote(parts.password or "") or os.environ.get("RAGLINE_IMAP_PASSWORD", "")
    if not password:
        raise InvalidInputError("give --password-file, or set RAGLINE_IMAP_PASSWORD")
    user = unquote(parts.username)
    port = parts.port or (993 if parts.scheme == "imaps" else 143)
    identity = f"{parts.scheme}://{user}@{parts.hostname}:{port}"
    connector = ImapConnector(
        parts.hostname,
        port,
        user=user,
        password=password,
        name=args.name or _state_name("imap", user, identity),
        ssl=parts.scheme == "imaps",
    )
    try:
        return _connect(args, connector, watch=None)
    except (ImapError, OSError) as exc:
        print(f"ragline: error: {exc}", file=sys.stderr)
        return 2
    finally:
        connector.close()
