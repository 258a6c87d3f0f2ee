"""Typed helpers for the Kubernetes objects allocbridge reads and writes.

Thin wrappers over kubernetes_asyncio that speak plain dicts (the JSON the API server sends),
so the pure code in `allocbridge.model` never sees client model classes, and that turn "not
found" and "already exists" into values instead of exceptions where callers expect them.
Failures raise `allocbridge.cluster.errors` types, never the client's `ApiException`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, cast
from urllib.parse import quote

import orjson
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from allocbridge.cluster.errors import (
    NO_ANSWER,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    from_answer,
    from_status,
    unreachable,
)

GROUP: Final = "allocbridge.io"
VERSION: Final = "v1"
PLURAL: Final = "allocations"

#: Kopf's cluster-wide peering kind, where replicas elect the one reconciler.
PEERING_GROUP: Final = "kopf.dev"
PEERING_VERSION: Final = "v1"
PEERING_PLURAL: Final = "clusterkopfpeerings"

Json = dict[str, Any]


async def raw_json(call: Any) -> Json:
    """Run a client call with `_preload_content=False` and decode the JSON body.

    The generated models are slow to build and lose unknown fields; the raw JSON is what
    the model layer expects. orjson decodes it several times faster than `json`, which was
    the operator's largest single cost when hundreds of allocations start at once.
    """
    try:
        response = await call
        async with response:
            body = await response.read()
    except ApiException as exc:  # the client's own checks, before any request
        raise from_status(exc.status, str(exc.reason or exc)) from exc
    except NO_ANSWER as exc:
        raise unreachable(exc) from exc
    if response.status >= 400:
        # With raw responses the client does not raise on errors.
        raise from_answer(response.status, response.reason, body)
    return cast(Json, orjson.loads(body))


async def send_json(
    api: client.ApiClient,
    method: str,
    path: str,
    body: Mapping[str, Any],
    content_type: str = "application/json",
) -> Json:
    """Send `body` encoded by orjson on `api`'s own session, credentials and headers.

    kubernetes_asyncio walks every request body (`sanitize_for_serialization`) and encodes it
    with the standard library's json: a tenth of the operator's CPU when hundreds of pods start
    at once. The bodies sent here are plain JSON-ready dicts, so both steps can go.
    """
    headers = {**api.default_headers, "Content-Type": content_type, "Accept": "application/json"}
    await api.update_params_for_auth(headers, [], ["BearerToken"])
    rest = api.rest_client
    options: dict[str, Any] = {}
    if rest.proxy:
        options.update(proxy=rest.proxy, proxy_headers=rest.proxy_headers)
    if rest.server_hostname:
        options["server_hostname"] = rest.server_hostname
    url = f"{api.configuration.host}{path}"
    try:
        async with rest.pool_manager.request(
            method, url, data=orjson.dumps(body), headers=headers, **options
        ) as response:
            raw = await response.read()
    except NO_ANSWER as exc:
        raise unreachable(exc) from exc
    if response.status >= 400:
        raise from_answer(response.status, response.reason, raw)
    return cast(Json, orjson.loads(raw))


class Kube:
    """The calls the operator makes, on one ApiClient."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        # Typed as Any: we pass dicts and read raw JSON, which the generated stubs do not model.
        self.core: Any = client.CoreV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)

    async def get_allocation(self, namespace: str, name: str) -> Json | None:
        try:
            return await raw_json(
                self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name, _preload_content=False
                )
            )
        except NotFoundError:
            return None

    async def create_allocation(self, namespace: str, body: Mapping[str, Any]) -> Json:
        return await raw_json(
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, body, _preload_content=False
            )
        )

    async def patch_allocation_status(
        self, namespace: str, name: str, status: Mapping[str, Any], resource_version: str | None
    ) -> Json:
        """A merge patch of `status`; with a resourceVersion it fails on a concurrent write."""
        patch: Json = {"status": status}
        if resource_version:
            patch["metadata"] = {"resourceVersion": resource_version}
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace)}/{PLURAL}/{quote(name)}"
        return await send_json(
            self.api, "PATCH", f"{path}/status", patch, "application/merge-patch+json"
        )

    async def get_pod(self, namespace: str, name: str) -> Json | None:
        try:
            return await raw_json(
                self.core.read_namespaced_pod(name, namespace, _preload_content=False)
            )
        except NotFoundError:
            return None

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> Json | None:
        """Create the pod; None when one of that name exists already (creation is idempotent)."""
        try:
            return await send_json(
                self.api, "POST", f"/api/v1/namespaces/{quote(namespace)}/pods", body
            )
        except ConflictError:
            return None

    async def delete_pod(
        self, namespace: str, name: str, grace_seconds: int | None = None, uid: str | None = None
    ) -> bool:
        """Delete the pod (only the one with `uid` when given); False when it was not there."""
        options = client.V1DeleteOptions(
            grace_period_seconds=grace_seconds,
            preconditions=client.V1Preconditions(uid=uid) if uid else None,
        )
        try:
            await self.core.delete_namespaced_pod(name, namespace, body=options)
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise from_status(exc.status, str(exc.reason or exc)) from exc
        except NO_ANSWER as exc:
            raise unreachable(exc) from exc
        return True

    async def create_cluster_peering(self, name: str, labels: Mapping[str, str]) -> bool:
        """Create the ClusterKopfPeering `name` unless it exists; True when this call created it.

        Reads first, so a cluster that made the object itself needs no `create` permission.
        Raises `NotFoundError` when the kind is not served, another `KubernetesError` when the
        call is refused or unanswered."""
        args = (PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL)
        try:
            await raw_json(
                self.custom.get_cluster_custom_object(*args, name, _preload_content=False)
            )
            return False
        except NotFoundError:
            pass
        body = {
            "apiVersion": f"{PEERING_GROUP}/{PEERING_VERSION}",
            "kind": "ClusterKopfPeering",
            "metadata": {"name": name, "labels": dict(labels)},
        }
        try:
            await send_json(
                self.api, "POST", f"/apis/{PEERING_GROUP}/{PEERING_VERSION}/{PEERING_PLURAL}", body
            )
        except ConflictError:  # another replica was first
            return False
        return True

    async def server_version(self) -> tuple[str, str]:
        """The API server's (major, minor), as `/version` spells them (`minor` may be `35+`)."""
        info = await raw_json(client.VersionApi(self.api).get_code(_preload_content=False))
        return str(info.get("major", "")), str(info.get("minor", ""))

    async def get_node(self, name: str) -> Json | None:
        """The node, or None if it is gone or this operator may not read it."""
        try:
            return await raw_json(self.core.read_node(name, _preload_content=False))
        except (ForbiddenError, NotFoundError):
            return None
