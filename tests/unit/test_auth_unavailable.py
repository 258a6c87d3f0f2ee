"""When no authorization decision can be made now, the API answers 503, never 403 or 500."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from allocations_fixture import SAMPLE, sample_store
from kubernetes_asyncio import client

from allocbridge.api.server import create_app
from allocbridge.auth import AuthUnavailableError, Caller, Capability
from allocbridge.auth.kubernetes import KubernetesAuthorizer, ReviewCache
from allocbridge.cluster.errors import UnavailableError
from allocbridge.cluster.reviews import ReviewedUser, Reviews, TokenVerdict
from allocbridge.telemetry import Metrics


class Outage:
    """An authorizer whose backend is down."""

    async def check(self, caller: Caller, capability: Capability, namespace: str) -> None:
        raise AuthUnavailableError("cannot review the token now: the API server answered 503")

    async def allowed_namespaces(
        self, caller: Caller, capability: Capability, candidates: Iterable[str]
    ) -> frozenset[str] | None:
        raise AuthUnavailableError("cannot review the token now: the API server answered 503")


class FlakyReviews:
    """Review calls fail as an unreachable API server does, until `down` is cleared."""

    def __init__(self) -> None:
        self.down = True
        self.calls = 0

    async def authenticate(self, token: str) -> TokenVerdict:
        self.calls += 1
        if self.down:
            raise UnavailableError("the API server is unreachable")
        return TokenVerdict(ReviewedUser(username="alice"))

    async def allowed(self, user: ReviewedUser, verb: str, namespace: str) -> bool:
        return True

    async def namespaces(self) -> tuple[str, ...]:
        return ("default",)


async def test_the_api_answers_503_with_the_reason_and_a_retry_hint() -> None:
    app = create_app(Metrics(), store=sample_store(), authorizer=Outage(), sync_timeout=1.0)
    test_client: TestClient[Any, Any] = TestClient(TestServer(app))
    await test_client.start_server()
    try:
        for path in ("/v1/allocations", f"/v1/allocation/{SAMPLE[0][0]}"):
            response = await test_client.get(path, headers={"X-Nomad-Token": "tok"})
            assert response.status == 503
            assert response.headers["Retry-After"] == "1"
            assert await response.text() == (
                "ACL check unavailable: cannot review the token now: the API server answered 503"
            )
    finally:
        await test_client.close()


async def test_an_unreachable_backend_is_unavailable_not_a_denial_and_not_cached() -> None:
    backend = FlakyReviews()
    auth = KubernetesAuthorizer(cache=ReviewCache(ttl=10.0), backend=backend)
    with pytest.raises(AuthUnavailableError, match="unreachable"):
        await auth.check(Caller("tok"), "read-job", "default")
    with pytest.raises(AuthUnavailableError):
        await auth.allowed_namespaces(Caller("tok"), "read-job", ["default"])
    backend.down = False
    await auth.check(Caller("tok"), "read-job", "default")  # asked again: nothing was cached
    assert backend.calls == 3


async def test_a_real_review_call_to_a_closed_port_is_unavailable() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    configuration = client.Configuration(host=f"https://127.0.0.1:{port}")
    async with client.ApiClient(configuration) as api:
        reviews = Reviews(api, timeout=5.0)
        with pytest.raises(UnavailableError, match="unreachable"):
            await reviews.authenticate("tok")
