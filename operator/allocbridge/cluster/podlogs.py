"""Reading a container's log through the API server's `pods/<name>/log`, as a byte stream.

The API server proxies the request to the node's kubelet (kwok, on the local control plane's
fake nodes, serves a file named by its `Logs` objects instead). A log is served from its start;
`follow` keeps the response open for what the container writes next.

Split streams: Kubernetes 1.32 added `stream=Stdout|Stderr` behind the `PodLogsQuerySplitStreams`
feature gate (alpha, off by default through 1.36). An API server without the gate refuses the
parameter with 422 (`stream: Forbidden: may not be specified`); the reader then asks without it
and reports `split=False`: the log holds both streams interleaved, as `kubectl logs` shows it.
The answer is remembered for `RECHECK` seconds, so most requests make one call. Whether the
kubelet honours the parameter is its own gate's business: a 1.36 kubelet without it refuses
the request (`Please enable PodLogsQuerySplitStreams feature gate in kubelet`), and the reader
asks again without `stream` and reports `split=False`; kwok ignores the parameter and sends both
streams.

Closing the stream closes the connection, which ends the API server's request to the kubelet:
a client that goes away ends the Kubernetes log stream with it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import quote, urlencode

import aiohttp
from kubernetes_asyncio import client

from allocbridge.cluster.connection import Credentials
from allocbridge.cluster.errors import (
    NO_ANSWER,
    KubernetesError,
    RefusedError,
    UnavailableError,
    from_status,
)
from allocbridge.eventloop import tail_keeping_tls

log = logging.getLogger(__name__)

#: Named in a kubelet's refusal of `stream` when its own gate is off (then the API server's
#: answer is an error, not both streams); such a log is read whole, and nothing is remembered,
#: as other nodes' kubelets may have the gate.
KUBELET_GATE: Final = "PodLogsQuerySplitStreams"
#: Seconds a verdict on split streams is trusted before it is asked again.
RECHECK: Final = 300.0
#: Bytes read from the API server at a time.
READ_SIZE: Final = 64 * 1024

Stream = Literal["Stdout", "Stderr"]


class ContainerWaitingError(RefusedError):
    """The container has not started yet: no log (the kubelet's 400 `... is waiting to start`).
    Other failures to serve a log are the `allocbridge.cluster.errors` kinds of the answer."""


def _refusal(status: int, message: str) -> KubernetesError:
    """The error for the API server's answer `status` to a log request."""
    if status == 400 and "waiting to start" in message:
        return ContainerWaitingError(message, status=status)
    return from_status(status, message)


@dataclass
class LogStream:
    """One open log; `split` is False when it holds both stdout and stderr."""

    response: aiohttp.ClientResponse
    split: bool

    async def chunks(self) -> AsyncIterator[bytes]:
        """The log's bytes as they come, until its end (without follow) or the connection's."""
        while True:
            chunk = await self.response.content.read(READ_SIZE)
            if not chunk:
                return
            yield chunk


class PodLogReader:
    """Opens log streams; owns a Kubernetes client, created on first use on the event loop that
    uses it. `credentials` returns None until Kubernetes has been reached."""

    def __init__(self, credentials: Callable[[], Credentials | None]) -> None:
        self._credentials = credentials
        self._api: client.ApiClient | None = None
        self._split_checked: tuple[bool, float] | None = None  # (served, when)

    def _client(self) -> client.ApiClient:
        if self._api is None:
            credentials = self._credentials()
            if credentials is None:
                raise UnavailableError("the Kubernetes API has not been reached yet")
            configuration = credentials.configuration()
            configuration.connection_pool_maxsize = 0  # each follower holds a connection
            self._api = client.ApiClient(configuration=configuration)
        return self._api

    def _split_known(self) -> bool | None:
        if self._split_checked is None:
            return None
        served, when = self._split_checked
        return served if time.monotonic() - when < RECHECK else None

    @asynccontextmanager
    async def open(
        self, namespace: str, pod: str, container: str, *, follow: bool, stream: Stream | None
    ) -> AsyncIterator[LogStream]:
        """The log of `container`, only `stream` when the API server splits streams."""
        api = self._client()
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/log"
        query = [("container", container), ("follow", "true" if follow else "false")]
        split = stream is not None and self._split_known() is not False
        response: aiohttp.ClientResponse | None = None
        try:
            try:
                if split and stream is not None:
                    response = await _get(api, path, [*query, ("stream", stream)])
                    refusal = "" if response.status == 200 else await _message(response)
                    if response.status == 422 and "stream" in refusal:
                        response.close()
                        response = None
                        split = False
                        self._split_checked = (False, time.monotonic())
                    elif KUBELET_GATE in refusal:  # this pod's kubelet lacks the gate
                        response.close()
                        response = None
                        split = False
                    elif response.status == 200:
                        self._split_checked = (True, time.monotonic())
                if response is None:
                    response = await _get(api, path, query)
                if response.status != 200:
                    raise _refusal(response.status, await _message(response))
            except NO_ANSWER as exc:
                raise UnavailableError(f"cannot reach the Kubernetes API for logs: {exc}") from exc
            yield LogStream(response, split)
        finally:
            if response is not None:
                response.close()  # drops the connection: the API server ends its kubelet call

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None


async def _get(
    api: client.ApiClient, path: str, query: list[tuple[str, str]]
) -> aiohttp.ClientResponse:
    """A streaming GET on the API server, authenticated and over TLS as `api` is."""
    headers: dict[str, str] = {"Accept": "*/*"}
    await api.update_params_for_auth(headers, [], ["BearerToken"])
    session: aiohttp.ClientSession = api.rest_client.pool_manager
    with tail_keeping_tls():  # a log's last lines are what its reader waits for
        return await session.get(
            f"{api.configuration.host}{path}?{urlencode(query)}",
            headers=headers,
            proxy=api.rest_client.proxy or None,
            server_hostname=api.rest_client.server_hostname or None,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        )


async def _message(response: aiohttp.ClientResponse) -> str:
    """The text of a failed response: a `Status` object's message, else the body."""
    text = ""
    with contextlib.suppress(aiohttp.ClientError, UnicodeDecodeError):
        text = (await response.read()).decode("utf-8")
    with contextlib.suppress(ValueError, AttributeError):
        found = json.loads(text).get("message")
        if isinstance(found, str):
            return found
    return text.strip() or f"HTTP {response.status}"
