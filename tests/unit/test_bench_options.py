"""The bench runner: its scale knobs (the issue's defaults, a count below one refused by name),
and what it shows when a run fails."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from benchmarks.runner import DEFAULT_SECTIONS, _show_operator_logs, parse_args


def test_defaults_are_the_issues_scale() -> None:
    options = parse_args([])
    assert (options.allocations, options.blocking, options.exec_mb, options.reconcile) == (
        10_000,
        1_000,
        200,
        500,
    )
    assert options.reconcile_rounds == 3
    assert (options.keystrokes, options.shell_sessions) == (3000, 10)
    assert "interactive" in options.sections
    assert options.sections == frozenset(DEFAULT_SECTIONS)
    assert "writes" not in options.sections  # a diagnostic, run on request only
    assert "reads" in options.sections
    assert "scale" not in options.sections  # minutes of creating allocations: on request
    assert options.scale_allocations == 50_000
    assert "logs" in options.sections
    assert (options.logs_mb, options.logs_runs) == (8.0, 3)


def test_a_log_kubelet_would_rotate_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--logs-mb", "12"])
    assert "--logs-mb must be above 0 and at most 9.5" in capsys.readouterr().err


def test_the_scale_section_runs_on_request() -> None:
    options = parse_args(["--only", "footprint,scale", "--scale-allocations", "20000"])
    assert options.sections == frozenset({"footprint", "scale"})
    assert options.scale_allocations == 20_000


def test_the_single_reads_go_client_runs_on_one_thread_unless_told(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert parse_args([]).load_gomaxprocs == 1
    assert parse_args(["--load-gomaxprocs", "0"]).load_gomaxprocs == 0  # Go's default
    with pytest.raises(SystemExit):
        parse_args(["--load-gomaxprocs", "-1"])
    assert "--load-gomaxprocs must be at least 0" in capsys.readouterr().err


def test_the_writes_diagnostic_runs_on_request() -> None:
    options = parse_args(["--only", "reconcile,writes", "--writes", "200"])
    assert options.sections == frozenset({"reconcile", "writes"})
    assert (options.writes, options.write_rounds) == (200, 4)


@pytest.mark.parametrize(
    "flag",
    [
        "--reconcile-rounds",
        "--exec-runs",
        "--walks",
        "--reconcile",
        "--writes",
        "--write-rounds",
        "--keystrokes",
        "--shell-sessions",
        "--scale-allocations",
        "--logs-runs",
    ],
)
def test_a_count_below_one_is_refused_by_name(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args([flag, "0"])
    assert f"{flag} must be at least 1" in capsys.readouterr().err


def test_an_unknown_section_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--only", "reconcile,speed"])
    assert "unknown sections ['speed']" in capsys.readouterr().err


def test_a_failed_run_shows_the_end_of_each_operators_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state folder is a tmp dir that goes with the run, so the log must be shown first."""
    log_file = tmp_path / "reconciler.log"
    log_file.write_text("".join(f"line {n}\n" for n in range(100)))
    missing = SimpleNamespace(name="standby", log_path=tmp_path / "never-started.log")
    bench: Any = SimpleNamespace(
        operators=[SimpleNamespace(name="reconciler", log_path=log_file), missing]
    )

    _show_operator_logs(bench, lines=3)

    shown = capsys.readouterr().err
    assert "last 3 lines of operator reconciler's log:\nline 97\nline 98\nline 99" in shown
    assert "standby" not in shown
