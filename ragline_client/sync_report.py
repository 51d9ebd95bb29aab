"""What one connector sync did (``Syncer.apply``'s answer): counts, each failure with its
reason, the server's warnings per document, and the items still failing from earlier runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ragline_client.failures import Remembered


@dataclass(slots=True)
class SyncReport:
    pushed: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: int = 0
    acl_updated: int = 0
    groups_synced: int = 0
    job_ids: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    # Documents the server warned about, joined by "; ": at push (``no_readers``, an ACL
    # naming nobody) and in the job (``decoded_as: cp1252``, OCR'd pages, skipped attachments).
    warnings: dict[str, str] = field(default_factory=dict)
    # Items that failed for good in an earlier run and were not sent again (unchanged since):
    # not counted in ``failed``, which counts this run's failures only.
    still_failing: dict[str, Remembered] = field(default_factory=dict)

    def summary(self) -> dict[str, int]:
        return {
            "pushed": self.pushed,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "acl_updated": self.acl_updated,
            "groups_synced": self.groups_synced,
            "failed": self.failed,
            "still_failing": len(self.still_failing),
        }

    def warn(self, external_id: str, warnings: Sequence[str]) -> None:
        known = [w for w in self.warnings.get(external_id, "").split("; ") if w]
        self.warnings[external_id] = "; ".join(known + [w for w in warnings if w not in known])
