"""Schemathesis hooks for tests/unit/test_schemathesis.py, loaded by `st run` through
SCHEMATHESIS_HOOKS.

The document gives `filter` the format `go-bexpr`: a language no pattern describes. This
strategy writes valid expressions over fields every filtered item has (`ID`, `Name`,
`Namespace`: strings on an allocation and on a job stub), so positive cases reach the
evaluator and are expected to pass; the property tests of the filter language
(test_filter_properties.py) cover arbitrary text.
"""

from __future__ import annotations

import schemathesis
from hypothesis import strategies as st

_FIELDS = st.sampled_from(["ID", "Name", "Namespace"])
#: Inside a double-quoted bexpr string: no quote, no backslash (escapes are their own topic).
_LITERAL = st.text(
    alphabet=st.characters(codec="ascii", categories=("L", "N"), include_characters=" -._*"),
    max_size=12,
).map(lambda text: f'"{text}"')


def _comparison(field: str, literal: str, operator: str) -> str:
    if operator in ("in", "not in"):
        return f"{literal} {operator} {field}"
    if operator in ("is empty", "is not empty"):
        return f"{field} {operator}"
    return f"{field} {operator} {literal}"


_MATCH = st.builds(
    _comparison,
    _FIELDS,
    _LITERAL,
    st.sampled_from(["==", "!=", "contains", "not contains", "in", "not in", "is empty"]),
)


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        inner.map(lambda e: f"not ({e})"),
        st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(
            lambda parts: f"({parts[0]}) {parts[1]} ({parts[2]})"
        ),
    )


schemathesis.openapi.format("go-bexpr", st.recursive(_MATCH, _extend, max_leaves=4))
