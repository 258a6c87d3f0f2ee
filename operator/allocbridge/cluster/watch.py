"""List-then-watch of one kind of object, as raw JSON, resuming where it left off.

Yields a `Listed` snapshot first (and again whenever the API server says the resourceVersion
is too old, HTTP 410), then `Changed` events and bookmarks. Network errors are retried with
back-off from the last resourceVersion seen; callers see an unbroken stream.

Objects come without `metadata.managedFields`: nothing here reads that server-side-apply
bookkeeping, and it is about half of a parsed Allocation (6 of 13 KB), which a store of 10,000
keeps for as long as they exist. The snapshot is listed in pages of `LIST_PAGE` objects (one
consistent snapshot through the continue token), so the bookkeeping of only one page is in
memory at a time instead of that of every object at once. Watch events have them cut from
their bytes before decoding (`decode_event`), which spares half of a pod event's decoding.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes_asyncio import client

from allocbridge.cluster.errors import GoneError, from_answer
from allocbridge.cluster.resources import GROUP, PLURAL, VERSION, raw_json

log = logging.getLogger(__name__)

Json = dict[str, Any]
BACKOFF = (0.2, 0.5, 1.0, 2.0, 5.0)
LIST_PAGE = 500


@dataclass(frozen=True)
class Listed:
    """Every object that exists, at `resource_version`: the objects, or what the watch's
    `pack` made of each (so a large list never exists as dicts all at once)."""

    items: list[Any]
    resource_version: int


@dataclass(frozen=True)
class Changed:
    """`kind` is ADDED, MODIFIED, DELETED or BOOKMARK (whose `obj` has only metadata)."""

    kind: str
    obj: Json
    resource_version: int


ListCall = Callable[..., Awaitable[Any]]
Pack = Callable[[Json], Any]


class ObjectWatches:
    """The streams the store and the reconciler are fed from: Allocations, pods by label and
    Events by field, in one namespace or (`namespace` None) in all, and Nodes; on one ApiClient
    bound to the caller's event loop."""

    def __init__(
        self, api: client.ApiClient, on_error: Callable[[Exception], None] | None = None
    ) -> None:
        # Typed as Any: raw JSON is read, which the generated stubs do not model.
        self.custom: Any = client.CustomObjectsApi(api)
        self.core: Any = client.CoreV1Api(api)
        self.on_error = on_error  # told of every interruption a stream resumes from

    def allocations(
        self, namespace: str | None, *, pack: Pack | None = None
    ) -> AsyncIterator[Listed | Changed]:
        """`pack`: what a listed Allocation is kept as (see `watch`)."""
        custom = self.custom
        return self._watch(
            custom.list_cluster_custom_object,
            custom.list_namespaced_custom_object,
            namespace,
            pack=pack,
            group=GROUP,
            version=VERSION,
            plural=PLURAL,
        )

    def pods(self, namespace: str | None, label_selector: str) -> AsyncIterator[Listed | Changed]:
        core = self.core
        return self._watch(
            core.list_pod_for_all_namespaces,
            core.list_namespaced_pod,
            namespace,
            label_selector=label_selector,
        )

    def events(self, namespace: str | None, field_selector: str) -> AsyncIterator[Listed | Changed]:
        core = self.core
        return self._watch(
            core.list_event_for_all_namespaces,
            core.list_namespaced_event,
            namespace,
            field_selector=field_selector,
        )

    def nodes(self) -> AsyncIterator[Listed | Changed]:
        return watch(self.core.list_node, on_error=self.on_error)

    def _watch(
        self, everywhere: ListCall, namespaced: ListCall, namespace: str | None, **params: Any
    ) -> AsyncIterator[Listed | Changed]:
        """`watch` with the cluster-wide list call, or the namespaced one in `namespace`."""
        if namespace is None:
            return watch(everywhere, on_error=self.on_error, **params)
        return watch(namespaced, on_error=self.on_error, namespace=namespace, **params)


class ExpiredError(Exception):
    """The watch's resourceVersion is too old: list again."""


async def watch(
    list_call: ListCall,
    *,
    on_error: Callable[[Exception], None] | None = None,
    pack: Pack | None = None,
    **params: Any,
) -> AsyncIterator[Listed | Changed]:
    """Stream a resource; `list_call` is a kubernetes_asyncio list method (raw JSON is used).

    `pack`, if given, turns each listed object into what `Listed.items` holds, page by page:
    50,000 Allocations as dicts are about 500 MB at once, which stays in the process's heap.
    Watch events always carry the object."""
    failures = 0
    resource_version: str | None = None
    while True:
        try:
            if resource_version is None:
                items, resource_version = await _list(list_call, params, pack)
                yield Listed(items, int(resource_version))
                failures = 0
            async for event in _stream(list_call, resource_version, params):
                resource_version = event.obj["metadata"]["resourceVersion"]
                failures = 0
                yield event
        except (ExpiredError, GoneError):
            resource_version = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # API server away, connection reset, 5xx: retry
            failures += 1
            if on_error is not None:
                on_error(exc)
            delay = BACKOFF[min(failures, len(BACKOFF)) - 1]
            log.debug("watch interrupted; resuming", extra={"error": repr(exc), "delay": delay})
            await asyncio.sleep(delay)


async def _list(
    list_call: ListCall, params: dict[str, Any], pack: Pack | None = None
) -> tuple[list[Any], str]:
    """Every object (or what `pack` makes of it), page by page, and the resourceVersion of the
    snapshot."""
    items: list[Any] = []
    token = ""
    while True:
        paging: dict[str, Any] = {"limit": LIST_PAGE}
        if token:
            paging["_continue"] = token
        body = await raw_json(list_call(**params, **paging, _preload_content=False))
        kind = body.get("kind", "").removesuffix("List")
        for item in body.get("items", []):
            item.setdefault("kind", kind)  # list items carry no kind; watch events do
            _lean(item)
            items.append(item if pack is None else pack(item))
        metadata = body.get("metadata") or {}
        token = metadata.get("continue") or ""
        if not token:
            return items, str(metadata["resourceVersion"])


def _lean(obj: Json) -> Json:
    """The object without `metadata.managedFields` (see the module's docstring)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


_MANAGED_FIELDS = b',"managedFields":['


def decode_event(line: bytes) -> Json:
    """One watch event's JSON, its object's `metadata.managedFields` cut out of the bytes before
    decoding, not after (see the module's docstring): they are half of a pod's event (3.3 of
    6.9 KB in a start of 500), and each event is decoded by the store's feed and again by the
    reconciler's watches.

    The entries of `managedFields` hold strings and objects only, never an array, and the API
    server escapes every quote inside a string, so the array ends at the first `]` followed by
    `}` or `,"` (the end of `metadata`, or its next key). Should a string ever hold those
    bytes (a manager named so), what is left is not JSON: the whole line is decoded instead and
    the field dropped after. The cut must also end before the object's `spec` and `status`:
    an object whose metadata has no `managedFields` may still have a field of that name there
    (an Allocation's free-form task config and task states), which must never be cut.
    """
    start = line.find(_MANAGED_FIELDS)
    if start >= 0:
        end = _array_end(line, start + len(_MANAGED_FIELDS))
        if end >= 0 and _before_body(line, end):
            try:
                event: Json = orjson.loads(line[:start] + line[end + 1 :])
            except orjson.JSONDecodeError:
                pass
            else:
                return event
    decoded: Json = orjson.loads(line)
    if isinstance(decoded.get("object"), dict):
        _lean(decoded["object"])
    return decoded


#: The object's keys after `metadata` that hold user-written objects. Inside `metadata` no key
#: of these names holds an object (annotation values are strings; field sets say `f:spec`).
_BODY_KEYS = (b',"spec":{', b',"status":{')


def _before_body(line: bytes, end: int) -> bool:
    """Whether the bytes up to `end` lie before the object's `spec` and `status`."""
    return all(line.find(key, 0, end) < 0 for key in _BODY_KEYS)


def _array_end(line: bytes, position: int) -> int:
    """Where the `managedFields` array that starts before `position` ends, or -1."""
    while True:
        end = line.find(b"]", position)
        if end < 0:
            return -1
        after = line[end + 1 : end + 3]
        if after[:1] == b"}" or after == b',"':
            return end
        position = end + 1


async def _stream(
    list_call: ListCall, resource_version: str, params: dict[str, Any]
) -> AsyncIterator[Changed]:
    response = await list_call(
        **params,
        watch=True,
        allow_watch_bookmarks=True,
        resource_version=resource_version,
        timeout_seconds=290,
        _preload_content=False,
        _request_timeout=(None, 320),
    )
    async with response:
        if response.status >= 400:
            if response.status == 410:
                raise ExpiredError()
            raise from_answer(response.status, response.reason, await response.read())
        while True:
            line = await response.content.readline()
            if not line:
                return  # the server ended the watch (timeout): resume from here
            event = decode_event(line)
            kind = event.get("type", "")
            obj = event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise ExpiredError()
                raise RuntimeError(f"watch error: {obj.get('message', obj)}")
            yield Changed(kind, obj, int(obj["metadata"]["resourceVersion"]))
