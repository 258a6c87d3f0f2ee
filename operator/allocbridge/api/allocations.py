"""`GET /v1/allocations`: list allocation stubs with prefix, filter, paging and blocking.

Order of checks, as in Nomad: query options, then `resources`/`task_states`, then the ACL,
then the prefix, then the filter's syntax; filter evaluation errors surface while the page is
read. With `namespace=*`, the caller needs `read-job` somewhere and sees only the namespaces
where it has it (possibly none: `[]`, not 403). As in Nomad, that set is taken when the query
runs: from the synced store, and again for namespaces that appear while a blocking query waits,
so an answer never leaves out an allocation its index covers.

Deviation: the namespace ACL is applied before the filter (Nomad filters first), so a filter
never runs on, nor fails because of, an allocation the caller may not read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.blocking import blocking_query
from allocbridge.api.context import caller, context, synced_store
from allocbridge.api.errors import NomadError
from allocbridge.api.ids import parse_prefix
from allocbridge.api.query import QueryOptions, parse_query, parse_stub_fields
from allocbridge.api.routing import Endpoint
from allocbridge.auth import ALL_NAMESPACES, READ_JOB, Authorizer, Caller
from allocbridge.model.filter import FilterEvaluationError, FilterSyntaxError, compile_filter
from allocbridge.store import AllocationStore, Page, StoredAllocation, list_page, stub_array

Predicate = Callable[[StoredAllocation], bool]
T = TypeVar("T")
Matcher = Callable[[Mapping[str, Any]], bool]  # a compiled filter, on an allocation's datum


async def list_allocations(request: web.Request) -> Answer:
    query = parse_query(request.query)
    fields = parse_stub_fields(request.query)
    ctx = context(request)
    who = caller(request)
    await ctx.authorizer.check(who, READ_JOB, query.namespace)
    prefix = parse_prefix(query.prefix) if query.prefix else None
    matches = compile_matcher(query.filter)
    store = await synced_store(ctx)
    every_namespace = query.namespace == ALL_NAMESPACES
    readable = ReadableNamespaces(ctx.authorizer, who, store) if every_namespace else None
    namespace = None if every_namespace else query.namespace

    def run() -> tuple[int, tuple[Page[StoredAllocation], int | None]]:
        accept = _predicate(matches, None if readable is None else readable.allowed)
        page = list_page(
            store,
            namespace=namespace,
            prefix=prefix,
            reverse=query.reverse,
            per_page=query.per_page,
            next_token=query.next_token,
            accept=accept,
        )
        # A whole list (every allocation of the namespace, or of all): the store knows the
        # stubs' summed length; taken here, in the same step as the page.
        whole = (
            accept is None
            and prefix is None
            and not query.next_token
            and not fields.resources
            and len(page.items) == store.count(namespace)
        )
        size = store.stubs_size(namespace, task_states=fields.task_states) if whole else None
        return store.index, (page, size)

    index, (page, size) = await filtered_blocking_query(store, query, run, readable)
    stubs = stub_array(
        page.items, task_states=fields.task_states, resources=fields.resources, stubs_size=size
    )
    return Answer(array=stubs, index=index, next_token=page.next_token)


async def filtered_blocking_query(
    store: AllocationStore,
    query: QueryOptions,
    run: Callable[[], tuple[int, T]],
    readable: ReadableNamespaces | None,
) -> tuple[int, T]:
    """`blocking_query` of a filtered list (allocations, jobs): the namespaces the caller may
    read are refreshed before each run, and a filter that fails on an item is Nomad's 400."""
    try:
        return await blocking_query(
            store, query, run, prepare=None if readable is None else readable.update
        )
    except FilterEvaluationError as exc:
        raise NomadError(400, f"failed to read result page: {exc}") from exc


class ReadableNamespaces:
    """The namespaces a `namespace=*` list may show.

    Each namespace is weighed once per request, when it first holds an allocation: a blocking
    query wakes on every change, and asking the authorizer again each time would only repeat
    answers it already gave.
    """

    def __init__(self, authorizer: Authorizer, who: Caller, store: AllocationStore) -> None:
        self.authorizer = authorizer
        self.who = who
        self.store = store
        self.weighed: frozenset[str] = frozenset()
        self.allowed: frozenset[str] | None = frozenset()  # None: every namespace

    async def update(self) -> None:
        """Weigh the store's namespaces not weighed yet, until none new appeared meanwhile,
        so a run that follows without awaiting finds every namespace weighed."""
        allowed = self.allowed
        while allowed is not None and (new := self.store.namespaces() - self.weighed):
            granted = await self.authorizer.allowed_namespaces(self.who, READ_JOB, new)
            self.weighed |= new
            allowed = None if granted is None else allowed | granted
            self.allowed = allowed


def compile_matcher(expression: str) -> Matcher | None:
    """The filter, compiled once per request; a syntax error is Nomad's 400."""
    if not expression:
        return None
    try:
        return compile_filter(expression).matches
    except FilterSyntaxError as exc:
        raise NomadError(
            400, f"failed to create result paginator: failed to read filter expression: {exc}"
        ) from exc


def _predicate(matches: Matcher | None, allowed: frozenset[str] | None) -> Predicate | None:
    """The per-allocation test: namespace ACL first, then the filter; None when neither."""
    if allowed is None:
        if matches is None:
            return None
        filter_matches = matches
        return lambda alloc: filter_matches(alloc.filter_datum)
    if matches is None:
        return lambda alloc: alloc.namespace in allowed
    both = matches
    return lambda alloc: alloc.namespace in allowed and both(alloc.filter_datum)


ENDPOINTS = [Endpoint("/v1/allocations", {"GET": list_allocations})]
