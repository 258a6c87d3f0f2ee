"""The filter's errors, and how deep an expression may nest."""

from __future__ import annotations

from typing import Final

MAX_NESTING: Final = 100
"""Parenthesised groups and collection bodies may nest this deep (keeps Python's stack safe)."""


class FilterError(ValueError):
    """Base of both filter errors, so callers can catch either with one clause."""


class FilterSyntaxError(FilterError):
    """The expression does not parse; the message is go-bexpr's, e.g. `1:9 (8): ...`.

    `line`, `column` (both from 1) and `offset` (UTF-8 bytes from 0) locate the first error.
    """

    def __init__(self, message: str, line: int, column: int, offset: int) -> None:
        super().__init__(message)
        self.line = line
        self.column = column
        self.offset = offset


class FilterEvaluationError(FilterError):
    """The expression is valid but go-bexpr would fail on this datum; the message is its text."""
