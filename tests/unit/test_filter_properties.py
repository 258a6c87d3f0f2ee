"""Property tests of the filter language: any text parses or is a filter error, never a crash.

A `filter` query parameter is user text that reaches the parser and then the evaluator over
every listed allocation. Whatever arrives, the API must answer 200 or Nomad's 400, so the only
exceptions allowed out are FilterSyntaxError (parsing) and FilterEvaluationError (evaluating).
Two generators: arbitrary text, and text assembled from the language's own tokens, which gets
past the first character far more often and so reaches the deeper rules.
"""

from __future__ import annotations

from typing import Any

from allocations_fixture import SAMPLE, stored
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocbridge.model.filter import FilterEvaluationError, FilterSyntaxError, compile_filter

DATA: list[Any] = [stored(ident, **options).filter_datum for ident, options in SAMPLE[:3]]

_TOKENS = [
    "==", "!=", "in", "not", "is", "empty", "nil", "contains", "matches", "and", "or", "(",
    ")", "[", "]", ".", '"', "`", "\\", "any", "all", "as", "for", ",", "0", "1.5", "-3",
    "0x1F", "true", "ClientStatus", "TaskStates", "server", "State", "Job", "TaskGroups",
    "Tasks", "Name", "Meta", "owner", "CreateIndex", "DesiredTransition", "Migrate", "ID",
    '"running"', '"a.*"', "`[`", '"\\x"', "/", "*", " ", "\t", "\n",
]  # fmt: skip
TOKEN_SOUP = st.lists(st.sampled_from(_TOKENS), max_size=14).map(" ".join)
ANY_TEXT = st.text(max_size=60)


def _check(expression: str) -> None:
    try:
        compiled = compile_filter(expression)
    except FilterSyntaxError as exc:
        assert str(exc), expression  # the 400's text says what is wrong
        return
    for datum in DATA:
        try:
            result = compiled.matches(datum)
        except FilterEvaluationError as exc:
            assert str(exc), expression
        else:
            assert isinstance(result, bool), expression


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ANY_TEXT)
def test_any_text_parses_or_is_a_filter_error(expression: str) -> None:
    _check(expression)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TOKEN_SOUP)
def test_any_token_soup_parses_or_is_a_filter_error(expression: str) -> None:
    _check(expression)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=400), st.sampled_from(["(", "not ", "!"]))
def test_deep_nesting_is_a_filter_error_not_a_recursion_error(depth: int, opener: str) -> None:
    closer = ")" if opener == "(" else ""
    _check(opener * depth + 'ClientStatus == "running"' + closer * depth)
