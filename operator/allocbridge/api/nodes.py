"""`GET /v1/node/:node_id`: always 404 `node not found`, so the Go client execs through us.

The official Go client's `Allocations().Exec` first reads the allocation's node, to connect to
that node's HTTP address directly; when the read fails or the node advertises no address it
falls back to the API address it was given (a node reported `down` instead makes it give up).
allocbridge's nodes are Kubernetes nodes with no Nomad agent to connect to, and it serves no
nodes API, so every node ID is unknown, with Nomad's own status and text.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.errors import NomadError
from allocbridge.api.routing import Endpoint

NODE_NOT_FOUND: Final = "node not found"


async def read_node(request: web.Request) -> Answer:
    raise NomadError(404, NODE_NOT_FOUND)


ENDPOINTS = [Endpoint("/v1/node/{node_id}", {"GET": read_node})]
