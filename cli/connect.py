"""``ragline connect fs PATH`` and ``ragline connect sitemap URL``: incremental syncs over the
client, on the connector kit (``ragline_client.connector``).

It walks a tree (PDF, HTML, Markdown, text; hidden files and dot-folders skipped, then
``--include``/``--exclude`` globs; no symbolic link below the folder followed, and every
read checked on the opened file: ``ragline_client.paths``), pushes files that are new or
whose content changed, updates ACLs that alone changed, deletes documents whose files
disappeared, and with ``--watch`` syncs again on every change ``watchfiles`` reports. Its state (per file:
content hash and ACL) lives in the server's catalog under the connector's name, so a second
run over an unchanged tree sends nothing and a restart resumes. The server records the
connector as the owner of what it pushes: another folder's connector can neither delete nor
overwrite those documents (a shared relative path fails there; ``--id-prefix`` tells them apart).
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import grp
import hashlib
import ipaddress
import json
import os
import pwd
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from cli.connect_report import render
from cli.output import add_json_flag
from cli.selection import add_file_flags, file_filter, skipped_lines
from core import validation
from core.errors import InvalidInputError
from core.validation import acl_principal
from ingest.files import MIME_BY_SUFFIX, FileFilter, Walked, walk
from ragline_client import (
    AclIn,
    Client,
    Connector,
    DocumentIn,
    FileDocument,
    Item,
    Listing,
    RaglineError,
    Syncer,
    SyncReport,
)
from ragline_client.git_source import GitConnector
from ragline_client.paths import OutsideRootError, open_beneath
from ragline_client.sitemap import SitemapConnector, SitemapError

# Files above this go as streamed uploads, not base64 inside a JSON batch (which grows them
# by a third and must fit the server's body limit with the rest of the batch).
INLINE_MAX_BYTES = 1024 * 1024
# Every ``ragline connect`` command's help says so, after its exit codes.
STILL_FAILING_NOTE = (
    " An item whose content failed for good (encrypted, corrupt, unsupported) is not sent again"
    " while it is unchanged: later runs name it as still failing and exit 0 (--retry-failed"
    " sends it again)."
)


def register(sub: argparse._SubParsersAction) -> None:
    connect = sub.add_parser("connect", help="sync a source into a ragline server")
    csub = connect.add_subparsers(dest="connector", required=True)
    epilog = (
        " Exit codes: 0 all synced, 3 some items failed in this run (run again to retry"
        " them), 2 invalid arguments or a server error." + STILL_FAILING_NOTE
    )
    fs = csub.add_parser(
        "fs",
        help="sync a directory tree: push new and changed files, delete vanished ones",
        description="Incremental filesystem sync through the API." + epilog,
    )
    fs.add_argument("path", type=Path)
    acl = fs.add_mutually_exclusive_group(required=True)
    acl.add_argument(
        "--acl-map",
        type=Path,
        help="JSON: relative path, file name or glob -> {principals, public, title, metadata}",
    )
    acl.add_argument(
        "--posix-acl", action="store_true", help="readers from the file's owner, group (g+r) and o+r (public)"
    )
    fs.add_argument("--watch", action="store_true", help="keep syncing on every change under PATH")
    fs.add_argument(
        "--id-prefix",
        default="",
        metavar="PREFIX",
        help="put PREFIX before every external id (PREFIX + relative path), so folders with the same"
        " relative paths can share a tenant",
    )
    add_file_flags(fs)
    _common(fs, "fs-<dir>-<hash>")
    fs.set_defaults(handler=_fs)
    site = csub.add_parser(
        "sitemap",
        help="sync the pages a sitemap lists: push new and changed, delete dropped ones",
        description="Incremental sync of a site's sitemap.xml (pages with <lastmod> are not"
        " fetched unless it changed)." + epilog,
    )
    site.add_argument("sitemap_url")
    readers = site.add_mutually_exclusive_group(required=True)
    readers.add_argument("--acl", help="comma-separated readers of every page, e.g. group:eng,user:bob")
    readers.add_argument("--public", action="store_true", help="every page readable by the whole tenant")
    site.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="a host besides the sitemap's own that its entries and redirects may name (repeatable)",
    )
    site.add_argument(
        "--allow-network",
        action="append",
        default=[],
        type=ipaddress.ip_network,
        metavar="CIDR",
        help="a private, loopback or other non-global network the fetches may reach, e.g. an"
        " intranet site's 10.1.0.0/16 (repeatable; default: global addresses only)",
    )
    _common(site, "sitemap-<host>-<hash>")
    site.set_defaults(handler=_sitemap)


def _common(parser: argparse.ArgumentParser, default_name: str) -> None:
    parser.add_argument("--tenant", required=True, help="must be the tenant of the API key")
    parser.add_argument("--name", help=f"the connector's name for its sync state (default: {default_name})")
    parser.add_argument("--url", default=os.environ.get("RAGLINE_API_URL"), help="default: $RAGLINE_API_URL")
    parser.add_argument("--key", default=os.environ.get("RAGLINE_API_KEY"), help="default: $RAGLINE_API_KEY")
    parser.add_argument(
        "--no-wait", action="store_true", help="record items once accepted, not once ingested"
    )
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="send again the items whose content failed for good in an earlier run (encrypted,"
        " corrupt, unsupported), though unchanged: after a server upgrade or a raised limit",
    )
    add_json_flag(parser)


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


def posix_rule(info: os.stat_result) -> AclRule:
    """Readers from a file's mode (``os.fstat`` of the file read, never a link's target):
    its owner, its group when group-readable, everyone in the tenant when world-readable."""
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
    """A directory tree as a source; external ids are ``id_prefix`` + paths relative to the
    root. ``selection`` says which files are taken (no hidden ones by default); ``walked``
    keeps what the last listing passed over."""

    def __init__(
        self,
        root: Path,
        *,
        name: str,
        acl_map: AclMap | None,
        selection: FileFilter | None = None,
        id_prefix: str = "",
    ) -> None:
        self.root = root
        self.name = name
        self.acl_map = acl_map
        self.selection = selection or FileFilter()
        self.id_prefix = id_prefix
        self._files: dict[str, tuple[Path, str, AclRule]] = {}
        self.unmapped: list[str] = []
        self.walked = Walked()
        self._spooled: Path | None = None

    def list_items(self, cursor: str | None) -> Listing:
        self._files.clear()
        self.unmapped = []
        items = []
        self.walked = walk([self.root], self.selection)
        for path, rel in self.walked.found:
            external_id = self.id_prefix + rel
            try:
                with open_beneath(self.root, rel) as f:
                    info, digest = os.fstat(f.fileno()), hashlib.file_digest(f, "sha256").hexdigest()
            except OutsideRootError:
                self.walked.links.append(path)  # made a link since the walk: skipped as one
                continue
            except OSError:
                continue  # vanished between walk and read: the next run sees it gone
            rule = self.acl_map.rule(rel) if self.acl_map is not None else posix_rule(info)
            if rule is None:
                # Guessing readers would be wrong either way: the file fails on load, visibly,
                # and is never recorded, so it is tried again once the map covers it.
                self.unmapped.append(external_id)
            rule = rule or AclRule(acl=AclIn())
            self._files[external_id] = (path, rel, rule)
            items.append(Item(external_id=external_id, fingerprint=_fingerprint(digest, rule), acl=rule.acl))
        return Listing(items=items, complete=True)

    def load(self, item: Item) -> DocumentIn | FileDocument:
        if item.external_id in self.unmapped:
            raise ValueError(f"no rule in the ACL map matches {item.external_id!r}")
        path, rel, rule = self._files[item.external_id]
        mime = MIME_BY_SUFFIX[path.suffix.lower()]
        meta = {"path": rel, **rule.metadata}
        with open_beneath(self.root, rel) as f:  # a link put in since the listing fails the item
            if os.fstat(f.fileno()).st_size > INLINE_MAX_BYTES:
                spool = self._spool(f, path.suffix)
                return FileDocument(spool, item.external_id, mime, item.acl, title=rule.title, metadata=meta)
            content = f.read()
        return DocumentIn(
            external_id=item.external_id,
            title=rule.title,
            content_base64=base64.b64encode(content).decode("ascii"),
            mime_type=mime,
            metadata=meta,
            acl=item.acl,
        )

    def _spool(self, source: BinaryIO, suffix: str) -> Path:
        """A copy of the opened file for the streamed upload, which opens a path: the copy is
        ours, so nothing swapped in at the source between this check and that open is read.
        One at a time (the kit uploads each file before it loads the next)."""
        self.close()
        handle, name = tempfile.mkstemp(prefix="ragline-fs-", suffix=suffix)
        self._spooled = Path(name)
        with os.fdopen(handle, "wb") as out:
            shutil.copyfileobj(source, out, length=1024 * 1024)
        return self._spooled

    def close(self) -> None:
        if self._spooled is not None:
            self._spooled.unlink(missing_ok=True)
            self._spooled = None


def _fingerprint(digest: str, rule: AclRule) -> str:
    """The content's hash, and the ACL map's title and metadata where it gives any: an edit of
    those alone pushes the file again (the server finds the content unchanged and applies the
    new description without re-embedding). Files the map describes not keep their old form."""
    if rule.title is None and not rule.metadata:
        return f"sha256:{digest}"
    described = json.dumps([rule.title, dict(rule.metadata)], sort_keys=True, default=str)
    return f"sha256:{digest};desc:{hashlib.sha256(described.encode()).hexdigest()[:16]}"


def _state_name(kind: str, label: str, identity: str) -> str:
    stem = "".join(c if c.isalnum() or c in "_.-" else "-" for c in label)[:40] or "root"
    return f"{kind}-{stem}-{hashlib.sha256(identity.encode()).hexdigest()[:8]}"


def default_name(root: Path) -> str:
    resolved = root.resolve()
    return _state_name("fs", resolved.name, str(resolved))


def _fs(args: argparse.Namespace) -> int:
    if not args.path.is_dir():
        raise InvalidInputError(f"{args.path} is not a directory")
    acl_map = AclMap.load(args.acl_map) if args.acl_map else None
    if args.id_prefix:
        validation.external_id(args.id_prefix + "x")  # the same rules as any id (no NUL, ...)
    connector = FsConnector(
        args.path,
        name=args.name or default_name(args.path),
        acl_map=acl_map,
        selection=file_filter(args),
        id_prefix=args.id_prefix,
    )
    try:
        return _connect(args, connector, watch=args.path if args.watch else None)
    finally:
        connector.close()


def _sitemap(args: argparse.Namespace) -> int:
    principals = sorted({acl_principal(p.strip()) for p in (args.acl or "").split(",") if p.strip()})
    if not args.public and not principals:
        raise InvalidInputError("--acl names no reader")
    name = args.name or _state_name("sitemap", httpx.URL(args.sitemap_url).host, args.sitemap_url)
    with httpx.Client(timeout=30.0) as http:
        try:
            connector = SitemapConnector(
                args.sitemap_url,
                name=name,
                acl=AclIn(principals=principals, public=args.public),
                http=http,
                allow_hosts=args.allow_host,
                allow_networks=args.allow_network,
            )
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        return _connect(args, connector, watch=None)


def _connect(args: argparse.Namespace, connector: Connector, *, watch: Path | None) -> int:
    """Check the key's tenant, sync once, then (``watch``) again on every change under it."""
    if not args.url or not args.key:
        raise InvalidInputError("give --url and --key (or RAGLINE_API_URL and RAGLINE_API_KEY)")
    try:
        with Client(args.url, args.key) as client:
            me = client.me()
            if me.tenant_id != args.tenant:
                raise InvalidInputError(
                    f"--tenant {args.tenant} does not match the API key's tenant {me.tenant_id}"
                )
            syncer = Syncer(client, connector, wait=not args.no_wait, retry_failed=args.retry_failed)
            report = _sync_once(syncer, as_json=args.json)
            if watch is not None:
                report = _watch(syncer, watch, as_json=args.json)
    except (RaglineError, SitemapError, httpx.HTTPError) as exc:
        # A server or a source (a sitemap) that cannot be read: a clear error, not a traceback.
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
    extra: dict[str, Any] = {}
    connector = syncer.connector
    if isinstance(connector, FsConnector):
        extra["skipped"] = connector.walked.skipped()
        for line in skipped_lines(connector.walked, [connector.root]):
            print(line, file=sys.stderr)
    elif isinstance(connector, GitConnector):
        extra["skipped"] = len(connector.skipped)
        for path, why in sorted(connector.skipped.items()):
            print(f"  skipped {path!r}: {why}", file=sys.stderr)
    render(report, extra, as_json=as_json)
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
