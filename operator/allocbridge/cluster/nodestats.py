"""A node's kubelet summary stats (`/stats/summary`) through the API server's node proxy.

`GET /api/v1/nodes/<node>/proxy/stats/summary` reaches the kubelet's own stats endpoint (the
source metrics-server reads), with the CPU and memory of every pod's containers. It needs the
`nodes/proxy` get permission. kwok's fake nodes serve no summary: the proxy answers 404 there
(`NotFoundError`), which the caller reports as stats not being available rather than as an
unknown allocation. Failures are `allocbridge.cluster.errors` types.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import client

from allocbridge.cluster.connection import Credentials
from allocbridge.cluster.errors import NO_ANSWER, UnavailableError, from_status

#: Seconds one summary may take (a busy kubelet answers in well under a second).
TIMEOUT = 10.0


class NodeStatsReader:
    """Reads summaries; owns a Kubernetes client, created on first use on the event loop that
    uses it. `credentials` returns None until Kubernetes has been reached."""

    def __init__(self, credentials: Callable[[], Credentials | None]) -> None:
        self._credentials = credentials
        self._api: client.ApiClient | None = None

    def _client(self) -> client.ApiClient:
        if self._api is None:
            credentials = self._credentials()
            if credentials is None:
                raise UnavailableError("the Kubernetes API has not been reached yet")
            self._api = client.ApiClient(configuration=credentials.configuration())
        return self._api

    async def summary(self, node: str) -> dict[str, Any]:
        """The node's summary document; raises a `KubernetesError`."""
        api = self._client()
        headers: dict[str, str] = {"Accept": "application/json"}
        await api.update_params_for_auth(headers, [], ["BearerToken"])
        session: aiohttp.ClientSession = api.rest_client.pool_manager
        url = f"{api.configuration.host}/api/v1/nodes/{quote(node, safe='')}/proxy/stats/summary"
        try:
            async with session.get(
                url,
                headers=headers,
                proxy=api.rest_client.proxy or None,
                server_hostname=api.rest_client.server_hostname or None,
                timeout=aiohttp.ClientTimeout(total=TIMEOUT),
            ) as response:
                body = await response.read()
        except NO_ANSWER as exc:
            raise UnavailableError(f"cannot reach the Kubernetes API for stats: {exc}") from exc
        if response.status != 200:
            raise from_status(response.status, _text(body, response.status))
        try:
            document = json.loads(body)
        except ValueError as exc:
            raise UnavailableError(f"the node's summary is not JSON: {exc}", status=502) from exc
        if not isinstance(document, dict):
            raise UnavailableError("the node's summary is not a JSON object", status=502)
        return document

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None


def _text(body: bytes, status: int) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        message = json.loads(text).get("message")
    except (ValueError, AttributeError):
        message = None
    return message if isinstance(message, str) and message else text or f"HTTP {status}"
