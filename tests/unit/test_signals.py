"""Signal names as the signal endpoint reads them: ASCII names and numbers, anything else 400."""

from __future__ import annotations

import pytest

from allocbridge.model.signals import UnknownSignalError, canonical


@pytest.mark.parametrize(
    ("name", "expected"),
    [("SIGUSR1", "SIGUSR1"), ("usr1", "SIGUSR1"), (" hup\n", "SIGHUP"), ("010", "SIGUSR1")],
)
def test_names_and_numbers(name: str, expected: str) -> None:
    assert canonical(name) == expected


@pytest.mark.parametrize("name", ["²", "١٠", "ſigusr1", "SIGſTOP", "sig", "99", ""])
def test_non_ascii_look_alikes_are_unknown_signals_not_crashes(name: str) -> None:
    """`²`.isdigit() is true but int('²') fails: this was a ValueError, so a 500."""
    with pytest.raises(UnknownSignalError):
        canonical(name)
