"""Signal names as the signal endpoint reads them: ASCII names and numbers, anything else 400."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from allocbridge.api.openapi import DOCUMENT
from allocbridge.model.signals import UnknownSignalError, canonical

SIGNAL_PATTERN = DOCUMENT["paths"]["/v1/client/allocation/{alloc_id}/signal"]["post"][
    "requestBody"
]["content"]["application/json"]["schema"]["properties"]["Signal"]["pattern"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("SIGUSR1", "SIGUSR1"), ("usr1", "SIGUSR1"), (" hup\n", "SIGHUP"), ("010", "SIGUSR1")],
)
def test_names_and_numbers(name: str, expected: str) -> None:
    assert canonical(name) == expected


@pytest.mark.parametrize("name", ["²", "١٠", "ſigusr1", "SIGſTOP", "sig", "99", ""])  # noqa: RUF001
def test_non_ascii_look_alikes_are_unknown_signals_not_crashes(name: str) -> None:
    """`²`.isdigit() is true but int('²') fails: this was a ValueError, so a 500."""
    with pytest.raises(UnknownSignalError):
        canonical(name)


@given(st.text(max_size=12))
def test_any_text_is_a_signal_or_an_unknown_signal(name: str) -> None:
    """And the OpenAPI document's pattern says which: the two never disagree."""
    try:
        canonical(name)
    except UnknownSignalError:
        assert not re.search(SIGNAL_PATTERN, name)
    else:
        assert re.search(SIGNAL_PATTERN, name)
