"""Success responses: JSON bodies and the `X-Nomad-*` metadata headers of read endpoints.

Real clients rely on the headers: the Go client reads `X-Nomad-Index` to drive blocking loops
(an index of 0 would make them spin, so it is never below 1) and `X-Nomad-NextToken` to page;
the spec names the token header `X-Service-NextToken`, so both are sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from allocbridge.store import encoding


def render(value: Any, *, pretty: bool) -> bytes:
    return encoding.pretty(value) if pretty else encoding.compact(value)


def json_response(body: bytes, *, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=body, content_type="application/json", headers=headers)


def meta_headers(index: int, *, next_token: str = "") -> dict[str, str]:
    """Nomad's `setMeta`: the index, a known leader, no lag; the page token when there is one."""
    headers = {
        "X-Nomad-Index": str(max(1, index)),
        "X-Nomad-KnownLeader": "true",
        "X-Nomad-LastContact": "0",
    }
    if next_token:
        headers["X-Nomad-NextToken"] = next_token
        headers["X-Service-NextToken"] = next_token
    return headers
