"""What handlers share, kept on the application under one typed key (no module globals)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from aiohttp import web

from allocbridge.actions.lifecycle import ActionsSlot
from allocbridge.api.errors import NomadError
from allocbridge.auth import Authorizer, Caller, extract_token
from allocbridge.store import AllocationStore

#: Nomad's text when a server cannot answer reads yet; sent with 503 so balancers retry.
NOT_SYNCED: Final = "No cluster leader"


@dataclass(frozen=True)
class ApiContext:
    store: AllocationStore
    authorizer: Authorizer
    sync_timeout: float  # seconds a request waits for the store's first full list
    actions: ActionsSlot = field(default_factory=ActionsSlot)  # stop, signal, restart, pause


CONTEXT: Final = web.AppKey("allocbridge_api", ApiContext)


def context(request: web.Request) -> ApiContext:
    return request.app[CONTEXT]


def caller(request: web.Request) -> Caller:
    return Caller(token=extract_token(request.headers))


async def synced_store(ctx: ApiContext) -> AllocationStore:
    """The store once it holds a full list; 503 if it does not within `sync_timeout`."""
    if not await ctx.store.wait_synced(ctx.sync_timeout):
        raise NomadError(503, NOT_SYNCED)
    return ctx.store
