"""The bench's scale knobs: the issue's defaults, and a count below one refused by name."""

from __future__ import annotations

import pytest
from benchmarks.runner import SECTIONS, parse_args


def test_defaults_are_the_issues_scale() -> None:
    options = parse_args([])
    assert (options.allocations, options.blocking, options.exec_mb, options.reconcile) == (
        10_000,
        1_000,
        200,
        500,
    )
    assert options.reconcile_rounds == 3
    assert options.sections == frozenset(SECTIONS)


@pytest.mark.parametrize("flag", ["--reconcile-rounds", "--exec-runs", "--walks", "--reconcile"])
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
