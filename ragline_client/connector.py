"""The connector kit: incremental sync of a source into ragline, its state kept in the
ragline catalog so a restart resumes and a run over an unchanged source sends nothing.

A connector says what its source holds (``list_items``: ids, content fingerprints, ACLs)
and how to read one item (``load``); ``Syncer`` does the rest: compares with the recorded
state, pushes what is new or changed, updates ACLs that alone changed, deletes what vanished,
syncs group memberships, and records every step the server acknowledged.

Every call goes under the connector's name, and the server holds a connector to its own
documents: a push over an id another connector wrote is rejected for that document
(``owned_by_other_connector``), and deletes and ACL changes touch only its own documents,
so two connectors whose sources share an id never delete or overwrite each other's.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragline_client.client import Client
from ragline_client.errors import RaglineError
from ragline_client.failures import Remembered, remembered_value
from ragline_client.models import (
    MAX_METADATA_KEYS,
    AclIn,
    ConnectorStateOut,
    ConnectorStateUpdate,
    DocumentIn,
    JobOut,
)
from ragline_client.sync_report import SyncReport


@dataclass(frozen=True, slots=True)
class Item:
    """One document of the source: ``fingerprint`` changes whenever its content does (a
    content hash, or a revision id the source keeps)."""

    external_id: str
    fingerprint: str
    acl: AclIn = field(default_factory=AclIn)


@dataclass(frozen=True, slots=True)
class FileDocument:
    """A document to send as a streamed upload instead of inline JSON (a large file)."""

    path: Path
    external_id: str
    mime_type: str
    acl: AclIn
    title: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Linked:
    """A document and the documents it carries (an e-mail and its attachments), returned by
    ``load``. The kit pushes the linked documents beside it under the parent's ACL and with
    the parent's metadata under their own (``inherited``), keeps them while the parent is
    unchanged, gives them the parent's ACL changes, deletes the ones a new version of the
    parent no longer carries, and deletes them all with the parent. A connector lists only
    parents; each linked document's id must be its own (say, the parent's id plus
    ``#attachment=N``) and its metadata should name the parent."""

    document: DocumentIn
    linked: Sequence[DocumentIn] = ()


def inherited(parent: DocumentIn, linked: DocumentIn, acl: AclIn) -> DocumentIn:
    """A linked document as the kit pushes it: under the parent's ACL, whatever the connector
    gave, and with the parent's metadata under its own, so a filter on what the parent says
    (its folder, sender, date) finds what it carries too. Past the key limit the parent's
    last keys are left out, never the linked document's own."""
    room = max(0, MAX_METADATA_KEYS - len(linked.metadata))
    parents = [(k, v) for k, v in parent.metadata.items() if k not in linked.metadata][:room]
    return linked.model_copy(update={"acl": acl, "metadata": {**dict(parents), **linked.metadata}})


@dataclass(frozen=True, slots=True)
class Listing:
    """What ``list_items`` found. ``complete``: ``items`` is the whole source, so a recorded
    item missing from it was deleted; a change feed (``complete=False``) names its deletions
    in ``deleted`` instead. ``cursor`` is saved once the run has applied the listing.
    ``failed``: ids (or source locations) that could not be read this run, with why; each
    counts as failed, and none of them is deleted for being missing from ``items``."""

    items: Sequence[Item]
    cursor: str | None = None
    complete: bool = True
    deleted: Sequence[str] = ()
    failed: Mapping[str, str] = field(default_factory=dict)
    # Id prefixes the source vouches for without listing them (an IMAP folder whose CONDSTORE
    # state and ACL match the cursor's): the recorded documents under them stay as they are.
    unchanged: Sequence[str] = ()
    # The cursor vouches for items next run (as ``unchanged`` does): it is saved only by a run
    # that failed no item, so a failed one is listed, and tried, again.
    cursor_vouches: bool = False


class Connector(ABC):
    """Subclass with a ``name`` (unique per tenant), ``list_items`` and ``load``. The name
    is also the owner the server records on every document the connector pushes."""

    name: str

    @abstractmethod
    def list_items(self, cursor: str | None) -> Listing:
        """The source's items (all of them, or those changed since ``cursor``)."""

    @abstractmethod
    def load(self, item: Item) -> DocumentIn | FileDocument | Linked:
        """The document to send for ``item`` (with what it carries: :class:`Linked`); raise
        to count it as failed this run."""

    def groups(self) -> Mapping[str, Sequence[str]] | None:
        """Group memberships to sync (principal -> groups), or ``None`` to leave them alone."""
        return None


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _recorded(item: Item) -> str:
    # Content and ACL apart, so an ACL change alone costs one PUT, not a re-ingest.
    return f"{item.fingerprint}|acl:{_digest([sorted(item.acl.principals), item.acl.public])}"


_LINKED = "linked:"


def _child(parent: Item, external_id: str) -> Item:
    """A linked document's item: recorded as its parent's (by a digest of the parent's id),
    with the parent's ACL."""
    fingerprint = f"{_LINKED}{_digest(parent.external_id)}"
    return Item(external_id=external_id, fingerprint=fingerprint, acl=parent.acl)


def _children(recorded: Mapping[str, str]) -> dict[str, list[str]]:
    """The recorded linked documents by their parent's digest."""
    out: dict[str, list[str]] = {}
    for external_id, value in recorded.items():
        if value.startswith(_LINKED):
            out.setdefault(value.split("|acl:")[0].removeprefix(_LINKED), []).append(external_id)
    return out


@dataclass(frozen=True, slots=True)
class SyncPlan:
    """What a run will do, worked out from the listing and the recorded state."""

    push: list[Item]
    acl: list[Item]
    delete: list[str]
    unchanged: int
    groups: dict[str, list[str]]
    remove_groups: list[str]
    cursor: str | None
    failed: Mapping[str, str] = field(default_factory=dict)
    # Parents to push again -> the linked documents they carried: those the new version no
    # longer carries are deleted once it is in.
    carried: Mapping[str, Sequence[str]] = field(default_factory=dict)
    cursor_vouches: bool = False
    # Listed items whose content failed for good before (``ragline_client.failures``):
    # those not sent again (unchanged since, no ``retry_failed``) are in ``still_failing``.
    remembered: Mapping[str, Remembered] = field(default_factory=dict)

    @property
    def still_failing(self) -> dict[str, Remembered]:
        sent = {item.external_id for item in self.push}
        return {ext: r for ext, r in self.remembered.items() if ext not in sent}

    @property
    def total(self) -> int:
        return len(self.push) + len(self.acl) + len(self.delete)


Progress = Callable[[int, int], None]
# Said once, on the run that found an item's content failing for good.
NOT_RETRIED = "not sent again until it changes"
# The server's answer to a delete or ACL change of a document another writer holds.
NOT_OWNER = "not_owned_by_connector"


class Syncer:
    """Runs a connector against a server: ``Syncer(client, connector).run()``.

    With ``wait=True`` (the default) each batch's job is awaited and only documents the job
    ingested are recorded. One the job failed for a reason of its content (an encrypted
    workbook, a corrupt PDF: ``ragline_client.failures``) is remembered with its fingerprint
    and not sent again while it is unchanged (``report.still_failing``); any other failure
    (a timeout, a load that raised) is retried next run. ``retry_failed=True`` sends the
    remembered ones again.
    """

    def __init__(
        self,
        client: Client,
        connector: Connector,
        *,
        wait: bool = True,
        job_timeout: float = 600.0,
        retry_failed: bool = False,
    ):
        self.client = client
        self.connector = connector
        self.wait = wait
        self.job_timeout = job_timeout
        self.retry_failed = retry_failed

    def _listing(self, state: ConnectorStateOut) -> Listing:
        listing = self.connector.list_items(state.cursor)
        if self.retry_failed and listing.unchanged:
            hidden = [
                ext
                for ext, value in state.documents.items()
                if ext.startswith(tuple(listing.unchanged)) and Remembered.decode(value) is not None
            ]
            if hidden:  # vouched for, so not listed: list everything to try them again
                return self.connector.list_items(None)
        return listing

    def plan(self) -> SyncPlan:
        state = self.client.connector_state(self.connector.name)
        listing = self._listing(state)
        children = _children(state.documents)
        push, acl, unchanged = [], [], 0
        carried: dict[str, list[str]] = {}
        remembered: dict[str, Remembered] = {}
        listed = set()
        for item in listing.items:
            kids = children.get(_digest(item.external_id), [])
            listed.add(item.external_id)
            listed.update(kids)  # a listed parent keeps its linked documents
            before = state.documents.get(item.external_id)
            failure = Remembered.decode(before)
            if failure is not None:
                remembered[item.external_id] = failure
                if failure.recorded == _recorded(item) and not self.retry_failed:
                    continue  # still failing: the same content (and readers) as when it failed
            if failure is not None or before is None or before.split("|acl:")[0] != item.fingerprint:
                push.append(item)
                if kids:
                    carried[item.external_id] = kids
            elif before != _recorded(item):
                acl.append(item)
                acl += [_child(item, kid) for kid in kids]  # they read as their parent does
            else:
                unchanged += 1
        if listing.unchanged:
            vouched = [ext for ext in state.documents if ext.startswith(tuple(listing.unchanged))]
            listed.update(vouched)
            for ext in vouched:
                failure = Remembered.decode(state.documents[ext])
                if failure is not None:
                    remembered[ext] = failure
                elif not state.documents[ext].startswith(_LINKED):
                    unchanged += 1
        kept = set(listing.failed) | {k for f in listing.failed for k in children.get(_digest(f), [])}
        if listing.complete:
            delete = sorted(set(state.documents) - listed - kept)
        else:
            gone = set(listing.deleted) | {k for d in listing.deleted for k in children.get(_digest(d), [])}
            delete = sorted(gone & set(state.documents))
        desired = self.connector.groups()
        groups: dict[str, list[str]] = {}
        remove_groups: list[str] = []
        if desired is not None:
            wanted = {p: sorted(set(g)) for p, g in desired.items()}
            groups = {p: g for p, g in wanted.items() if state.groups.get(p) != _digest(g)}
            remove_groups = sorted(set(state.groups) - set(wanted))
        return SyncPlan(
            push,
            acl,
            delete,
            unchanged,
            groups,
            remove_groups,
            listing.cursor,
            dict(listing.failed),
            carried,
            listing.cursor_vouches,
            remembered,
        )

    def run(self, progress: Progress | None = None) -> SyncReport:
        return self.apply(self.plan(), progress)

    def apply(self, plan: SyncPlan, progress: Progress | None = None) -> SyncReport:
        """Carry out ``plan``, recording each acknowledged step; ``progress(items, chunks)``."""
        report = SyncReport(unchanged=plan.unchanged, still_failing=plan.still_failing)
        for source_id, message in plan.failed.items():
            self._fail(report, source_id, message)
        tick: Progress = progress or (lambda _items, _chunks: None)
        batch_size = self.client.me().limits.max_batch_documents
        for start in range(0, len(plan.push), batch_size):
            self._push_batch(plan.push[start : start + batch_size], report, tick, plan)
        for item in plan.acl:
            self._set_acl(item, report)
            tick(1, 0)
        for external_id in plan.delete:
            self._delete(external_id, report)
            tick(1, 0)
        self._sync_groups(plan, report)
        if plan.cursor is not None and not (plan.cursor_vouches and report.failed):
            self._save(ConnectorStateUpdate(cursor=plan.cursor))
        return report

    def _save(self, update: ConnectorStateUpdate) -> None:
        self.client.save_connector_state(self.connector.name, update)

    def _push_batch(self, batch: list[Item], report: SyncReport, tick: Progress, plan: SyncPlan) -> None:
        inline: list[tuple[Item, DocumentIn]] = []
        sent: dict[str, Item] = {}
        job_ids: list[str] = []
        linked: dict[str, list[str]] = {}  # parent -> the linked documents this load carries
        for item in batch:
            try:
                doc = self.connector.load(item)
                if isinstance(doc, FileDocument):
                    answer = self.client.upload(
                        doc.path,
                        external_id=doc.external_id,
                        mime_type=doc.mime_type,
                        title=doc.title,
                        metadata=doc.metadata,
                        acl=doc.acl,
                        connector=self.connector.name,
                    )
                    job_ids += [answer.job_id] if answer.job_id else []
                    for w in answer.warnings:
                        report.warn(w.external_id, [f"{w.code}: {w.message}"])
                    sent[item.external_id] = item
                elif isinstance(doc, Linked):
                    inline.append((item, doc.document))
                    linked[item.external_id] = [d.external_id for d in doc.linked]
                    for d in doc.linked:
                        inline.append((_child(item, d.external_id), inherited(doc.document, d, item.acl)))
                else:
                    inline.append((item, doc))
            except Exception as exc:  # load's contract: whatever it raises fails this item alone
                self._fail(report, item.external_id, f"{type(exc).__name__}: {exc}")
                tick(1, 0)
        if inline:
            result = self.client.push([doc for _, doc in inline], connector=self.connector.name)
            rejected = {r.index: r for r in result.rejections}
            for index, (item, _) in enumerate(inline):
                if index in rejected:
                    self._fail(report, item.external_id, f"{rejected[index].code}: {rejected[index].message}")
                    tick(1, 0)
                else:
                    sent[item.external_id] = item
            for w in result.warnings:
                report.warn(w.external_id, [f"{w.code}: {w.message}"])
            job_ids += result.job_ids
        report.job_ids += job_ids
        failed = self._await(job_ids, report, tick) if self.wait else {}
        done = {ext: _recorded(item) for ext, item in sent.items() if ext not in failed}
        if done:
            self._save(ConnectorStateUpdate(set_documents=done))
        self._remember(sent, failed, plan, report)
        report.pushed += len(done)
        if not self.wait:
            tick(len(done), 0)
        for parent in batch:  # what a new version no longer carries goes, once it is in
            if parent.external_id in done:
                carried = set(plan.carried.get(parent.external_id, ()))
                for kid in sorted(carried - set(linked.get(parent.external_id, ()))):
                    self._delete(kid, report)

    def _remember(
        self, sent: Mapping[str, Item], failed: Mapping[str, str | None], plan: SyncPlan, report: SyncReport
    ) -> None:
        """Record the sent items the job failed for a reason of their content, so an unchanged
        one is not sent again; ``since`` stays the first failure's while the content does."""
        remember: dict[str, str] = {}
        for ext, code in failed.items():
            item = sent.get(ext)
            if item is None or item.fingerprint.startswith(_LINKED):  # those follow their parent
                continue
            value = remembered_value(_recorded(item), code, plan.remembered.get(ext))
            if value is not None:
                remember[ext] = value
                report.errors[ext] += f" ({NOT_RETRIED})"
        if remember:
            self._save(ConnectorStateUpdate(set_documents=remember))

    def _await(self, job_ids: list[str], report: SyncReport, tick: Progress) -> dict[str, str | None]:
        """Wait for the jobs; returns the external ids they failed, with the reason codes."""
        failed: dict[str, str | None] = {}
        for job_id in dict.fromkeys(job_ids):  # pushes the server coalesced share one job
            seen = {"docs": 0, "chunks": 0}

            def on_progress(job: JobOut, seen: dict[str, int] = seen) -> None:
                # ``done`` counts every finished item, unchanged and failed ones included:
                # each document ticks once, so the count never passes the plan's total.
                docs = job.documents.done
                tick(docs - seen["docs"], job.chunks - seen["chunks"])
                seen["docs"], seen["chunks"] = docs, job.chunks

            job = self.client.wait(job_id, timeout=self.job_timeout, on_progress=on_progress)
            if job.state == "cancelled":
                raise RaglineError("cancelled", f"job {job_id} was cancelled; run the sync again")
            if job.state == "failed" and not job.errors:
                # The job failed as a whole: record none of the batch; the next run resends it.
                raise RaglineError("job_failed", f"job {job_id} failed; run the sync again")
            for error in job.errors:
                failed[error.external_id] = error.code
                self._fail(report, error.external_id, f"{error.code}: {error.message}")
            for warned in job.warnings:
                report.warn(warned.external_id, warned.warnings)
        return failed

    def _set_acl(self, item: Item, report: SyncReport) -> None:
        try:
            self.client.set_acl(
                item.external_id, item.acl.principals, public=item.acl.public, connector=self.connector.name
            )
        except RaglineError as exc:
            if exc.code == NOT_OWNER:
                # Not this connector's document (any more): forget it, so the next run pushes
                # it, which claims it if unowned or names the connector that owns it.
                self._save(ConnectorStateUpdate(remove_documents=[item.external_id]))
            self._fail(report, item.external_id, str(exc))
            return
        self._save(ConnectorStateUpdate(set_documents={item.external_id: _recorded(item)}))
        report.acl_updated += 1

    def _delete(self, external_id: str, report: SyncReport) -> None:
        try:
            self.client.delete(external_id, connector=self.connector.name)
        except RaglineError as exc:
            if exc.code == NOT_OWNER:
                # Another writer holds the id now: not this connector's to delete; forget it.
                self._save(ConnectorStateUpdate(remove_documents=[external_id]))
                return
            # Gone already (deleted by hand, or acknowledged before a crash): the goal holds.
            if exc.code != "not_found":
                self._fail(report, external_id, str(exc))
                return
        self._save(ConnectorStateUpdate(remove_documents=[external_id]))
        report.deleted += 1

    def _sync_groups(self, plan: SyncPlan, report: SyncReport) -> None:
        for principal, groups in plan.groups.items():
            self.client.set_groups(principal, groups)
            self._save(ConnectorStateUpdate(set_groups={principal: _digest(groups)}))
            report.groups_synced += 1
        for principal in plan.remove_groups:
            self.client.set_groups(principal, [])
            self._save(ConnectorStateUpdate(remove_groups=[principal]))
            report.groups_synced += 1

    @staticmethod
    def _fail(report: SyncReport, external_id: str, message: str) -> None:
        report.failed += 1
        report.errors[external_id] = message


def sync(client: Client, connector: Connector, *, progress: Progress | None = None) -> SyncReport:
    """One incremental run of ``connector``: ``Syncer(client, connector).run(progress)``."""
    return Syncer(client, connector).run(progress)
