"""The Kubernetes-backed authorizer: bearer tokens are Kubernetes tokens, capabilities are RBAC.

A TokenReview says who holds the token; a SubjectAccessReview decides each capability, asked
as the verb of the same name (`read-job`, `alloc-lifecycle`, `alloc-exec`, `alloc-node-exec`,
`job-submit`, `read-logs`, `read-fs`) on `allocations.allocbridge.io` in the namespace
(design.md section 4). Both calls use the operator's own credentials; the caller's token is only
ever the subject of a review.

Rules:

- No token, or one the API server does not authenticate (garbage, expired, its ServiceAccount
  deleted, minted for another audience than `acl { audiences }`): denied, 403 `Permission
  denied`, as Nomad answers any authentication failure.
- `check(..., "*")` is Nomad's "allowed in *some* namespace": a cluster-wide grant, or a grant
  in any namespace that exists (only the configured ones when `kubernetes { namespaces }` is
  set). `allowed_namespaces` answers None for a cluster-wide grant, else asks per namespace.
- Until the process has loaded its Kubernetes credentials nothing can be reviewed: a request
  waits up to `credentials_wait` seconds for them, then gets `AuthUnavailableError` (503).
- Failures to *ask* are never a silent allow or deny: an API server that is down, slow or
  overloaded gives `AuthUnavailableError` (503, try again); anything else (say the operator
  lacking RBAC on the review resources) raises as it is (500, logged).

Caching: reviews are cached for `ttl` seconds (10 by default) in bounded LRU maps, token
verdicts per token and decisions per (token, capability, namespace), keyed by a SHA-256 of the
token so the maps never hold secrets. A token's verdict lives no longer than the token itself
(its JWT `exp`, when it has one). When a token stops authenticating, every decision cached for
it is dropped. Identical reviews in flight at the same time are made once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import Any, Final, Generic, Protocol, TypeVar, cast

from allocbridge.auth.base import (
    ALL_NAMESPACES,
    AuthUnavailableError,
    Caller,
    Capability,
    PermissionDeniedError,
)
from allocbridge.cluster.connection import Credentials
from allocbridge.cluster.errors import UnavailableError
from allocbridge.cluster.reviews import ReviewedUser, Reviews, TokenVerdict

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")

#: Seconds a review is trusted: long enough to spare the API server, short enough that a
#: revoked binding or a deleted ServiceAccount takes effect quickly.
DEFAULT_TTL: Final = 10.0
DEFAULT_MAX_TOKENS: Final = 1024
DEFAULT_MAX_DECISIONS: Final = 8192
#: Seconds a request waits for the process's Kubernetes credentials before it is denied.
CREDENTIALS_WAIT: Final = 10.0
#: SubjectAccessReviews in flight at once when one request needs a review per namespace.
NAMESPACE_CONCURRENCY: Final = 8

#: The namespace key of a cluster-wide review (a SubjectAccessReview without a namespace).
CLUSTER_WIDE: Final = ""

TokenKey = bytes  # `Caller.digest`: the caches never hold a usable token


def token_expiry(token: str) -> float | None:
    """The `exp` claim (Unix seconds) of a JWT, read without verifying it.

    Used only to shorten how long a verdict is cached: the TokenReview has already vouched
    for the token, so its `exp` is genuine, and a bogus one could only shorten the cache time.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload_part = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        payload = json.loads(base64.urlsafe_b64decode(payload_part))
    except (ValueError, binascii.Error):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    return float(exp)


class TtlCache(Generic[K, V]):
    """A bounded LRU map whose entries also expire; `on_remove` hears of every removal.

    Expired entries go when looked up or when the least recently used ones are evicted, so the
    size bound holds at all times without a sweeper task.
    """

    def __init__(
        self,
        max_entries: int,
        ttl: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_remove: Callable[[K], None] | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self.ttl = ttl
        self.clock = clock
        self.on_remove = on_remove
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if self.clock() >= expires:
            self.pop(key)
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V, ttl: float | None = None) -> None:
        """Store `value` for `ttl` seconds (the cache's own TTL by default; <= 0 stores nothing)."""
        lifetime = self.ttl if ttl is None else min(ttl, self.ttl)
        if lifetime <= 0:
            self.pop(key)
            return
        self._entries[key] = (self.clock() + lifetime, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            oldest, _ = self._entries.popitem(last=False)
            if self.on_remove is not None:
                self.on_remove(oldest)

    def pop(self, key: K) -> None:
        if self._entries.pop(key, None) is not None and self.on_remove is not None:
            self.on_remove(key)


DecisionKey = tuple[TokenKey, str, str]  # (token, capability, namespace)


class ReviewCache:
    """Token verdicts and access decisions, each bounded in size and time."""

    def __init__(
        self,
        *,
        ttl: float = DEFAULT_TTL,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_decisions: int = DEFAULT_MAX_DECISIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.verdicts: TtlCache[TokenKey, TokenVerdict] = TtlCache(max_tokens, ttl, clock=clock)
        self.decisions: TtlCache[DecisionKey, bool] = TtlCache(
            max_decisions, ttl, clock=clock, on_remove=self._unindex
        )
        self._by_token: dict[TokenKey, set[DecisionKey]] = {}

    def verdict(self, token: TokenKey) -> TokenVerdict | None:
        return self.verdicts.get(token)

    def remember_verdict(self, token: TokenKey, verdict: TokenVerdict, ttl: float) -> None:
        """Cache a TokenReview outcome; a token that does not authenticate loses its decisions."""
        if verdict.user is None:
            self.forget(token)
        self.verdicts.put(token, verdict, ttl)

    def decision(self, token: TokenKey, capability: str, namespace: str) -> bool | None:
        return self.decisions.get((token, capability, namespace))

    def remember_decision(
        self, token: TokenKey, capability: str, namespace: str, allowed: bool
    ) -> None:
        key = (token, capability, namespace)
        self.decisions.put(key, allowed)
        if key in self.decisions:
            self._by_token.setdefault(token, set()).add(key)

    def forget(self, token: TokenKey) -> None:
        """Drop everything cached for `token` (its verdict included)."""
        for key in list(self._by_token.get(token, ())):
            self.decisions.pop(key)
        self._by_token.pop(token, None)
        self.verdicts.pop(token)

    def decisions_for(self, token: TokenKey) -> int:
        return len(self._by_token.get(token, ()))

    def _unindex(self, key: DecisionKey) -> None:
        keys = self._by_token.get(key[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_token[key[0]]


class ReviewBackend(Protocol):
    """What the authorizer asks Kubernetes (`allocbridge.cluster.reviews.Reviews`)."""

    async def authenticate(self, token: str) -> TokenVerdict: ...

    async def allowed(self, user: ReviewedUser, verb: str, namespace: str) -> bool: ...

    async def namespaces(self) -> tuple[str, ...]: ...


class KubernetesAuthorizer:
    """The `Authorizer` of `acl { enabled = true }`: TokenReview plus SubjectAccessReview.

    Created before the process has credentials (the API listener starts first); `connect`
    hands it the credentials once they are loaded, `close` releases its client.
    """

    def __init__(
        self,
        *,
        namespaces: Sequence[str] = (),
        audiences: Sequence[str] = (),
        cache: ReviewCache | None = None,
        backend: ReviewBackend | None = None,
        credentials_wait: float = CREDENTIALS_WAIT,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.namespaces = tuple(namespaces)  # the watched ones; empty: every namespace
        self.audiences = tuple(audiences)  # accepted token audiences; empty: the API server's
        self.cache = cache or ReviewCache()
        self.credentials_wait = credentials_wait
        self.wall_clock = wall_clock
        self._backend = backend
        self._reviews: Reviews | None = None  # the ones `connect` made, closed by `close`
        self._ready = asyncio.Event()
        if backend is not None:
            self._ready.set()
        self._inflight: dict[Hashable, asyncio.Future[Any]] = {}
        self._universe: tuple[float, tuple[str, ...]] | None = None

    def connect(self, credentials: Credentials) -> None:
        """Start reviewing with the process's credentials (call on the API's event loop)."""
        if self._backend is not None:
            return
        self._reviews = Reviews.connect(credentials, audiences=self.audiences)
        self.use(self._reviews)
        log.info("API requests are authorized by Kubernetes token and access reviews")

    def use(self, backend: ReviewBackend) -> None:
        self._backend = backend
        self._ready.set()

    async def close(self) -> None:
        if self._reviews is not None:
            await self._reviews.close()
            self._reviews = None

    async def check(self, caller: Caller, capability: Capability, namespace: str) -> None:
        if self.granted(caller, capability, namespace):
            return
        try:
            token, user = await self._authenticate(caller)
            if namespace == ALL_NAMESPACES:
                allowed = await self._anywhere(token, user, capability)
            else:
                allowed = await self._allowed(token, user, capability, namespace)
        except UnavailableError as exc:
            raise AuthUnavailableError(f"cannot review the token now: {exc}") from exc
        if not allowed:
            raise PermissionDeniedError(
                f"{user.username} may not {capability} allocations in namespace {namespace!r}"
            )

    async def allowed_namespaces(
        self, caller: Caller, capability: Capability, candidates: Iterable[str]
    ) -> frozenset[str] | None:
        if self.granted(caller, capability, CLUSTER_WIDE):
            return None
        try:
            return await self._allowed_namespaces(caller, capability, candidates)
        except UnavailableError as exc:
            raise AuthUnavailableError(f"cannot review the token now: {exc}") from exc

    def granted(self, caller: Caller, capability: str, namespace: str) -> bool:
        """True when the caches alone grant it: a token already reviewed and allowed.

        The path of nearly every request, taken without a coroutine; anything else (a miss, a
        denial, no token) goes the whole way, which reviews, caches and explains.
        """
        if not caller.token:
            return False
        digest = caller.digest
        verdict = self.cache.verdict(digest)
        return (
            verdict is not None
            and verdict.user is not None
            and self.cache.decision(digest, capability, namespace) is True
        )

    async def _allowed_namespaces(
        self, caller: Caller, capability: Capability, candidates: Iterable[str]
    ) -> frozenset[str] | None:
        token, user = await self._authenticate(caller)
        if await self._allowed(token, user, capability, CLUSTER_WIDE):
            return None
        names = sorted(set(candidates) - {CLUSTER_WIDE})
        allowed: set[str] = set()
        for start in range(0, len(names), NAMESPACE_CONCURRENCY):
            chunk = names[start : start + NAMESPACE_CONCURRENCY]
            verdicts = await asyncio.gather(
                *(self._allowed(token, user, capability, ns) for ns in chunk)
            )
            allowed.update(ns for ns, ok in zip(chunk, verdicts, strict=True) if ok)
        return frozenset(allowed)

    async def _backend_ready(self) -> ReviewBackend:
        if self._backend is None:
            try:
                await asyncio.wait_for(self._ready.wait(), self.credentials_wait)
            except TimeoutError:
                log.warning("request refused: Kubernetes credentials are not loaded yet")
                raise AuthUnavailableError(
                    "cannot review tokens yet: the Kubernetes credentials are not loaded"
                ) from None
        assert self._backend is not None  # set together with _ready
        return self._backend

    async def _authenticate(self, caller: Caller) -> tuple[TokenKey, ReviewedUser]:
        if not caller.token:
            raise PermissionDeniedError("no token (ACLs are enabled)")
        raw = caller.token
        backend = await self._backend_ready()
        key = caller.digest
        verdict = self.cache.verdict(key)
        if verdict is None:

            async def review() -> TokenVerdict:
                found = await backend.authenticate(raw)
                self.cache.remember_verdict(key, found, self._verdict_ttl(raw, found))
                return found

            verdict = await self._shared(("token", key), review)
        if verdict.user is None:
            raise PermissionDeniedError(f"token not authenticated: {verdict.error}")
        return key, verdict.user

    def _verdict_ttl(self, token: str, verdict: TokenVerdict) -> float:
        expiry = token_expiry(token) if verdict.user is not None else None
        if expiry is None:
            return self.cache.ttl
        return min(self.cache.ttl, expiry - self.wall_clock())

    async def _allowed(
        self, token: TokenKey, user: ReviewedUser, capability: str, namespace: str
    ) -> bool:
        cached = self.cache.decision(token, capability, namespace)
        if cached is not None:
            return cached
        backend = await self._backend_ready()

        async def review() -> bool:
            allowed = await backend.allowed(user, capability, namespace)
            self.cache.remember_decision(token, capability, namespace, allowed)
            return allowed

        return await self._shared(("access", token, capability, namespace), review)

    async def _anywhere(self, token: TokenKey, user: ReviewedUser, capability: str) -> bool:
        """Nomad's `*`: a cluster-wide grant, else a grant in any namespace that exists."""
        cached = self.cache.decision(token, capability, ALL_NAMESPACES)
        if cached is not None:
            return cached
        found = await self._allowed(token, user, capability, CLUSTER_WIDE)
        if not found:
            names = await self._namespace_universe()
            for start in range(0, len(names), NAMESPACE_CONCURRENCY):
                chunk = names[start : start + NAMESPACE_CONCURRENCY]
                verdicts = await asyncio.gather(
                    *(self._allowed(token, user, capability, ns) for ns in chunk)
                )
                if any(verdicts):
                    found = True
                    break
        self.cache.remember_decision(token, capability, ALL_NAMESPACES, found)
        return found

    async def _namespace_universe(self) -> tuple[str, ...]:
        """The namespaces a grant can come from: the configured ones, else all that exist."""
        if self.namespaces:
            return self.namespaces
        now = self.cache.decisions.clock()
        if self._universe is not None and now < self._universe[0]:
            return self._universe[1]
        backend = await self._backend_ready()
        names = tuple(sorted(await backend.namespaces()))
        self._universe = (now + self.cache.ttl, names)
        return names

    async def _shared(self, key: Hashable, make: Callable[[], Awaitable[T]]) -> T:
        """Run `make()` once for concurrent callers with the same key; all get its outcome."""
        future = self._inflight.get(key)
        if future is None:
            future = asyncio.ensure_future(make())
            self._inflight[key] = future
            future.add_done_callback(lambda done: self._settled(key, done))
        return cast(T, await asyncio.shield(future))

    def _settled(self, key: Hashable, done: asyncio.Future[Any]) -> None:
        if self._inflight.get(key) is done:
            del self._inflight[key]
        if not done.cancelled():
            done.exception()  # retrieved: every waiter may have been cancelled meanwhile
