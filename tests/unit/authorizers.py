"""Authorizer stand-ins for the unit tests of endpoints (the real one, backed by Kubernetes
reviews, is tested in tests/cluster/test_auth.py)."""

from __future__ import annotations

from typing import Any

from allocbridge.auth import Caller, Capability, PermissionDeniedError


class GrantsOnly:
    """Grants `capability` in every namespace and nothing else."""

    def __init__(self, capability: str) -> None:
        self.capability = capability

    async def check(self, caller: Caller, capability: Capability, namespace: str) -> None:
        if capability != self.capability:
            raise PermissionDeniedError("no")

    async def allowed_namespaces(self, *args: Any) -> frozenset[str] | None:
        return None
