"""The pause schedule of a task: Nomad Enterprise's override state machine and cron windows.

States (`ScheduleState` on the wire): `""` runs, `force_run` and `force_pause` are overrides,
`scheduled_pause` is paused by the schedule, and `schedule_resume` is the passing state of
removing an override, which settles at once to `""` or `scheduled_pause` depending on the
schedule. Overrides win until removed.

A task without a schedule rests at `""`, as the spec says, but may still be forced to pause (a
manual pause is useful without a cron window, and refusing it would leave no way to pause such
a task); `run` has nothing to override there and leaves it at `""`.
"""

from __future__ import annotations

import datetime
from typing import Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from allocbridge.model.spec import Schedule

RUN: Final = ""
FORCE_RUN: Final = "force_run"
FORCE_PAUSE: Final = "force_pause"
SCHEDULED_PAUSE: Final = "scheduled_pause"
SCHEDULE_RESUME: Final = "schedule_resume"
STATES: Final = (RUN, FORCE_RUN, FORCE_PAUSE, SCHEDULED_PAUSE, SCHEDULE_RESUME)
REQUESTS: Final = {"pause": FORCE_PAUSE, "run": FORCE_RUN, "scheduled": SCHEDULE_RESUME}
INVALID_STATE: Final = "Not a valid task schedule state"

Request = Literal["pause", "run", "scheduled"]


class InvalidScheduleStateError(ValueError):
    def __init__(self) -> None:
        super().__init__(INVALID_STATE)


def in_window(schedule: Schedule, now: datetime.datetime) -> bool:
    """Whether `now` falls between the latest cron start and that day's end (`"min hour"`)."""
    zone = _zone(schedule.cron.timezone)
    local = now.astimezone(zone)
    start: datetime.datetime = croniter(_five(schedule), local).get_prev(datetime.datetime)
    if not _year_matches(schedule, start.year):
        return False
    minute, hour = (int(part) for part in schedule.cron.end.split()[:2])
    end = start.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if end <= start:
        end += datetime.timedelta(days=1)
    return start <= local < end


def next_boundary(schedule: Schedule, now: datetime.datetime) -> float:
    """Seconds until the schedule may change its mind (the next start or end)."""
    zone = _zone(schedule.cron.timezone)
    local = now.astimezone(zone)
    next_start: datetime.datetime = croniter(_five(schedule), local).get_next(datetime.datetime)
    minute, hour = (int(part) for part in schedule.cron.end.split()[:2])
    end_today = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if end_today <= local:
        end_today += datetime.timedelta(days=1)
    return max(1.0, min((next_start - local).total_seconds(), (end_today - local).total_seconds()))


def settle(state: str, schedule: Schedule | None, now: datetime.datetime) -> str:
    """Where a state rests: `schedule_resume` and `""`/`scheduled_pause` follow the schedule."""
    if state in (FORCE_RUN, FORCE_PAUSE):
        return state
    if schedule is None:
        return RUN
    return RUN if in_window(schedule, now) else SCHEDULED_PAUSE


def transition(state: str, request: str, schedule: Schedule | None) -> str:
    """The state after an override request (before settling); raises on an unknown request."""
    if request not in REQUESTS:
        raise InvalidScheduleStateError()
    target = REQUESTS[request]
    if target == FORCE_RUN and schedule is None:
        return RUN  # a task without a schedule always runs; nothing to override
    if target == SCHEDULE_RESUME and state not in (FORCE_RUN, FORCE_PAUSE):
        return state  # no override to remove
    return target


def paused(state: str) -> bool:
    return state in (FORCE_PAUSE, SCHEDULED_PAUSE)


def _five(schedule: Schedule) -> str:
    """Nomad's start has a sixth field, the year; croniter would read it as seconds."""
    return " ".join(schedule.cron.start.split()[:5])


def _year_matches(schedule: Schedule, year: int) -> bool:
    fields = schedule.cron.start.split()
    if len(fields) < 6 or fields[5] == "*":
        return True
    years: set[int] = set()
    for part in fields[5].split(","):
        low, _, high = part.partition("-")
        if low.isdigit():
            years.update(range(int(low), int(high or low) + 1))
    return not years or year in years


def _zone(name: str | None) -> datetime.tzinfo:
    if not name:
        return datetime.UTC
    try:
        return ZoneInfo(name)
    except ZoneInfoNotFoundError:
        return datetime.UTC
