"""Nomad's `filter` query parameter: the go-bexpr language, parsed once, evaluated per datum.

Why a faithful copy: tools send the same expression to a real Nomad and to us, so the same
expressions must parse, give the same answers and fail with the same messages. The facts come
from go-bexpr v0.1.16 (the version Nomad pins) and pointerstructure v1.2.1, as summarised in
`reference/nomad-allocations-api-behaviour.md` section 12; no code was copied.

One module per job, each explaining its part in its docstring: `errors` (the exceptions and
`MAX_NESTING`), `shape` (`DatumShape`: the Go types behind a JSON datum), `strconv` (Go's
unquoting and number parsing), `syntax` (the syntax tree), `parser` (go-bexpr's grammar and
pigeon's error messages), `regex` (Go RE2 syntax run by Python's `re`) and `evaluate` (the
tree compiled into closures). `compile_filter` below ties them together.

Known differences, on purpose: times (`time.Time` is a struct in Go, so `==` fails there) are
compared as the wire strings; a dict reached without a pointer (`DesiredTransition`) answers
`is nil` with false instead of an error; integers report the kind `int` (or `uint64` when the
shape says so) in messages, never `int64`; empty lists never raise conversion errors for `in`;
regular expressions are Go RE2 syntax translated to Python's `re`, with the exceptions listed
in `regex`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocbridge.model.filter.errors import (
    MAX_NESTING,
    FilterError,
    FilterEvaluationError,
    FilterSyntaxError,
)
from allocbridge.model.filter.evaluate import Compiler, Test
from allocbridge.model.filter.parser import Parser
from allocbridge.model.filter.shape import NOMAD_ALLOCATION_SHAPE, DatumShape, shape_index

__all__ = [
    "MAX_NESTING",
    "NOMAD_ALLOCATION_SHAPE",
    "DatumShape",
    "Filter",
    "FilterError",
    "FilterEvaluationError",
    "FilterSyntaxError",
    "compile_filter",
]


class Filter:
    """A compiled expression; `matches` is cheap enough to run on every listed allocation."""

    __slots__ = ("_test", "expression")

    def __init__(self, expression: str, test: Test) -> None:
        self.expression = expression
        self._test = test

    def matches(self, datum: Mapping[str, Any]) -> bool:
        """Whether the datum passes; raises FilterEvaluationError where go-bexpr would fail."""
        return self._test(datum, None)

    def __repr__(self) -> str:
        return f"Filter({self.expression!r})"


def compile_filter(expression: str, *, shape: DatumShape = NOMAD_ALLOCATION_SHAPE) -> Filter:
    """Parse a go-bexpr expression once; raises FilterSyntaxError with go-bexpr's message.

    An empty expression is a syntax error here as in go-bexpr: callers that treat an empty
    `filter` parameter as "no filter" (as Nomad does) must check before compiling.
    """
    tree = Parser(expression).parse()
    return Filter(expression, Compiler(shape_index(shape)).compile(tree, frozenset()))
