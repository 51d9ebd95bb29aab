"""A Git connector: the files of supported types at a ref, synced incrementally.

It drives the ``git`` command line (``subprocess``), not a binding: git is installed wherever
a repository is, no library of ours reimplements its object store, rename detection or
transport (ssh, https, credentials helpers), and the client package keeps its three
dependencies. Every listing is ``git ls-tree`` at the new commit, which is local and fast,
and gives each file's blob id: the content fingerprint, so only what the diff changed is
sent. The diff from the last synced commit (the connector's cursor) names the renames, so
a moved file keeps its external id. When that commit is not an ancestor of the new one (a
force-push rewrote history) or is gone, the run is a full resync: every id is its path again
and whatever the new tree lacks is deleted.

Only blobs are read, from the object store: a committed symbolic link (mode 120000) is
never followed into the host and a tree entry whose path is not plain (``..``) is skipped;
both are reported in ``GitConnector.skipped`` (``ragline_client.paths``).

Readers come from a path -> rule lookup (the fs connector's ACL map) and optionally an
owners lookup (CODEOWNERS): both are passed in, so the permission model stays the caller's.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ragline_client.connector import Connector, FileDocument, Item, Listing
from ragline_client.models import AclIn, DocumentIn
from ragline_client.paths import OutsideRootError, plain_parts

# Larger blobs go as streamed uploads from a temporary file (the fs connector's limit).
INLINE_MAX_BYTES = 1024 * 1024
FINGERPRINT_PREFIX = "git:"
_CHANGE_NAMES = {
    "A": "added",
    "M": "modified",
    "D": "deleted",
    "R": "renamed",
    "T": "type_changed",
    "C": "copied",
}


class GitError(RuntimeError):
    """A git command failed (no such repository or ref, an unreachable remote)."""


class PathRule(Protocol):
    @property
    def acl(self) -> AclIn: ...
    @property
    def title(self) -> str | None: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...


class PathRules(Protocol):
    def rule(self, rel: str) -> PathRule | None: ...


@dataclass(frozen=True, slots=True)
class Commit:
    sha: str
    author: str
    email: str
    date: str


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of ``git diff-tree -M``: status A, M, D, T or R (``old`` set for R)."""

    status: str
    path: str
    old: str | None = None


@dataclass(frozen=True, slots=True)
class Tree:
    """``GitRepo.tree``: path -> blob id of each file read, path -> why of each entry not."""

    files: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


class GitRepo:
    """A repository driven through the ``git`` CLI; ``GitRepo.open`` takes a path or a URL."""

    def __init__(self, git_dir: Path, *, label: str) -> None:
        self.git_dir = git_dir
        self.label = label
        self._batch: subprocess.Popen[bytes] | None = None

    @classmethod
    def open(cls, source: str, *, cache_dir: Path) -> GitRepo:
        """A local work tree or bare repository as it is; a URL mirrored under ``cache_dir``
        (cloned once, fetched with ``--prune`` on later runs, so a force-push is seen)."""
        local = Path(source)
        if "://" not in source and not source.startswith("git@") and local.exists():
            top = _git(["-C", str(local), "rev-parse", "--absolute-git-dir"]).strip()
            return cls(Path(top), label=str(local.resolve()))
        mirror = cache_dir / _slug(source)
        if (mirror / "HEAD").exists():
            _git(["--git-dir", str(mirror), "fetch", "--prune", "--force", "--quiet", "origin"])
        else:
            mirror.parent.mkdir(parents=True, exist_ok=True)
            _git(["clone", "--mirror", "--quiet", "--", source, str(mirror)])  # "--": never an option
        return cls(mirror, label=source)

    def git(self, *args: str, check: bool = True) -> str:
        return _git(["--git-dir", str(self.git_dir), *args], check=check)

    def resolve(self, ref: str) -> str:
        """The commit ``ref`` names, or ``""``."""
        return self.git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).strip()

    def is_ancestor(self, old: str, new: str) -> bool:
        """False also when ``old`` is no longer in the repository."""
        done = subprocess.run(
            ["git", "--git-dir", str(self.git_dir), "merge-base", "--is-ancestor", old, new],
            capture_output=True,
            check=False,
        )
        return done.returncode == 0

    def tree(self, commit: str) -> Tree:
        """The files at ``commit`` (submodules left out), and the entries never read: a
        symbolic link (mode 120000, whose blob is a path on whatever host checks it out) and
        a path that is not plain (a ``..`` entry, which ``git mktree`` accepts)."""
        tree = Tree()
        for entry in self.git("ls-tree", "-r", "-z", "--full-tree", commit).split("\0"):
            if not entry:
                continue
            meta, path = entry.split("\t", 1)
            mode, kind, blob = meta.split()
            if kind != "blob":
                continue
            try:
                plain_parts(path)
            except OutsideRootError as exc:
                tree.skipped[path] = str(exc.strerror)
                continue
            if mode == "120000":
                tree.skipped[path] = "a symbolic link is never followed"
            else:
                tree.files[path] = blob
        return tree

    def diff(self, old: str, new: str) -> list[Change]:
        fields = self.git("diff-tree", "-r", "-z", "-M", "--name-status", "--no-commit-id", old, new).split(
            "\0"
        )
        changes: list[Change] = []
        i = 0
        while i < len(fields) and fields[i]:
            status = fields[i][0]
            if status in "RC":
                changes.append(Change(status, fields[i + 2], old=fields[i + 1]))
                i += 3
            else:
                changes.append(Change(status, fields[i + 1]))
                i += 2
        return changes

    def last_commits(self, commit: str, paths: set[str]) -> dict[str, Commit]:
        """The newest commit that touched each of ``paths``: one ``git log`` pass that stops
        once every path is found."""
        found: dict[str, Commit] = {}
        args = ["git", "-c", "core.quotepath=off", "--git-dir", str(self.git_dir), "log", "--no-renames"]
        args += ["--name-only", "--format=%x01%H%x1f%an%x1f%ae%x1f%aI", commit]
        with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as log:
            assert log.stdout is not None
            current: Commit | None = None
            for line in log.stdout:
                line = line.rstrip("\n")
                if line.startswith("\x01"):
                    current = Commit(*line[1:].split("\x1f"))
                elif line and current is not None and line in paths and line not in found:
                    found[line] = current
                    if len(found) == len(paths):
                        log.kill()
                        break
        return found

    def read_blob(self, blob: str) -> bytes:
        """A blob's bytes through one long-lived ``git cat-file --batch``."""
        if self._batch is None:
            self._batch = subprocess.Popen(
                ["git", "--git-dir", str(self.git_dir), "cat-file", "--batch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        assert self._batch.stdin is not None and self._batch.stdout is not None
        self._batch.stdin.write(blob.encode() + b"\n")
        self._batch.stdin.flush()
        header = self._batch.stdout.readline().decode().split()
        if len(header) != 3 or header[1] != "blob":
            raise GitError(f"blob {blob} is missing from {self.label}")
        data = self._batch.stdout.read(int(header[2]) + 1)
        return data[:-1]

    def close(self) -> None:
        if self._batch is not None:
            assert self._batch.stdin is not None
            self._batch.stdin.close()
            self._batch.wait(timeout=10)
            self._batch = None


class GitConnector(Connector):
    """``GitConnector(GitRepo.open(...), ref="main", name=..., rules=acl_map, mime_by_suffix=...)``.

    External ids are paths in the repository; a file renamed after it was synced keeps the id
    it had (its path at the time), found from ``known()``, the recorded state (external id ->
    fingerprint, which names the path). ``owners(path)`` adds readers (CODEOWNERS). A file no
    rule and no owner covers fails on load and is retried once one does.
    """

    def __init__(
        self,
        repo: GitRepo,
        *,
        ref: str,
        name: str,
        rules: PathRules | None,
        mime_by_suffix: Mapping[str, str],
        known: Callable[[], Mapping[str, str]],
        owners: Callable[[str, str], Sequence[str]] | None = None,
    ) -> None:
        self.repo = repo
        self.ref = ref
        self.name = name
        self.rules = rules
        self.mime_by_suffix = mime_by_suffix
        self.known = known
        self.owners = owners
        self.commit = ""
        self.full_resync = False
        self.changes: dict[str, int] = {}
        self.skipped: dict[str, str] = {}  # the last listing's entries never read: path -> why
        self._files: dict[str, tuple[str, str, PathRule | None]] = {}  # id -> path, blob, rule
        self._commits: dict[str, Commit] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def list_items(self, cursor: str | None) -> Listing:
        if self.ref.startswith("-"):  # would reach git as an option
            raise GitError(f"{self.ref!r} is not a ref")
        new = self.repo.resolve(self.ref)
        if not new:
            raise GitError(f"{self.ref!r} names no commit in {self.repo.label}")
        self.commit, self._commits = new, None
        self.full_resync = cursor is not None and not self.repo.is_ancestor(cursor, new)
        tree = self.repo.tree(new)
        self.skipped = tree.skipped
        files = {p: b for p, b in tree.files.items() if Path(p).suffix.lower() in self.mime_by_suffix}
        ids = self._ids(cursor, new, set(files))
        self._files.clear()
        items = []
        for path, blob in sorted(files.items()):
            acl, rule = self._readers(path, new)
            external_id = ids.get(path, path)
            self._files[external_id] = (path, blob, rule)
            items.append(
                Item(external_id=external_id, fingerprint=f"{FINGERPRINT_PREFIX}{blob}:{path}", acl=acl)
            )
        # An unmoved cursor is not saved again, so a no-change run writes nothing.
        return Listing(items=items, cursor=new if new != cursor else None, complete=True)

    def _ids(self, cursor: str | None, new: str, paths: set[str]) -> dict[str, str]:
        """path -> external id where they differ (files renamed since their first sync)."""
        self.changes = {}
        if cursor is None or self.full_resync:
            return {}
        diff = self.repo.diff(cursor, new) if cursor != new else []
        for change in diff:
            if change.path in paths or change.status == "D":
                name = _CHANGE_NAMES.get(change.status, change.status)
                self.changes[name] = self.changes.get(name, 0) + 1
        aliases = self._recorded_aliases()
        for change in diff:
            if change.status == "R" and change.old is not None:
                aliases[change.path] = aliases.pop(change.old, change.old)
        # A new file at a renamed file's old path takes its own path as id; the moved one
        # then keeps its new path, so two files never share an id.
        taken = paths - set(aliases)
        return {p: i for p, i in aliases.items() if p in paths and (i not in taken or i == p)}

    def _recorded_aliases(self) -> dict[str, str]:
        aliases = {}
        for external_id, recorded in self.known().items():
            if recorded.startswith(FINGERPRINT_PREFIX):
                path = recorded.split("|acl:")[0].split(":", 2)[2]
                if path != external_id:
                    aliases[path] = external_id
        return aliases

    def _readers(self, path: str, commit: str) -> tuple[AclIn, PathRule | None]:
        rule = self.rules.rule(path) if self.rules is not None else None
        owners = list(self.owners(path, commit)) if self.owners is not None else []
        if rule is None and not owners:
            return AclIn(), None
        principals = sorted({*(rule.acl.principals if rule else []), *owners})
        return AclIn(principals=principals, public=bool(rule and rule.acl.public)), rule

    def load(self, item: Item) -> DocumentIn | FileDocument:
        path, blob, rule = self._files[item.external_id]
        if rule is None and not item.acl.principals:
            raise ValueError(f"no ACL map rule and no code owner covers {path!r}")
        commit = self._last_commit(path)
        meta: dict[str, Any] = {
            "path": path,
            "repository": self.repo.label,
            "ref": self.ref,
            "commit": commit.sha,
            "author": commit.author,
            "author_email": commit.email,
            "committed_at": commit.date,
            **(rule.metadata if rule else {}),
        }
        mime = self.mime_by_suffix[Path(path).suffix.lower()]
        title = rule.title if rule else None
        content = self.repo.read_blob(blob)
        if len(content) > INLINE_MAX_BYTES:
            if self._tmp is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="ragline-git-")
            spool = Path(self._tmp.name) / blob
            spool.write_bytes(content)
            return FileDocument(spool, item.external_id, mime, item.acl, title=title, metadata=meta)
        return DocumentIn(
            external_id=item.external_id,
            title=title,
            content_base64=base64.b64encode(content).decode("ascii"),
            mime_type=mime,
            metadata=meta,
            acl=item.acl,
        )

    def _last_commit(self, path: str) -> Commit:
        if self._commits is None:
            self._commits = self.repo.last_commits(self.commit, {p for p, _, _ in self._files.values()})
        found = self._commits.get(path)
        if found is None:  # a name git log quotes (a newline in it): the synced commit stands in
            info = self.repo.git("show", "-s", "--format=%H%x1f%an%x1f%ae%x1f%aI", self.commit).strip()
            found = Commit(*info.split("\x1f"))
        return found

    def close(self) -> None:
        self.repo.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _git(args: list[str], *, check: bool = True) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        command = next((a for a in args if not a.startswith("-") and "/" not in a), "")
        raise GitError(f"git {command} failed: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def _slug(source: str) -> str:
    tail = "".join(c if c.isalnum() or c in "._-" else "-" for c in source.rstrip("/").rsplit("/", 1)[-1])
    return f"{tail[:40] or 'repo'}-{hashlib.sha256(source.encode()).hexdigest()[:12]}"
