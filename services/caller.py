"""Who asks for an operation, and the collaborators an operation may be handed."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Caller:
    """The actor an operation records (a principal id, or a local operator's name) and the
    path it came through (``api``, ``console``, ``cli``, ``connector``, ``scheduler``): the
    audit entry's ``actor`` and ``details.via``."""

    actor: str
    via: str


class JobSubmitter(Protocol):
    """What runs queued jobs (``jobs.runner.IngestRunner``): told of a new job, it runs it."""

    def submit(self, job_id: uuid.UUID) -> None: ...
