"""The seam to shard servers on other nodes (``jobs.shard_servers``): one call returns the
dense and lexical candidate lists for a request, searched as its ACL filter allows on views
caught up to the catalog position the request read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from authz.acl import AclFilter
from core.records import Hit
from retrieve.serving import ShardStats


@dataclass(frozen=True, slots=True)
class RemoteLists:
    dense: list[Hit]
    lexical: list[Hit]
    degraded: list[dict[str, str]] = field(default_factory=list)


class RemoteShards(Protocol):
    def lists(
        self,
        *,
        acl: AclFilter,
        position: int,
        vector: np.ndarray | None,
        text: str | None,
        k: int,
        language: str | None = None,
    ) -> RemoteLists: ...

    def shard_stats(self) -> list[ShardStats]:
        """Every server's shards of the version it serves (vectors, hidden), by shard number."""
        ...
