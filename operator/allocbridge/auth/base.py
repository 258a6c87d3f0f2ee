"""The authorization contract: a caller, a capability, a namespace; allowed or denied.

Capabilities are Nomad's namespace capability names; the Kubernetes implementation checks each
as the verb of the same name on `allocations.allocbridge.io` (design.md section 4).

Namespace `*` follows Nomad's `AllowNamespaceOperation`: `check(caller, cap, "*")` passes when
*some* namespace grants the capability; `allowed_namespaces` then says which ones, so a
`namespace=*` list shows only what the caller may read.

Authentication failures (an unknown or expired token) are denials too: Nomad answers them with
the same 403 `Permission denied`. When the decision cannot be made right now (credentials not
loaded yet, the Kubernetes API unreachable, timing out or overloaded), the authorizer raises
`AuthUnavailableError` and the API answers 503, so a client retries instead of taking a 403 for
a verdict. Any other exception is an internal fault, neither a denial nor an outage.

No aiohttp here: the token may come from a header or from the exec WebSocket's first frame, so
handlers extract it and pass a `Caller`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, Protocol, runtime_checkable

Capability = Literal[
    "read-job",
    "alloc-lifecycle",
    "alloc-exec",
    "alloc-node-exec",
    "job-submit",
    "read-logs",
    "read-fs",
]

READ_JOB: Final = "read-job"
ALLOC_LIFECYCLE: Final = "alloc-lifecycle"
ALLOC_EXEC: Final = "alloc-exec"
ALLOC_NODE_EXEC: Final = "alloc-node-exec"
JOB_SUBMIT: Final = "job-submit"
READ_LOGS: Final = "read-logs"
READ_FS: Final = "read-fs"

#: Nomad's wildcard namespace: "any namespace" in `check`, "every namespace" in a list.
ALL_NAMESPACES: Final = "*"


class PermissionDeniedError(Exception):
    """The caller may not do this (or could not be authenticated); the API answers 403."""

    def __init__(self, reason: str = "Permission denied") -> None:
        # The reason is for logs; the HTTP body is always Nomad's exact `Permission denied`.
        super().__init__(reason)
        self.reason = reason


class AuthUnavailableError(Exception):
    """No decision can be made now (the API answers 503); the reason is for logs and the body."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def token_digest(token: str) -> bytes:
    """What an authorizer's caches are keyed by: a digest, so they never hold a usable token."""
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class Caller:
    """Whoever made the request. A dataclass (not a bare token) so fields can be added later."""

    token: str | None = None  # None: anonymous

    @property
    def digest(self) -> bytes:
        """`token_digest` of the token, computed once however many checks a request makes.

        Kept in the instance's `__dict__` by hand: `functools.cached_property` takes a lock on
        every access in Python 3.11, which cost more than the cached check it served."""
        found: bytes | None = self.__dict__.get("_digest")
        if found is None:
            found = token_digest(self.token or "")
            object.__setattr__(self, "_digest", found)
        return found


class Authorizer(Protocol):
    """Decides capabilities. Implementations must be safe to call concurrently."""

    async def check(self, caller: Caller, capability: Capability, namespace: str) -> None:
        """Return if `caller` has `capability` in `namespace` (or in some namespace for `*`);
        raise `PermissionDeniedError` otherwise."""

    async def allowed_namespaces(
        self, caller: Caller, capability: Capability, candidates: Iterable[str]
    ) -> frozenset[str] | None:
        """The subset of `candidates` where `caller` has `capability`; None means every
        namespace, with no need to filter (ACLs off, or a cluster-wide grant)."""


@runtime_checkable
class GrantsAtOnce(Protocol):
    """An authorizer that can say without waiting that a request is allowed: what the API's
    read shortcut (`api.shortcut`) asks before answering without a task of its own."""

    def granted(self, caller: Caller, capability: Capability, namespace: str) -> bool:
        """True when `check` would pass without I/O (a warm cache, or no ACL); False means
        only "not known at once": `check` decides then."""


class AllowAll:
    """Everything is allowed: `acl { enabled = false }`, the dev default."""

    async def check(self, caller: Caller, capability: Capability, namespace: str) -> None:
        return None

    def granted(self, caller: Caller, capability: Capability, namespace: str) -> bool:
        return True

    async def allowed_namespaces(
        self, caller: Caller, capability: Capability, candidates: Iterable[str]
    ) -> frozenset[str] | None:
        return None


def extract_token(headers: Mapping[str, str]) -> str | None:
    """The request's token as Nomad's `parseToken` reads it; first match wins.

    1. `X-Nomad-Token`, trimmed.
    2. `Authorization: Bearer <token>`: the scheme is case-insensitive and the token is the
       first space-separated word after it.
    An empty token means anonymous (None).
    """
    nomad = headers.get("X-Nomad-Token", "")
    if nomad:
        return nomad.strip() or None
    authorization = headers.get("Authorization", "")
    if authorization:
        parts = authorization.split(" ")
        if len(parts) >= 2 and parts[0].lower() == "bearer":
            return parts[1].strip() or None
    return None
