"""TokenReview and SubjectAccessReview calls, made with the operator's own credentials.

The API authorizer (`allocbridge.auth.kubernetes`) asks Kubernetes two questions: who holds
this bearer token (TokenReview), and may that user do this verb on `allocations` in that
namespace (SubjectAccessReview). Both are create calls on review resources that store nothing;
the operator's ClusterRole grants them (manifests/rbac.yaml). Raw JSON, as everywhere in
`allocbridge.cluster`; failures of the calls themselves raise, because "Kubernetes could not be
asked" is not a denial: `UnavailableError` when trying again later may work (no connection, a
timeout, a 5xx or 429), another `KubernetesError` otherwise (e.g. `ForbiddenError`: the
operator lacking RBAC on the review resources, a configuration fault).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes_asyncio import client

from allocbridge.cluster.connection import Credentials
from allocbridge.cluster.resources import GROUP, PLURAL, raw_json

#: Seconds one review call may take; a slow API server must not park API requests forever.
REVIEW_TIMEOUT: Final = 10.0


@dataclass(frozen=True)
class ReviewedUser:
    """An authenticated user as TokenReview reports it; SubjectAccessReview needs all of it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenVerdict:
    """The outcome of a TokenReview: `user` when authenticated, else the API server's reason."""

    user: ReviewedUser | None
    error: str = ""


class Reviews:
    """The review calls on one ApiClient (bound to the caller's event loop)."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        timeout: float = REVIEW_TIMEOUT,
        audiences: tuple[str, ...] = (),
    ) -> None:
        self.timeout = timeout
        self.audiences = audiences  # empty: the API server's own audience
        # Typed as Any: raw JSON bodies in and out, which the generated stubs do not model.
        self.authentication: Any = client.AuthenticationV1Api(api)
        self.authorization: Any = client.AuthorizationV1Api(api)
        self.core: Any = client.CoreV1Api(api)
        self._owned: client.ApiClient | None = None  # closed by `close`

    @classmethod
    def connect(cls, credentials: Credentials, *, audiences: tuple[str, ...] = ()) -> Reviews:
        """Reviews on a client of their own (bound to the calling event loop); `close` it."""
        api = credentials.api_client()
        reviews = cls(api, audiences=audiences)
        reviews._owned = api
        return reviews

    async def close(self) -> None:
        """Release the client `connect` made (a client passed in stays its owner's)."""
        if self._owned is not None:
            await self._owned.close()
            self._owned = None

    async def authenticate(self, token: str) -> TokenVerdict:
        spec: dict[str, Any] = {"token": token}
        if self.audiences:
            spec["audiences"] = list(self.audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        review = await raw_json(
            self.authentication.create_token_review(
                body, _preload_content=False, _request_timeout=self.timeout
            )
        )
        status = review.get("status") or {}
        user = status.get("user") or {}
        if not status.get("authenticated") or not user.get("username"):
            return TokenVerdict(None, str(status.get("error") or "token not authenticated"))
        # An authenticator that ignores audiences answers none; TokenReview's contract says
        # the client must then not trust the token for its own audiences.
        if self.audiences and not set(status.get("audiences") or ()) & set(self.audiences):
            return TokenVerdict(None, f"token is not meant for audiences {list(self.audiences)}")
        extra = {
            str(key): tuple(str(v) for v in values or ())
            for key, values in (user.get("extra") or {}).items()
        }
        return TokenVerdict(
            ReviewedUser(
                username=str(user["username"]),
                uid=str(user.get("uid") or ""),
                groups=tuple(str(g) for g in user.get("groups") or ()),
                extra=extra,
            )
        )

    async def allowed(self, user: ReviewedUser, verb: str, namespace: str) -> bool:
        """May `user` do `verb` on `allocations.allocbridge.io` in `namespace`?

        An empty namespace asks about every namespace at once: only cluster-wide grants
        (ClusterRoleBindings) answer yes to that.
        """
        spec: dict[str, Any] = {
            "user": user.username,
            "groups": list(user.groups),
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "group": GROUP,
                "resource": PLURAL,
            },
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {key: list(values) for key, values in user.extra.items()}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        review = await raw_json(
            self.authorization.create_subject_access_review(
                body, _preload_content=False, _request_timeout=self.timeout
            )
        )
        return bool((review.get("status") or {}).get("allowed"))

    async def namespaces(self) -> tuple[str, ...]:
        """Names of the namespaces that exist: where a namespace-scoped grant can live."""
        listed = await raw_json(
            self.core.list_namespace(_preload_content=False, _request_timeout=self.timeout)
        )
        return tuple(
            str(item["metadata"]["name"])
            for item in listed.get("items", [])
            if (item.get("metadata") or {}).get("name")
        )
