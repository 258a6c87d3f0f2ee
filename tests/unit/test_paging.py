"""Paging as Nomad does it: tokens naming the next page's first item, every item exactly once."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from allocations_fixture import alloc_id, stored
from hypothesis import given, settings
from hypothesis import strategies as st

from allocbridge.store import AllocationStore, StoredAllocation, list_page
from allocbridge.store.paging import (
    Page,
    create_index_token,
    paginate,
    parse_create_index_token,
)

# -- tokens -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "parsed"),
    [
        (
            "1003.aaaaaaaa-3350-4b4b-d185-0e1992ed43e9",
            (1003, "aaaaaaaa-3350-4b4b-d185-0e1992ed43e9"),
        ),
        ("12.", (12, "")),
        ("+5.x", (5, "x")),
        ("-5.x", (-5, "x")),
        ("1.2.3", (1, "2.3")),
        ("abc", None),
        ("abc.def", None),
        ("1_000.x", None),
        (" 1.x", None),
        ("99999999999999999999.x", None),  # overflows Go's int: string comparison
        ("", None),
    ],
)
def test_parse_create_index_token(token: str, parsed: tuple[int, str] | None) -> None:
    assert parse_create_index_token(token) == parsed


def test_create_index_token() -> None:
    assert create_index_token(1003, "aaaa") == "1003.aaaa"


# -- the walk -----------------------------------------------------------------------------------


def _ident(item: int) -> str:
    return str(item)


def test_page_cut_and_next_token_is_the_first_item_left_out() -> None:
    page = paginate(range(10), per_page=3, token_of=_ident)
    assert page == Page([0, 1, 2], "3")


def test_no_limit_and_exact_fit_have_no_next_token() -> None:
    assert paginate(range(3), per_page=0, token_of=_ident) == Page([0, 1, 2])
    assert paginate(range(3), per_page=3, token_of=_ident) == Page([0, 1, 2])


def test_next_token_counts_only_accepted_items() -> None:
    page = paginate(range(10), per_page=2, token_of=_ident, accept=lambda n: n % 3 == 0)
    assert page == Page([0, 3], "6")


def test_negative_per_page_gives_an_empty_page_naming_the_first_match() -> None:
    page = paginate(range(5), per_page=-1, token_of=_ident, accept=lambda n: n > 1)
    assert page == Page([], "2")


def test_seeking_stops_at_the_first_emitted_item() -> None:
    # Non-monotone comparison (Nomad's string fallback): after the first emission, later
    # items are no longer compared with the token.
    items = [5, 1, 7, 2]
    page = paginate(items, per_page=0, token_of=_ident, before_token=lambda n: n < 5)
    assert page == Page([5, 1, 7, 2])
    # Items skipped by the filter do not end the seek.
    page = paginate(
        items, per_page=0, token_of=_ident, before_token=lambda n: n < 5, accept=lambda n: n != 5
    )
    assert page == Page([7, 2])


def test_accept_errors_propagate() -> None:
    def boom(item: int) -> bool:
        raise ValueError("bad datum")

    with pytest.raises(ValueError, match="bad datum"):
        paginate(range(3), per_page=0, token_of=_ident, accept=boom)


# -- list pages over the store ------------------------------------------------------------------


def _store(specs: list[tuple[str, int, str]]) -> AllocationStore:
    store = AllocationStore()
    store.replace_all(
        [
            stored(ident, create_index=create, namespace=ns, with_services=False)
            for ident, create, ns in specs
        ],
        1000,
    )
    return store


def _walk(
    store: AllocationStore,
    *,
    per_page: int,
    namespace: str | None,
    prefix: str | None,
    reverse: bool,
    accept: Callable[[StoredAllocation], bool] | None = None,
) -> list[list[str]]:
    pages: list[list[str]] = []
    token = ""
    while True:
        page = list_page(
            store,
            namespace=namespace,
            prefix=prefix,
            reverse=reverse,
            per_page=per_page,
            next_token=token,
            accept=accept,
        )
        pages.append([alloc.id for alloc in page.items])
        assert len(pages) <= len(store) + 1, "paging does not advance"
        if not page.next_token:
            return pages
        assert page.next_token != token
        token = page.next_token


def _expected(
    specs: list[tuple[str, int, str]],
    *,
    namespace: str | None,
    prefix: str | None,
    reverse: bool,
    keep: Callable[[int], bool] = lambda _: True,
) -> list[str]:
    chosen = [
        (create, ident)
        for ident, create, ns in specs
        if (namespace is None or ns == namespace)
        and (prefix is None or ident.replace("-", "").startswith(prefix))
        and keep(create)
    ]
    key = (lambda pair: pair[1]) if prefix is not None else (lambda pair: pair)
    return [ident for _, ident in sorted(chosen, key=key, reverse=reverse)]


_specs = st.lists(
    st.tuples(
        st.uuids(version=4).map(str),
        st.integers(min_value=1, max_value=8),  # few values: many equal CreateIndexes
        st.sampled_from(["default", "team-a", "team-b"]),
    ),
    max_size=40,
    unique_by=lambda spec: spec[0],
)


@settings(max_examples=300, deadline=None)
@given(
    specs=_specs,
    per_page=st.integers(min_value=1, max_value=7),
    namespace=st.sampled_from([None, "default", "team-a"]),
    prefix=st.sampled_from([None, "", "4", "a", "0f", "c3", "ab"]).map(
        lambda p: p if p is None or len(p) % 2 == 0 else None
    ),
    reverse=st.booleans(),
    filtered=st.booleans(),
)
def test_every_allocation_appears_exactly_once_across_pages(
    specs: list[tuple[str, int, str]],
    per_page: int,
    namespace: str | None,
    prefix: str | None,
    reverse: bool,
    filtered: bool,
) -> None:
    store = _store(specs)
    keep: Callable[[int], bool] = (lambda create: create % 2 == 0) if filtered else (lambda _: True)
    accept = (lambda alloc: keep(alloc.create_index)) if filtered else None
    pages = _walk(
        store, per_page=per_page, namespace=namespace, prefix=prefix, reverse=reverse, accept=accept
    )
    flat = [ident for page in pages for ident in page]
    assert flat == _expected(specs, namespace=namespace, prefix=prefix, reverse=reverse, keep=keep)
    assert len(flat) == len(set(flat))
    assert all(len(page) == per_page for page in pages[:-1])
    assert len(pages[-1]) <= per_page


@settings(max_examples=100, deadline=None)
@given(specs=_specs, per_page=st.integers(min_value=1, max_value=5), reverse=st.booleans())
def test_pages_survive_writes_between_requests(
    specs: list[tuple[str, int, str]], per_page: int, reverse: bool
) -> None:
    """Items written behind the cursor never show up; items written ahead of it do; nothing
    is repeated."""
    store = _store(specs)
    # Specs have CreateIndex 1..8; writes go strictly behind or ahead of any cursor.
    behind_index = 20_000 if reverse else 0
    seen: list[str] = []
    behind: set[str] = set()
    ahead: set[str] = set()
    token = ""
    while True:
        page = list_page(
            store, namespace=None, per_page=per_page, next_token=token, reverse=reverse
        )
        seen.extend(alloc.id for alloc in page.items)
        if not page.next_token:
            break
        token = page.next_token
        n = len(behind) + len(ahead) + 1
        old = stored(str(uuid.UUID(int=n)), create_index=behind_index, with_services=False)
        store.upsert(old)
        behind.add(old.id)
        if len(ahead) < 3:
            ahead_index = -n if reverse else 10_000 + n
            new = stored(
                str(uuid.UUID(int=n + 1000)), create_index=ahead_index, with_services=False
            )
            store.upsert(new)
            ahead.add(new.id)
    assert len(seen) == len(set(seen))
    assert set(seen) == {ident for ident, _, _ in specs} | ahead
    assert not behind & set(seen)


def test_token_for_a_missing_index_resumes_at_the_next_higher() -> None:
    specs = [(alloc_id(n), create, "default") for n, create in enumerate([1003, 1005, 1010, 1010])]
    store = _store(specs)
    page = list_page(store, namespace="default", next_token="1004.zzz")
    assert [a.create_index for a in page.items] == [1005, 1010, 1010]
    page = list_page(store, namespace="default", next_token="1004.zzz", reverse=True)
    assert [a.create_index for a in page.items] == [1003]


def test_equal_create_indexes_are_ordered_by_id() -> None:
    low, high = "00000222-0000-4000-8000-000000000000", "00000333-0000-4000-8000-000000000000"
    store = _store([(high, 1010, "default"), (low, 1010, "default")])
    page = list_page(store, namespace="default", per_page=1)
    assert [a.id for a in page.items] == [low]
    assert page.next_token == f"1010.{high}"


def test_garbage_token_compares_as_a_string() -> None:
    specs = [(alloc_id(n), create, "default") for n, create in enumerate([10, 50, 100])]
    store = _store(specs)
    # As strings "10.x" < "2" <= "50.x": skip 10, then emit from 50 on; "100.x" is not
    # compared any more once something was emitted (Nomad's walk).
    page = list_page(store, namespace="default", next_token="2")
    assert [a.create_index for a in page.items] == [50, 100]
    assert list_page(store, namespace="default", next_token="zzz").items == []


def test_id_token_with_prefix() -> None:
    ids = sorted(alloc_id(n, head="ab") for n in range(5))
    store = _store([(ident, 10 - n, "default") for n, ident in enumerate(ids)])
    page = list_page(store, namespace="default", prefix="ab", per_page=2)
    assert [a.id for a in page.items] == ids[:2]
    assert page.next_token == ids[2]
    page = list_page(store, namespace="default", prefix="ab", per_page=2, next_token=ids[2])
    assert [a.id for a in page.items] == ids[2:4]
    page = list_page(store, namespace="default", prefix="ab", reverse=True, next_token=ids[2])
    assert [a.id for a in page.items] == ids[:3][::-1]
