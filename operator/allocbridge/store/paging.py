"""Nomad's paginator, as pure functions: page tokens, token comparison, and the page walk.

Tokens name the first item of the *next* page, so resuming includes the item equal to the
token. Without a prefix the token is `<CreateIndex>.<ID>`; with a prefix it is the `<ID>`.

Comparing an item with a `<CreateIndex>.<ID>` token follows Nomad's tokenizer: split at the
first `.`; if the left part is a Go `Atoi` integer, compare the index numerically and then the
IDs as strings; otherwise compare the whole `"<idx>.<id>"` text with the token as strings. An
unknown or garbage token is never an error, it only moves the starting point.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice
from typing import Final, Generic, TypeVar

T = TypeVar("T")

_ATOI: Final = re.compile(r"[+-]?[0-9]+")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of results; `next_token` is empty on the last page."""

    items: list[T]
    next_token: str = ""


def create_index_token(create_index: int, alloc_id: str) -> str:
    return f"{create_index}.{alloc_id}"


def parse_create_index_token(token: str) -> tuple[int, str] | None:
    """`(CreateIndex, ID)` if the token compares numerically, else None (string comparison)."""
    index_text, dot, alloc_id = token.partition(".")
    if not dot or not _ATOI.fullmatch(index_text):
        return None
    index = int(index_text)
    if not _INT64_MIN <= index <= _INT64_MAX:
        return None  # Go's Atoi fails on overflow, and the tokenizer falls back to strings
    return index, alloc_id


def paginate(
    items: Iterable[T],
    *,
    per_page: int,
    token_of: Callable[[T], str],
    before_token: Callable[[T], bool] | None = None,
    accept: Callable[[T], bool] | None = None,
) -> Page[T]:
    """Walk `items` in order and cut one page, as Nomad's paginator does.

    - Until the first item is emitted, skip items for which `before_token` is true.
    - Skip items `accept` rejects (the filter and the namespace ACL); its errors propagate.
    - `per_page` 0 means no limit. The first accepted item past the limit is not returned;
      its token becomes `next_token`. A negative `per_page` therefore yields an empty page
      whose token names the first match (Nomad's quirk, kept).
    """
    if before_token is None and accept is None:
        if per_page == 0:
            return Page(list(items))
        if per_page > 0:  # no per-item test: cut the page in C
            head = list(islice(items, per_page + 1))
            if len(head) > per_page:
                return Page(head[:per_page], token_of(head[per_page]))
            return Page(head)
    out: list[T] = []
    seeking = before_token is not None
    for item in items:
        if seeking and before_token is not None and before_token(item):
            continue
        if accept is not None and not accept(item):
            continue
        if per_page != 0 and len(out) >= per_page:
            return Page(out, token_of(item))
        out.append(item)
        seeking = False
    return Page(out)
