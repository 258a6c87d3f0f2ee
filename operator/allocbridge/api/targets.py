"""Finding the allocation a write endpoint acts on, in Nomad's order of checks."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from allocbridge.actions.lifecycle import Actions, Target
from allocbridge.api.context import caller, context, synced_store
from allocbridge.api.errors import NomadError
from allocbridge.api.ids import parse_alloc_id
from allocbridge.api.query import parse_query
from allocbridge.auth import Authorizer, Caller, Capability, PermissionDeniedError
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
        raise NomadError(404, not_found or f"Unknown allocation {go_quote(raw_id)}")
    await ctx.authorizer.check(caller(request), capability, alloc.namespace)
    return alloc, Target(alloc.namespace, alloc.object_name, alloc.id)


async def readable_allocation(request: web.Request, *capabilities: Capability) -> StoredAllocation:
    """The allocation a client read endpoint (checks, stats, logs) serves, in Nomad's order:
    any of `capabilities` on the allocation's namespace (the request's, for an unknown ID, so
    a bad token is denied whether or not the ID exists), then 404 `Unknown allocation`."""
    raw_id = request.match_info["alloc_id"]
    alloc_id = parse_alloc_id(raw_id)
    ctx = context(request)
    store = await synced_store(ctx)
    alloc = store.get(alloc_id) if alloc_id else None
    namespace = parse_query(request.query).namespace if alloc is None else alloc.namespace
    await check_any(ctx.authorizer, caller(request), namespace, capabilities)
    if alloc is None:
        raise NomadError(404, f"Unknown allocation {go_quote(raw_id)}")
    return alloc


async def check_any(
    authorizer: Authorizer, who: Caller, namespace: str, capabilities: tuple[Capability, ...]
) -> None:
    """Passes if any of `capabilities` is granted in `namespace`; else the last denial."""
    denied = PermissionDeniedError()
    for capability in capabilities:
        try:
            await authorizer.check(who, capability, namespace)
            return
        except PermissionDeniedError as exc:
            denied = exc
    raise denied


def actions(request: web.Request) -> Actions:
    current = context(request).actions.current
    if current is None:
        raise NomadError(503, "Kubernetes is not reachable yet; try again")
    return current


async def json_body(request: web.Request, *, required: bool) -> dict[str, Any]:
    """The request's JSON object; Nomad's decode errors as 400."""
    raw = await request.read()
    if not raw.strip():
        if required:
            raise NomadError(400, "Failed to decode body: Request body is empty")
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise NomadError(400, f"Failed to decode body: {exc}") from exc
    if not isinstance(body, dict):
        raise NomadError(400, "Failed to decode body: expected a JSON object")
    return body


def field(body: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    """A field looked up case-insensitively, as Go's encoding/json does."""
    for key, value in body.items():
        if key.lower() == name.lower():
            if value is None:
                return default
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise NomadError(
                    400, f"Failed to decode body: {name} must be a {kind.__name__}, got {value!r}"
                )
            return value
    return default
