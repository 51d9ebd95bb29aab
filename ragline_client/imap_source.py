"""An IMAP connector (``imaplib``, the standard library): one account's messages, with the
readers their folders' ACLs name (RFC 4314).

A message is immutable in IMAP: (folder, UIDVALIDITY, UID) names one content forever, so
the external id is that triple (an RFC 5092 IMAP URL) and its fingerprint never changes.
Each run lists every folder's UIDs (``UID SEARCH ALL``: ids only, no message is fetched) and
only messages never recorded are fetched; an expunged message is missing from the listing
and deleted. A folder whose UIDVALIDITY changed gets new ids for all its messages: the old
ones are deleted and the folder is synced again in full. Readers are the mailbox owner plus
every identifier the folder's ACL (``GETACL``) grants ``r``; ``anyone`` and ``authenticated``
make it public to the tenant; an identifier starting with ``$`` is a group. Where GETACL is
refused (the account lacks the ``a`` right) only the owner reads. A change of ACL at the
server is an ACL-only update of the folder's messages on the next run.

Attachments of a type the server parses become documents of their own, linked to their
message (``<message id>#attachment=N``, metadata ``parent_external_id``, the message's
readers): the kit's :class:`~ragline_client.connector.Linked` keeps them with the message,
gives them its ACL changes and deletes them with it. Others, and any over
``MAX_ATTACHMENT_BYTES``, are named in the message's ``attachments_skipped`` metadata.
"""

from __future__ import annotations

import base64
import email
import email.policy
import hashlib
import imaplib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from email.message import EmailMessage

from ragline_client.connector import Connector, Item, Linked, Listing
from ragline_client.models import MIME_TYPES, AclIn, DocumentIn, mime_for_name
from ragline_client.rules import RuleError, acl_principal, as_label

FINGERPRINT = "imap:immutable"
# An attachment larger than this is listed as skipped, not sent inline (the push body's limit).
MAX_ATTACHMENT_BYTES = 4 * 1024 * 1024
_LIST = re.compile(rb'\((?P<flags>[^)]*)\) (?P<sep>"(?:[^"\\]|\\.)*"|NIL) (?P<name>.+)')
_TOKEN = re.compile(rb'"((?:[^"\\]|\\.)*)"|(\S+)')


class ImapError(RuntimeError):
    """The server refused a command the sync needs (login, LIST, SELECT, FETCH)."""


@dataclass(frozen=True, slots=True)
class _Message:
    folder: str
    uid: int


class ImapConnector(Connector):
    """``ImapConnector("127.0.0.1", 143, user="ann", password=..., name=...)``.

    Syncs the account's personal folders (the shared namespace is left to each owner's own
    sync, so a shared folder is one set of documents, not one per account that sees it).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        user: str,
        password: str,
        name: str,
        ssl: bool = False,
        shared_prefix: str = "shared/",
    ) -> None:
        self.host, self.port, self.user, self.password = host, port, user, password
        self.name = name
        self.ssl = ssl
        self.shared_prefix = shared_prefix
        self.full_resync: list[str] = []
        self.searched: list[str] = []  # folders whose UIDs the last run listed
        self.condstore = False  # the server offers CONDSTORE (RFC 7162) and it is enabled
        self.acl_source: dict[str, str] = {}  # folder -> "getacl" | "owner"
        self._imap: imaplib.IMAP4 | None = None
        self._messages: dict[str, _Message] = {}
        self._selected: str | None = None

    def _session(self) -> imaplib.IMAP4:
        if self._imap is None:
            cls = imaplib.IMAP4_SSL if self.ssl else imaplib.IMAP4
            try:
                imap = cls(self.host, self.port, timeout=60)
                _ok(imap.login(self.user, self.password), "LOGIN")
                kind, caps = imap.capability()  # after LOGIN: servers widen the list then
                first = caps[0] if kind == "OK" and caps else None
                words = set(first.upper().split()) if isinstance(first, bytes) else set()
                self.condstore = b"CONDSTORE" in words and imap.enable("CONDSTORE")[0] == "OK"
            except imaplib.IMAP4.error as exc:
                raise ImapError(f"IMAP LOGIN as {self.user} failed: {exc}") from exc
            self._imap = imap
        return self._imap

    def list_items(self, cursor: str | None) -> Listing:
        self._session()
        before: dict[str, int | list[int | str]] = json.loads(cursor) if cursor else {}
        marks: dict[str, int | list[int | str]] = {}
        self._messages.clear()
        self.full_resync, self.searched = [], []
        items: list[Item] = []
        vouched: list[str] = []
        for folder in self._folders():
            acl = self._readers(folder)
            uidvalidity, mark = self._state(folder, acl)
            marks[folder] = mark if mark is not None else uidvalidity
            previous = before.get(folder)
            if folder in before and _validity(previous) != uidvalidity:
                self.full_resync.append(folder)
            if mark is not None and previous == mark:
                vouched.append(self._url(folder, uidvalidity, None))  # nothing came, went or changed
                continue
            self.searched.append(folder)
            for uid in self._uids(folder):
                external_id = self._url(folder, uidvalidity, uid)
                self._messages[external_id] = _Message(folder, uid)
                items.append(Item(external_id=external_id, fingerprint=FINGERPRINT, acl=acl))
        self._selected = None
        state = json.dumps(marks, sort_keys=True, separators=(",", ":"))
        # Too many folders for the cursor: the old one is kept (what it vouches for still holds).
        moved = state if state != cursor and len(state) <= 4096 else None
        # The marks vouch for folders next run: a run that failed an item must not save them,
        # or that item would not be tried again until its folder changed.
        return Listing(items=items, cursor=moved, complete=True, unchanged=vouched, cursor_vouches=True)

    def _folders(self) -> Iterator[str]:
        kind, lines = self._session().list()
        _ok((kind, lines), "LIST")
        for line in lines:
            if not isinstance(line, bytes):
                continue
            match = _LIST.match(line)
            if match is None or b"\\noselect" in match.group("flags").lower():
                continue
            name = _unquote(match.group("name"))
            if not name.startswith(self.shared_prefix):
                yield name

    def _select(self, folder: str) -> imaplib.IMAP4:
        imap = self._session()
        if self._selected != folder:
            _ok(imap.select(_quote(folder), readonly=True), f"SELECT {folder}")
            self._selected = folder
        return imap

    def _state(self, folder: str, acl: AclIn) -> tuple[int, list[int | str] | None]:
        """The folder's UIDVALIDITY, and with CONDSTORE its mark: UIDVALIDITY, HIGHESTMODSEQ,
        UIDNEXT, message count and the readers' digest. An equal mark says no message came
        or went (an expunge, a new message each move HIGHESTMODSEQ or the count) and the ACL
        is the same, so the folder's recorded documents stand without listing its UIDs."""
        self._selected = None  # SELECT again: the counts are those of now
        imap = self._select(folder)
        # The last of each response is this SELECT's: earlier ones (another folder's SELECT
        # for a load) may still wait in imaplib's list.
        validity = imap.response("UIDVALIDITY")[1]
        if not validity or validity[-1] is None:
            raise ImapError(f"{folder}: the server sent no UIDVALIDITY")
        uidvalidity = int(validity[-1])
        modseq, uidnext, exists = (imap.response(code)[1] for code in ("HIGHESTMODSEQ", "UIDNEXT", "EXISTS"))
        if not self.condstore or not modseq or modseq[-1] is None or not uidnext or not exists:
            return uidvalidity, None
        readers = json.dumps([sorted(acl.principals), acl.public]).encode()
        digest = hashlib.sha256(readers).hexdigest()[:12]
        count = int(exists[-1] or 0)
        return uidvalidity, [uidvalidity, int(modseq[-1]), int(uidnext[-1] or 0), count, digest]

    def _uids(self, folder: str) -> list[int]:
        kind, data = self._select(folder).uid("SEARCH", "ALL")
        _ok((kind, data), f"UID SEARCH {folder}")
        return [int(u) for u in (data[0] or b"").split()]

    def _readers(self, folder: str) -> AclIn:
        kind, data = self._session().getacl(_quote(folder))
        if kind != "OK" or not data or not isinstance(data[0], bytes):
            self.acl_source[folder] = "owner"
            return AclIn(principals=[f"user:{self.user}"])
        self.acl_source[folder] = "getacl"
        return folder_readers(self.user, data[0])

    def _url(self, folder: str, uidvalidity: int, uid: int | None) -> str:
        """A message's RFC 5092 URL; with ``uid`` None, the prefix of every message's in the folder."""
        prefix = f"imap://{self.user}@{self.host}/{folder};UIDVALIDITY={uidvalidity}/;UID="
        return prefix if uid is None else f"{prefix}{uid}"

    def load(self, item: Item) -> Linked:
        message = self._messages[item.external_id]
        imap = self._select(message.folder)
        kind, data = imap.uid("FETCH", str(message.uid), "(BODY.PEEK[])")
        raw = next((part[1] for part in data if isinstance(part, tuple)), None) if kind == "OK" else None
        if not isinstance(raw, bytes):
            raise ValueError(f"{item.external_id}: no such message (expunged meanwhile?)")
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        body = parsed.get_body(preferencelist=("plain", "html"))
        if body is None:
            raise ValueError(f"{item.external_id}: no text or HTML body")
        mime = "text/html" if body.get_content_type() == "text/html" else "text/plain"
        text = str(body.get_content())
        meta = {
            "folder": message.folder,
            "message_id": str(parsed.get("Message-ID", "")).strip(),
            "from": str(parsed.get("From", "")),
            "to": str(parsed.get("To", "")),
            "cc": str(parsed.get("Cc", "")),
            "date": str(parsed.get("Date", "")),
            "mailbox_owner": self.user,
        }
        subject = as_label(str(parsed.get("Subject", ""))) or None
        attachments, skipped = self._attachments(item, parsed, meta, subject)
        meta["attachments"] = ", ".join(d.title or d.external_id for d in attachments)
        meta["attachments_skipped"] = ", ".join(skipped)
        document = DocumentIn(
            external_id=item.external_id,
            title=subject,
            content_base64=base64.b64encode(text.encode()).decode("ascii"),
            mime_type=mime,
            metadata={k: as_label(v)[:2000] for k, v in meta.items() if v},
            acl=item.acl,
        )
        return Linked(document, attachments)

    def _attachments(
        self, item: Item, parsed: EmailMessage, meta: dict[str, str], subject: str | None
    ) -> tuple[list[DocumentIn], list[str]]:
        """The message's attachments of types the server parses, as documents linked to it
        (``<message id>#attachment=N``, N counting every attachment from 1, so an id stays
        the attachment's: a message never changes), and the others by name and why."""
        linked: list[DocumentIn] = []
        skipped: list[str] = []
        for number, part in enumerate(parsed.iter_attachments(), start=1):
            name = as_label(str(part.get_filename() or "")) or f"attachment-{number}"
            declared = part.get_content_type()
            mime = declared if declared in MIME_TYPES else mime_for_name(name)
            content = part.get_payload(decode=True)
            if mime not in MIME_TYPES or not isinstance(content, bytes) or not content:
                skipped.append(f"{name} ({declared})")
                continue
            if len(content) > MAX_ATTACHMENT_BYTES:
                skipped.append(f"{name} (over {MAX_ATTACHMENT_BYTES // (1024 * 1024)} MiB)")
                continue
            own = {
                "folder": meta["folder"],
                "message_id": meta["message_id"],
                "parent_external_id": item.external_id,
                "attachment_filename": name,
                "message_subject": subject or "",
                "mailbox_owner": self.user,
            }
            linked.append(
                DocumentIn(
                    external_id=f"{item.external_id}#attachment={number}",
                    title=name[:1000],
                    content_base64=base64.b64encode(content).decode("ascii"),
                    mime_type=mime,
                    metadata={k: as_label(v)[:2000] for k, v in own.items() if v},
                    acl=item.acl,
                )
            )
        return linked, skipped

    def close(self) -> None:
        if self._imap is not None:
            try:
                self._imap.logout()
            except (imaplib.IMAP4.error, OSError):
                pass
            self._imap = None


def folder_readers(owner: str, getacl: bytes) -> AclIn:
    """Readers from a GETACL response line (``mailbox id rights id rights ...``): the owner,
    each identifier with ``r`` (``$name`` a group), public for ``anyone``/``authenticated``;
    a negative right (``-name r``) takes the identifier out. An identifier that is no valid
    principal reads nothing."""
    tokens = [_unquote(t) for t in _tokens(getacl)][1:]  # the mailbox name first
    granted: set[str] = set()
    denied: set[str] = set()
    public = False
    for identifier, rights in zip(tokens[::2], tokens[1::2], strict=False):
        if "r" not in rights:
            continue
        if identifier.startswith("-"):
            denied.add(identifier[1:])
        elif identifier in ("anyone", "authenticated"):
            public = True
        else:
            granted.add(identifier)
    public = public and not ({"anyone", "authenticated"} & denied)
    readers = {f"user:{owner}"}
    for identifier in granted - denied - {owner}:
        principal = f"group:{identifier[1:]}" if identifier.startswith("$") else f"user:{identifier}"
        try:
            readers.add(acl_principal(principal))
        except RuleError:
            continue
    return AclIn(principals=sorted(readers), public=public)


def _validity(mark: int | list[int | str] | None) -> int | None:
    """UIDVALIDITY from a cursor entry: a number (no CONDSTORE, or an older cursor) or a mark."""
    if isinstance(mark, list):
        return int(mark[0])
    return mark


def _ok(answer: tuple[str, Sequence[object]], what: str) -> None:
    if answer[0] != "OK":
        raise ImapError(f"IMAP {what} failed: {answer[1]!r}")


def _tokens(line: bytes) -> list[bytes]:
    return [m.group(0) for m in _TOKEN.finditer(line)]


def _unquote(token: bytes) -> str:
    text = token.decode("utf-8", "replace")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return text


def _quote(folder: str) -> str:
    return '"' + folder.replace("\\", "\\\\").replace('"', '\\"') + '"'
