"""Finding the allocation a write endpoint acts on, in Nomad's order of checks."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from allocbridge.actions.lifecycle import Actions, Target
from allocbridge.api.context import caller, context, synced_store
from allocbridge.api.errors import ApiError
from allocbridge.api.ids import parse_alloc_id
from allocbridge.auth import Capability
from allocbridge.model.goformat import go_quote
from allocbridge.store import StoredAllocation


async def target(
    request: web.Request, capability: Capability, *, not_found: str | None = None
) -> tuple[StoredAllocation, Target]:
    """The allocation of the path, after its lookup (404) and then the capability check (403).

    `not_found` is the 404 text; client endpoints use Nomad's `Unknown allocation "<id>"`.
    """
    raw_id = request.match_info["alloc_id"]
    alloc_id = parse_alloc_id(raw_id)
    ctx = context(request)
    store = await synced_store(ctx)
    alloc = store.get(alloc_id) if alloc_id else None
    if alloc is None:
        raise ApiError(404, not_found or f"Unknown allocation {go_quote(raw_id)}")
    await ctx.authorizer.check(caller(request), capability, alloc.namespace)
    return alloc, Target(alloc.namespace, alloc.object_name, alloc.id)


def actions(request: web.Request) -> Actions:
    current = context(request).actions.current
    if current is None:
        raise ApiError(503, "Kubernetes is not reachable yet; try again")
    return current


async def json_body(request: web.Request, *, required: bool) -> dict[str, Any]:
    """The request's JSON object; Nomad's decode errors as 400."""
    raw = await request.read()
    if not raw.strip():
        if required:
            raise ApiError(400, "Failed to decode body: Request body is empty")
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, f"Failed to decode body: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "Failed to decode body: expected a JSON object")
    return body


def field(body: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    """A field looked up case-insensitively, as Go's encoding/json does."""
    for key, value in body.items():
        if key.lower() == name.lower():
            if value is None:
                return default
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ApiError(
                    400, f"Failed to decode body: {name} must be a {kind.__name__}, got {value!r}"
                )
            return value
    return default
