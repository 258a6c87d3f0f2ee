"""The pause schedule: override transitions, settling, cron windows; and signal names."""

from __future__ import annotations

import datetime

import pytest

from allocbridge.model import schedule as sched
from allocbridge.model.signals import UnknownSignalError, canonical, number
from allocbridge.model.spec import Schedule

WEEKDAYS = Schedule.model_validate(
    {"cron": {"start": "30 9 * * MON-FRI *", "end": "0 16", "timezone": "America/New_York"}}
)
NY = datetime.timezone(datetime.timedelta(hours=-5))


def at(day: int, hour: int, minute: int = 0) -> datetime.datetime:
    return datetime.datetime(2026, 11, day, hour, minute, tzinfo=NY)  # Nov 2026, EST


@pytest.mark.parametrize(
    ("moment", "inside"),
    [
        (at(20, 10), True),
        (at(20, 9, 29), False),
        (at(20, 15, 59), True),
        (at(20, 16), False),
        (at(21, 12), False),
    ],  # the 21st is a Saturday
)
def test_window(moment: datetime.datetime, inside: bool) -> None:
    assert sched.in_window(WEEKDAYS, moment) is inside


def test_year_field_limits_the_window() -> None:
    other_year = Schedule.model_validate({"cron": {"start": "0 0 * * * 2030", "end": "59 23"}})
    assert not sched.in_window(other_year, at(20, 12))


@pytest.mark.parametrize(
    ("state", "request_", "has_schedule", "after"),
    [
        ("", "pause", True, "force_pause"),
        ("scheduled_pause", "pause", True, "force_pause"),
        ("", "run", True, "force_run"),
        ("", "run", False, ""),
        ("force_run", "scheduled", True, "schedule_resume"),
        ("force_pause", "scheduled", True, "schedule_resume"),
        ("", "scheduled", True, ""),
        ("force_pause", "run", True, "force_run"),
    ],
)
def test_transitions(state: str, request_: str, has_schedule: bool, after: str) -> None:
    assert sched.transition(state, request_, WEEKDAYS if has_schedule else None) == after


@pytest.mark.parametrize("bad", ["", "paused", "PAUSE", "force_pause"])
def test_invalid_requests(bad: str) -> None:
    with pytest.raises(sched.InvalidScheduleStateError, match="Not a valid task schedule state"):
        sched.transition("", bad, WEEKDAYS)


def test_schedule_resume_settles_by_the_schedule() -> None:
    assert sched.settle("schedule_resume", WEEKDAYS, at(20, 10)) == ""
    assert sched.settle("schedule_resume", WEEKDAYS, at(20, 20)) == "scheduled_pause"
    assert sched.settle("force_pause", WEEKDAYS, at(20, 10)) == "force_pause"
    assert sched.settle("", None, at(20, 20)) == ""


def test_next_boundary_is_the_next_start_or_end() -> None:
    assert sched.next_boundary(WEEKDAYS, at(20, 15)) == pytest.approx(3600)
    assert sched.next_boundary(WEEKDAYS, at(20, 9)) == pytest.approx(1800)


@pytest.mark.parametrize(
    ("name", "canon"),
    [("SIGUSR1", "SIGUSR1"), ("usr1", "SIGUSR1"), ("15", "SIGTERM"), ("sighup", "SIGHUP")],
)
def test_signal_names(name: str, canon: str) -> None:
    assert canonical(name) == canon


@pytest.mark.parametrize("bad", ["SIGFOO", "", "999", "SIG"])
def test_unknown_signals(bad: str) -> None:
    with pytest.raises(UnknownSignalError, match="invalid signal"):
        canonical(bad)


def test_signal_numbers_are_linux() -> None:
    assert number("SIGTERM") == 15 and number("SIGKILL") == 9
