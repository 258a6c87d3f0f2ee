"""Query options, parsed once per request into a typed value, with Nomad's error texts.

The order of the checks is Nomad's `parse()` (stale, prefix, namespace, per_page, next_token,
filter, reverse, wait, index), so the first bad parameter reported is the one Nomad reports.
All failures are 400; for a bad boolean Nomad answers 500 with the same text (a deliberate
difference, listed in docs/api.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from multidict import MultiMapping

from allocbridge.api.errors import NomadError
from allocbridge.model.durations import DurationError, parse_go_duration
from allocbridge.model.goformat import go_quote

#: Nomad's `DefaultBlockingRPCQueryTime` and `MaxBlockingRPCQueryTime`, in seconds.
DEFAULT_WAIT: Final = 300.0
MAX_WAIT: Final = 300.0
DEFAULT_NAMESPACE: Final = "default"

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_INT: Final = re.compile(r"[+-]?[0-9]+")
_UINT: Final = re.compile(r"[0-9]+")
_INT32: Final = (-(2**31), 2**31 - 1)
_UINT64_MAX: Final = 2**64 - 1

STALE_ERROR: Final = "Expect `true` or `false` for `stale` query string parameter"
PER_PAGE_ERROR: Final = "Expect a number for `per_page` query string parameter"
WAIT_ERROR: Final = "Invalid wait time"
INDEX_ERROR: Final = "Invalid index"


@dataclass(frozen=True)
class QueryOptions:
    """The common read options. `wait` is already defaulted and capped (seconds)."""

    region: str = ""
    stale: bool = False
    prefix: str = ""
    namespace: str = DEFAULT_NAMESPACE
    per_page: int = 0
    next_token: str = ""
    filter: str = ""
    reverse: bool = False
    wait: float = DEFAULT_WAIT
    index: int = 0

    @property
    def blocking(self) -> bool:
        """Index 0 (or absent) means answer at once."""
        return self.index > 0


@dataclass(frozen=True)
class StubFields:
    """The list's field selection: `task_states` (default true), `resources` (default false)."""

    task_states: bool = True
    resources: bool = False


def go_parse_bool(text: str) -> bool:
    """Go's `strconv.ParseBool`; raises ValueError for anything else."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(text)


#: The options of a request without a query string (most single reads): shared, it is frozen.
NO_OPTIONS: Final = QueryOptions()


def parse_query(query: MultiMapping[str]) -> QueryOptions:
    """Parse the read options, raising a 400 `NomadError` at the first bad one."""
    if not query:
        return NO_OPTIONS
    stale = False
    if "stale" in query:
        value = query.get("stale", "")
        if value:
            try:
                stale = go_parse_bool(value)
            except ValueError:
                raise NomadError(400, STALE_ERROR) from None
        else:
            stale = True
    prefix = query.get("prefix", "")
    namespace = query.get("namespace", "") or DEFAULT_NAMESPACE
    per_page = 0
    if raw := query.get("per_page", ""):
        if not _INT.fullmatch(raw) or not _INT32[0] <= int(raw) <= _INT32[1]:
            raise NomadError(400, PER_PAGE_ERROR)
        per_page = int(raw)
    next_token = query.get("next_token", "")
    filter_ = query.get("filter", "")
    reverse = query.get("reverse", "") == "true"
    wait = DEFAULT_WAIT
    if raw := query.get("wait", ""):
        try:
            seconds = parse_go_duration(raw)
        except DurationError:
            raise NomadError(400, WAIT_ERROR) from None
        wait = DEFAULT_WAIT if seconds <= 0 else min(seconds, MAX_WAIT)
    index = 0
    if raw := query.get("index", ""):
        if not _UINT.fullmatch(raw) or int(raw) > _UINT64_MAX:
            raise NomadError(400, INDEX_ERROR)
        index = int(raw)
    return QueryOptions(
        region=query.get("region", ""),
        stale=stale,
        prefix=prefix,
        namespace=namespace,
        per_page=per_page,
        next_token=next_token,
        filter=filter_,
        reverse=reverse,
        wait=wait,
        index=index,
    )


def parse_bool_option(query: MultiMapping[str], name: str) -> bool | None:
    """Nomad's `parseBool`: None when absent or empty, else Go's ParseBool or a 400."""
    value = query.get(name, "")
    if not value:
        return None
    try:
        return go_parse_bool(value)
    except ValueError:
        raise NomadError(
            400,
            f"Failed to parse value of {go_quote(name)} ({value}) as a bool: "
            f"strconv.ParseBool: parsing {go_quote(value)}: invalid syntax",
        ) from None


def parse_stub_fields(query: MultiMapping[str]) -> StubFields:
    """`resources` then `task_states`, parsed after the common options as Nomad does."""
    resources = parse_bool_option(query, "resources")
    task_states = parse_bool_option(query, "task_states")
    return StubFields(
        task_states=True if task_states is None else task_states,
        resources=bool(resources),
    )


def wants_pretty(query: MultiMapping[str]) -> bool:
    """Present with any value but a single `0` (`?pretty` alone counts)."""
    values = query.getall("pretty", [])
    return bool(values) and values != ["0"]
