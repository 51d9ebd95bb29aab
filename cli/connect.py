"""``ragline connect fs PATH``: the filesystem connector, an incremental sync over the client.

It walks a tree (PDF, HTML, Markdown, text), pushes files that are new or whose content
changed, updates ACLs that alone changed, deletes documents whose files disappeared, and
with ``--watch`` syncs again on every change ``watchfiles`` reports. Its state (per file:
content hash and ACL) lives in the server's catalog under the connector's name, so a second
run over an unchanged tree sends nothing and a restart resumes.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import grp
import hashlib
import json
import os
import pwd
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli.output import add_json_flag
from core.errors import InvalidInputError
from ingest.files import MIME_BY_SUFFIX, walk
from ragline_client import AclIn, Client, Connector, DocumentIn, FileDocument, Item, Listing, RaglineError
from ragline_client.connector import Syncer, SyncReport

# Files above this go as streamed uploads, not base64 inside a JSON batch (which grows them
# by a third and must fit the server's body limit with the rest of the batch).
INLINE_MAX_BYTES = 1024 * 1024


def register(sub: argparse._SubParsersAction) -> None:
    connect = sub.add_parser("connect", help="sync a source into a ragline server")
    csub = connect.add_subparsers(dest="connector", required=True)
    fs = csub.add_parser(
        "fs",
        help="sync a directory tree: push new and changed files, delete vanished ones",
        description="Incremental filesystem sync through the API. Exit codes: 0 all synced,"
        " 3 some files failed (run again to retry them), 2 invalid arguments or a server error.",
    )
    fs.add_argument("path", type=Path)
    fs.add_argument("--tenant", required=True, help="must be the tenant of the API key")
    acl = fs.add_mutually_exclusive_group(required=True)
    acl.add_argument(
        "--acl-map",
        type=Path,
        help="JSON: relative path, file name or glob -> {principals, public, title, metadata}",
    )
    acl.add_argument(
        "--posix-acl", action="store_true", help="readers from the file's owner, group (g+r) and o+r (public)"
    )
    fs.add_argument("--name", help="the connector's name for its sync state (default: fs-<dir>-<hash>)")
    fs.add_argument("--url", default=os.environ.get("RAGLINE_API_URL"), help="default: $RAGLINE_API_URL")
    fs.add_argument("--key", default=os.environ.get("RAGLINE_API_KEY"), help="default: $RAGLINE_API_KEY")
    fs.add_argument("--watch", action="store_true", help="keep syncing on every change under PATH")
    fs.add_argument("--no-wait", action="store_true", help="record files once accepted, not once ingested")
    add_json_flag(fs)
    fs.set_defaults(handler=_fs)


EXIT_SOME_FAILED = 3


@dataclass(frozen=True, slots=True)
class AclRule:
    acl: AclIn
    title: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


class AclMap:
    """Rules from a JSON file: a key is a relative path, a file name or an ``fnmatch`` glob
    (``"hr/*"``, ``"*"`` for a default); exact keys win over globs, globs in file order."""

    def __init__(self, rules: Mapping[str, Mapping[str, Any]]) -> None:
        self._rules: dict[str, AclRule] = {}
        for key, entry in rules.items():
            acl_entry = entry.get("acl", entry)
            self._rules[key] = AclRule(
                acl=AclIn(
                    principals=list(acl_entry.get("principals", [])), public=acl_entry.get("public", False)
                ),
                title=entry.get("title"),
                metadata=dict(entry.get("metadata", {})),
            )

    @classmethod
    def load(cls, path: Path) -> AclMap:
        try:
            return cls(json.loads(path.read_text()))
        except (OSError, ValueError, AttributeError) as exc:
            raise InvalidInputError(f"cannot read the ACL map {path}: {exc}") from exc

    def rule(self, rel: str) -> AclRule | None:
        exact = self._rules.get(rel) or self._rules.get(Path(rel).name)
        if exact is not None:
            return exact
        return next((r for k, r in self._rules.items() if fnmatch.fnmatchcase(rel, k)), None)


def posix_rule(path: Path) -> AclRule:
    """Readers from the file's mode: its owner, its group when group-readable, everyone in
    the tenant when world-readable."""
    info = path.stat()
    principals = [f"user:{_name(pwd.getpwuid, info.st_uid)}"]
    if info.st_mode & stat.S_IRGRP:
        principals.append(f"group:{_name(grp.getgrgid, info.st_gid)}")
    return AclRule(acl=AclIn(principals=principals, public=bool(info.st_mode & stat.S_IROTH)))


def _name(lookup: Any, ident: int) -> str:
    try:
        return str(lookup(ident)[0])
    except KeyError:  # no passwd/group entry (a container, an NFS uid): the number names it
        return str(ident)


class FsConnector(Connector):
    """A directory tree as a source; external ids are paths relative to the root."""

    def __init__(self, root: Path, *, name: str, acl_map: AclMap | None) -> None:
        self.root = root
        self.name = name
        self.acl_map = acl_map
        self._files: dict[str, tuple[Path, AclRule]] = {}
        self.unmapped: list[str] = []

    def list_items(self, cursor: str | None) -> Listing:
        self._files.clear()
        self.unmapped = []
        items = []
        found, _skipped = walk([self.root])
        for path, rel in found:
            rule = self.acl_map.rule(rel) if self.acl_map is not None else posix_rule(path)
            if rule is None:
                # Guessing readers would be wrong either way: the file fails on load, visibly,
                # and is never recorded, so it is tried again once the map covers it.
                self.unmapped.append(rel)
            try:
                digest = _sha256(path)
            except OSError:
                continue  # vanished between walk and read: the next run sees it gone
            rule = rule or AclRule(acl=AclIn())
            self._files[rel] = (path, rule)
            items.append(Item(external_id=rel, fingerprint=f"sha256:{digest}", acl=rule.acl))
        return Listing(items=items, complete=True)

    def load(self, item: Item) -> DocumentIn | FileDocument:
        if item.external_id in self.unmapped:
            raise ValueError(f"no rule in the ACL map matches {item.external_id!r}")
        path, rule = self._files[item.external_id]
        mime = MIME_BY_SUFFIX[path.suffix.lower()]
        meta = {"path": item.external_id, **rule.metadata}
        if path.stat().st_size > INLINE_MAX_BYTES:
            return FileDocument(path, item.external_id, mime, item.acl, title=rule.title, metadata=meta)
        return DocumentIn(
            external_id=item.external_id,
            title=rule.title,
            content_base64=base64.b64encode(path.read_bytes()).decode("ascii"),
            mime_type=mime,
            metadata=meta,
            acl=item.acl,
        )


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def default_name(root: Path) -> str:
    resolved = root.resolve()
    stem = "".join(c if c.isalnum() or c in "_.-" else "-" for c in resolved.name)[:40] or "root"
    return f"fs-{stem}-{hashlib.sha256(str(resolved).encode()).hexdigest()[:8]}"


def _fs(args: argparse.Namespace) -> int:
    if not args.url or not args.key:
        raise InvalidInputError("give --url and --key (or RAGLINE_API_URL and RAGLINE_API_KEY)")
    if not args.path.is_dir():
        raise InvalidInputError(f"{args.path} is not a directory")
    acl_map = AclMap.load(args.acl_map) if args.acl_map else None
    connector = FsConnector(args.path, name=args.name or default_name(args.path), acl_map=acl_map)
    try:
        with Client(args.url, args.key) as client:
            me = client.me()
            if me.tenant_id != args.tenant:
                raise InvalidInputError(
                    f"--tenant {args.tenant} does not match the API key's tenant {me.tenant_id}"
                )
            syncer = Syncer(client, connector, wait=not args.no_wait)
            report = _sync_once(syncer, as_json=args.json)
            if args.watch:
                report = _watch(syncer, args.path, as_json=args.json)
    except RaglineError as exc:
        print(f"ragline: error: {exc}", file=sys.stderr)
        return 2
    return EXIT_SOME_FAILED if report.failed else 0


def _sync_once(syncer: Syncer, *, as_json: bool) -> SyncReport:
    from core.progress import Progress

    plan = syncer.plan()
    progress = Progress(plan.total)
    try:
        report = syncer.apply(plan, progress)
    finally:
        progress.close()
    if as_json:
        print(json.dumps(report.summary()), flush=True)
    else:
        print(
            "pushed {pushed}  unchanged {unchanged}  deleted {deleted}  failed {failed}".format(
                **report.summary()
            ),
            flush=True,
        )
        for external_id, message in sorted(report.errors.items()):
            print(f"  failed {external_id}: {message}", file=sys.stderr)
    return report


def _watch(syncer: Syncer, root: Path, *, as_json: bool) -> SyncReport:
    """Sync again after every batch of changes watchfiles reports (it debounces bursts);
    ends on Ctrl-C with the last run's report."""
    import watchfiles

    report = SyncReport()

    def relevant(_change: watchfiles.Change, path: str) -> bool:
        return Path(path).suffix.lower() in MIME_BY_SUFFIX

    try:
        for _changes in watchfiles.watch(root, watch_filter=relevant, debounce=500):
            report = _sync_once(syncer, as_json=as_json)
    except KeyboardInterrupt:
        pass
    return report
