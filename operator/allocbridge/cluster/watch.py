"""List-then-watch of one kind of object, as raw JSON, resuming where it left off.

Yields a `Listed` snapshot first (and again whenever the API server says the resourceVersion
is too old, HTTP 410), then `Changed` events and bookmarks. Network errors are retried with
back-off from the last resourceVersion seen; callers see an unbroken stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from allocbridge.cluster.resources import raw_json

log = logging.getLogger(__name__)

Json = dict[str, Any]
BACKOFF = (0.2, 0.5, 1.0, 2.0, 5.0)


@dataclass(frozen=True)
class Listed:
    """Every object that exists, at `resource_version`."""

    items: list[Json]
    resource_version: int


@dataclass(frozen=True)
class Changed:
    """`kind` is ADDED, MODIFIED, DELETED or BOOKMARK (whose `obj` has only metadata)."""

    kind: str
    obj: Json
    resource_version: int


ListCall = Callable[..., Awaitable[Any]]


class ExpiredError(Exception):
    """The watch's resourceVersion is too old: list again."""


async def watch(
    list_call: ListCall, *, on_error: Callable[[Exception], None] | None = None, **params: Any
) -> AsyncIterator[Listed | Changed]:
    """Stream a resource; `list_call` is a kubernetes_asyncio list method (raw JSON is used)."""
    failures = 0
    resource_version: str | None = None
    while True:
        try:
            if resource_version is None:
                body = await raw_json(list_call(**params, _preload_content=False))
                resource_version = body["metadata"]["resourceVersion"]
                items = body.get("items", [])
                kind = body.get("kind", "").removesuffix("List")
                for item in items:  # list items carry no kind; watch events do
                    item.setdefault("kind", kind)
                yield Listed(items, int(resource_version))
                failures = 0
            async for event in _stream(list_call, resource_version, params):
                resource_version = event.obj["metadata"]["resourceVersion"]
                failures = 0
                yield event
        except ExpiredError:
            resource_version = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # API server away, connection reset, 5xx: retry
            if isinstance(exc, ApiException) and exc.status == 410:
                resource_version = None
                continue
            failures += 1
            if on_error is not None:
                on_error(exc)
            delay = BACKOFF[min(failures, len(BACKOFF)) - 1]
            log.debug("watch interrupted; resuming", extra={"error": repr(exc), "delay": delay})
            await asyncio.sleep(delay)


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
            raise ApiException(status=response.status, reason=response.reason)
        while True:
            line = await response.content.readline()
            if not line:
                return  # the server ended the watch (timeout): resume from here
            event = json.loads(line)
            kind = event.get("type", "")
            obj = event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise ExpiredError()
                raise RuntimeError(f"watch error: {obj.get('message', obj)}")
            yield Changed(kind, obj, int(obj["metadata"]["resourceVersion"]))
