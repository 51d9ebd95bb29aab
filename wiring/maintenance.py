"""The servers' maintenance loop and the stored schedules it runs."""

from __future__ import annotations

from core.settings import Settings
from services.maintenance import MaintenanceScheduler, scheduled_rebuild
from services.schedules import ScheduleRunner
from wiring.index import LIVE_ALIAS, maintenance_policy, rebuild_config
from wiring.reembed import scheduled_reembed


def maintenance_scheduler(settings: Settings, url: str) -> MaintenanceScheduler | None:
    """The rebuild/swap/GC loop every server runs; None when ``index.maintenance_seconds`` is 0."""
    if settings.index.maintenance_seconds <= 0:
        return None
    return MaintenanceScheduler(
        url, rebuild_config(settings), maintenance_policy(settings), schedule_runners(settings, url)
    )


def schedule_runners(settings: Settings, url: str) -> dict[str, ScheduleRunner]:
    """What each stored schedule's job kind runs (servers' maintenance loop, ``jobs run-due``)."""
    return {
        "rebuild": scheduled_rebuild(url, rebuild_config(settings), alias=LIVE_ALIAS),
        "reembed": scheduled_reembed(settings, url),
    }
