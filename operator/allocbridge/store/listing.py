"""One page of the allocation list: pick Nomad's iteration order, resume at the token, cut.

Orders (Nomad's memdb indexes): with a prefix, by ID (tokens are IDs); without, by
`(CreateIndex, ID)` within the namespace or across all of them (tokens `<CreateIndex>.<ID>`).
`reverse` walks the same order backwards. Tokens that compare in the order's own terms jump
straight to their position by bisection; Nomad's string-comparison fallback for malformed
`<CreateIndex>.<ID>` tokens is honoured by the paginator's linear skip.
"""

from __future__ import annotations

from collections.abc import Callable

from allocbridge.store.allocation import StoredAllocation
from allocbridge.store.memory import AllocationStore
from allocbridge.store.paging import (
    Page,
    create_index_token,
    paginate,
    parse_create_index_token,
)


def _id_token(alloc: StoredAllocation) -> str:
    return alloc.id


def _create_token(alloc: StoredAllocation) -> str:
    return create_index_token(alloc.create_index, alloc.id)


def list_page(
    store: AllocationStore,
    *,
    namespace: str | None,
    prefix: str | None = None,
    reverse: bool = False,
    per_page: int = 0,
    next_token: str = "",
    accept: Callable[[StoredAllocation], bool] | None = None,
) -> Page[StoredAllocation]:
    """A page of allocations.

    - `namespace`: one namespace, or None for all.
    - `prefix`: lower-case hex without hyphens (validated by the caller), or None for no
      prefix query. An empty string is a prefix query that matches everything (ID order).
    - `accept`: the filter and ACL predicate; its exceptions propagate.
    """
    if prefix is not None:
        items = store.by_id(prefix, namespace=namespace, reverse=reverse, start=next_token or None)
        return paginate(items, per_page=per_page, token_of=_id_token, accept=accept)
    start = parse_create_index_token(next_token) if next_token else None
    before = _string_seek(next_token, reverse=reverse) if next_token and start is None else None
    items = store.chronological(namespace, reverse=reverse, start=start)
    return paginate(
        items, per_page=per_page, token_of=_create_token, before_token=before, accept=accept
    )


def _string_seek(token: str, *, reverse: bool) -> Callable[[StoredAllocation], bool]:
    """Nomad's fallback: compare `"<idx>.<id>"` with a non-numeric token as plain strings."""

    def before(alloc: StoredAllocation) -> bool:
        text = _create_token(alloc)
        return text > token if reverse else text < token

    return before
