"""The Kubernetes authorizer's caching and decision logic, without I/O.

The review calls are replaced by an in-memory `ReviewBackend` that counts them, and time by a
hand-driven clock; what Kubernetes itself answers is tested in tests/cluster/test_auth.py.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import types
from collections.abc import Iterable

import pytest

from allocbridge.auth import ALL_NAMESPACES, AuthUnavailableError, Caller, PermissionDeniedError
from allocbridge.auth.base import token_digest
from allocbridge.auth.kubernetes import (
    CLUSTER_WIDE,
    KubernetesAuthorizer,
    ReviewCache,
    TtlCache,
    token_expiry,
)
from allocbridge.cluster.reviews import ReviewedUser, TokenVerdict

TTL = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeReviews:
    """Tokens map to users; users to (verb, namespace) grants, "" meaning cluster-wide."""

    def __init__(self, namespaces: Iterable[str] = ("a", "b", "c")) -> None:
        self.users: dict[str, str] = {}
        self.grants: dict[str, set[tuple[str, str]]] = {}
        self.existing = tuple(namespaces)
        self.token_reviews: list[str] = []
        self.access_reviews: list[tuple[str, str, str]] = []
        self.namespace_lists = 0
        self.delay = 0.0
        self.fail: Exception | None = None

    def add(self, token: str, user: str, *grants: tuple[str, str]) -> None:
        self.users[token] = user
        self.grants.setdefault(user, set()).update(grants)

    async def authenticate(self, token: str) -> TokenVerdict:
        self.token_reviews.append(token)
        await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        user = self.users.get(token)
        if user is None:
            return TokenVerdict(None, "invalid bearer token")
        return TokenVerdict(ReviewedUser(username=user, groups=("system:authenticated",)))

    async def allowed(self, user: ReviewedUser, verb: str, namespace: str) -> bool:
        self.access_reviews.append((user.username, verb, namespace))
        await asyncio.sleep(self.delay)
        grants = self.grants.get(user.username, set())
        return (verb, namespace) in grants or (verb, CLUSTER_WIDE) in grants

    async def namespaces(self) -> tuple[str, ...]:
        self.namespace_lists += 1
        return self.existing


def authorizer(
    backend: FakeReviews, clock: Clock, *, namespaces: tuple[str, ...] = (), **cache: int
) -> KubernetesAuthorizer:
    return KubernetesAuthorizer(
        namespaces=namespaces,
        cache=ReviewCache(ttl=TTL, clock=clock, **cache),
        backend=backend,
        wall_clock=clock,
    )


def jwt(claims: dict[str, object]) -> str:
    def part(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


# -- TtlCache -----------------------------------------------------------------------------------


def test_entries_expire_after_their_ttl() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(10, TTL, clock=clock)
    cache.put("a", 1)
    cache.put("b", 2, ttl=2.0)
    clock.now += 1.9
    assert (cache.get("a"), cache.get("b")) == (1, 2)
    clock.now += 0.1
    assert (cache.get("a"), cache.get("b")) == (1, None)
    clock.now += TTL
    assert cache.get("a") is None
    assert len(cache) == 0


def test_a_ttl_never_exceeds_the_caches_and_nonpositive_stores_nothing() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(10, TTL, clock=clock)
    cache.put("long", 1, ttl=TTL * 100)
    cache.put("gone", 2, ttl=0)
    cache.put("past", 3, ttl=-5)
    assert "gone" not in cache and "past" not in cache
    clock.now += TTL
    assert cache.get("long") is None


def test_size_is_bounded_least_recently_used_goes_first() -> None:
    removed: list[str] = []
    cache: TtlCache[str, int] = TtlCache(3, TTL, clock=Clock(), on_remove=removed.append)
    for key in "abc":
        cache.put(key, ord(key))
    assert cache.get("a") == ord("a")  # now the most recently used
    cache.put("d", 4)
    assert len(cache) == 3
    assert removed == ["b"]
    assert cache.get("b") is None and cache.get("a") is not None
    with pytest.raises(ValueError):
        TtlCache(0, TTL)


# -- ReviewCache --------------------------------------------------------------------------------


def test_a_token_that_stops_authenticating_loses_every_decision() -> None:
    cache = ReviewCache(ttl=TTL, clock=Clock())
    alice, bob = token_digest("alice-token"), token_digest("bob-token")
    user = TokenVerdict(ReviewedUser("alice"))
    cache.remember_verdict(alice, user, TTL)
    for namespace in ("a", "b", ALL_NAMESPACES):
        cache.remember_decision(alice, "read-job", namespace, True)
    cache.remember_decision(bob, "read-job", "a", True)
    assert cache.decisions_for(alice) == 3
    cache.remember_verdict(alice, TokenVerdict(None, "token has been invalidated"), TTL)
    assert cache.decisions_for(alice) == 0
    assert cache.decision(alice, "read-job", "a") is None
    assert cache.verdict(alice) == TokenVerdict(None, "token has been invalidated")
    assert cache.decision(bob, "read-job", "a") is True  # other tokens keep theirs


def test_decisions_are_bounded_and_the_per_token_index_follows_evictions() -> None:
    cache = ReviewCache(ttl=TTL, clock=Clock(), max_decisions=4, max_tokens=2)
    token = token_digest("t")
    for index in range(10):
        cache.remember_decision(token, "read-job", f"ns-{index}", index % 2 == 0)
    assert len(cache.decisions) == 4
    assert cache.decisions_for(token) == 4
    assert cache.decision(token, "read-job", "ns-0") is None
    assert cache.decision(token, "read-job", "ns-8") is True
    assert cache.decision(token, "read-job", "ns-9") is False
    for name in ("x", "y", "z"):
        cache.remember_verdict(token_digest(name), TokenVerdict(ReviewedUser(name)), TTL)
    assert len(cache.verdicts) == 2
    cache.forget(token)
    assert len(cache.decisions) == 0 and cache.decisions_for(token) == 0


def test_the_caches_never_hold_the_token_itself() -> None:
    assert token_digest("secret") != b"secret" and len(token_digest("secret")) == 32
    assert token_digest("secret") == token_digest("secret") != token_digest("secret2")


def test_token_expiry_reads_a_jwt_exp_claim_only() -> None:
    assert token_expiry(jwt({"exp": 1234567890, "sub": "x"})) == 1234567890.0
    assert token_expiry(jwt({"sub": "no exp"})) is None
    assert token_expiry(jwt({"exp": True})) is None
    assert token_expiry("garbage") is None
    assert token_expiry("a.!!!.c") is None
    assert token_expiry("a.bm90IGpzb24.c") is None


# -- KubernetesAuthorizer ----------------------------------------------------------------------


def reachable_strings(root: object, skip: object) -> set[str]:
    """Every str reachable from `root`'s references, not through `skip` (the fake backend,
    which records the tokens it was asked about) nor through modules, types or functions."""
    seen: set[int] = {id(skip)}
    found: set[str] = set()
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, str):
            found.add(obj)
            continue
        todo.extend(gc.get_referents(obj))
    return found


async def test_no_map_of_the_authorizer_keeps_a_token_it_granted_or_denied() -> None:
    backend, clock = FakeReviews(), Clock()
    granted = "granted-token-" + "x" * 1000
    backend.add(granted, "alice", ("read-job", "a"))
    auth = authorizer(backend, clock)
    await auth.check(Caller(token=granted), "read-job", "a")
    assert auth.granted(Caller(token=granted), "read-job", "a")  # the caches grant it now
    with pytest.raises(PermissionDeniedError):
        await auth.check(Caller(token="denied-token"), "read-job", "a")
    held = reachable_strings(auth, skip=backend)
    assert "alice" in held  # the walk does reach the cached verdicts
    assert granted not in held and "denied-token" not in held


async def test_no_token_is_denied_without_asking() -> None:
    backend = FakeReviews()
    auth = authorizer(backend, Clock())
    for caller in (Caller(), Caller(token="")):
        with pytest.raises(PermissionDeniedError):
            await auth.check(caller, "read-job", "a")
    assert backend.token_reviews == [] and backend.access_reviews == []


async def test_reviews_are_cached_until_they_expire() -> None:
    backend, clock = FakeReviews(), Clock()
    backend.add("tok", "alice", ("read-job", "a"))
    auth = authorizer(backend, clock)
    for _ in range(3):
        await auth.check(Caller("tok"), "read-job", "a")
        with pytest.raises(PermissionDeniedError):
            await auth.check(Caller("tok"), "alloc-lifecycle", "a")
    assert backend.token_reviews == ["tok"]
    assert backend.access_reviews == [("alice", "read-job", "a"), ("alice", "alloc-lifecycle", "a")]
    clock.now += TTL
    await auth.check(Caller("tok"), "read-job", "a")
    assert len(backend.token_reviews) == 2 and len(backend.access_reviews) == 3


async def test_a_garbage_token_is_denied_and_its_verdict_cached() -> None:
    backend = FakeReviews()
    auth = authorizer(backend, Clock())
    for _ in range(3):
        with pytest.raises(PermissionDeniedError, match="invalid bearer token"):
            await auth.check(Caller("garbage"), "read-job", "a")
    assert backend.token_reviews == ["garbage"] and backend.access_reviews == []


async def test_a_token_that_stops_authenticating_is_denied_and_forgotten() -> None:
    backend, clock = FakeReviews(), Clock()
    backend.add("tok", "alice", ("read-job", "a"), ("read-job", "b"))
    auth = authorizer(backend, clock)
    await auth.check(Caller("tok"), "read-job", "a")
    await auth.check(Caller("tok"), "read-job", ALL_NAMESPACES)
    assert auth.cache.decisions_for(token_digest("tok")) > 0
    del backend.users["tok"]  # e.g. its ServiceAccount was deleted
    await auth.check(Caller("tok"), "read-job", "a")  # still within the TTL
    clock.now += TTL
    with pytest.raises(PermissionDeniedError):
        await auth.check(Caller("tok"), "read-job", "a")
    assert auth.cache.decisions_for(token_digest("tok")) == 0


async def test_a_verdict_is_not_cached_beyond_the_tokens_own_expiry() -> None:
    backend, clock = FakeReviews(), Clock()
    token = jwt({"exp": clock.now + 3})
    backend.add(token, "alice", ("read-job", "a"))
    auth = authorizer(backend, clock)
    await auth.check(Caller(token), "read-job", "a")
    clock.now += 3
    del backend.users[token]  # the API server now says it expired
    with pytest.raises(PermissionDeniedError):
        await auth.check(Caller(token), "read-job", "a")
    assert len(backend.token_reviews) == 2


async def test_every_namespace_means_some_namespace_and_then_filters() -> None:
    backend = FakeReviews(namespaces=("a", "b", "c", "quiet"))
    backend.add("admin", "admin", ("read-job", CLUSTER_WIDE))
    backend.add("team-a", "team-a", ("read-job", "a"))
    backend.add("quiet", "quiet", ("read-job", "quiet"))
    backend.add("nobody", "nobody")
    auth = authorizer(backend, Clock())
    with_allocations = ["a", "b", "c"]

    await auth.check(Caller("admin"), "read-job", ALL_NAMESPACES)
    assert await auth.allowed_namespaces(Caller("admin"), "read-job", with_allocations) is None

    await auth.check(Caller("team-a"), "read-job", ALL_NAMESPACES)
    allowed = await auth.allowed_namespaces(Caller("team-a"), "read-job", with_allocations)
    assert allowed == frozenset({"a"})

    # A grant only where there is nothing to see: allowed, and an empty list.
    await auth.check(Caller("quiet"), "read-job", ALL_NAMESPACES)
    allowed = await auth.allowed_namespaces(Caller("quiet"), "read-job", with_allocations)
    assert allowed == frozenset()

    with pytest.raises(PermissionDeniedError):
        await auth.check(Caller("nobody"), "read-job", ALL_NAMESPACES)
    with pytest.raises(PermissionDeniedError):
        await auth.check(Caller("team-a"), "alloc-exec", ALL_NAMESPACES)
    assert backend.namespace_lists == 1  # the namespace list is cached too


async def test_configured_namespaces_bound_the_search_for_a_grant() -> None:
    backend = FakeReviews(namespaces=("a", "b", "elsewhere"))
    backend.add("tok", "bob", ("read-job", "elsewhere"))
    auth = authorizer(backend, Clock(), namespaces=("a", "b"))
    with pytest.raises(PermissionDeniedError):
        await auth.check(Caller("tok"), "read-job", ALL_NAMESPACES)
    assert backend.namespace_lists == 0
    assert {ns for _, _, ns in backend.access_reviews} == {CLUSTER_WIDE, "a", "b"}


async def test_concurrent_identical_reviews_are_made_once() -> None:
    backend = FakeReviews()
    backend.delay = 0.01
    backend.add("tok", "alice", ("read-job", "a"))
    auth = authorizer(backend, Clock())
    await asyncio.gather(*(auth.check(Caller("tok"), "read-job", "a") for _ in range(20)))
    assert len(backend.token_reviews) == 1 and len(backend.access_reviews) == 1


async def test_a_failure_to_ask_is_an_error_not_a_denial_and_is_not_cached() -> None:
    backend = FakeReviews()
    backend.add("tok", "alice", ("read-job", "a"))
    backend.fail = ConnectionError("API server unreachable")
    auth = authorizer(backend, Clock())
    with pytest.raises(ConnectionError):
        await auth.check(Caller("tok"), "read-job", "a")
    backend.fail = None
    await auth.check(Caller("tok"), "read-job", "a")


async def test_before_credentials_requests_wait_then_are_told_to_retry() -> None:
    backend = FakeReviews()
    backend.add("tok", "alice", ("read-job", "a"))
    auth = KubernetesAuthorizer(credentials_wait=0.01)
    with pytest.raises(AuthUnavailableError, match="credentials are not loaded"):
        await auth.check(Caller("tok"), "read-job", "a")
    auth.credentials_wait = 5.0
    waiting = asyncio.create_task(auth.check(Caller("tok"), "read-job", "a"))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    auth.use(backend)
    await asyncio.wait_for(waiting, 1)
