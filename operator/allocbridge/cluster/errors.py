"""Kubernetes' failures as the rest of the operator sees them: one type per answer that matters.

Code above `cluster` never sees kubernetes_asyncio's `ApiException` nor branches on HTTP
statuses: `cluster` raises these, and callers catch the kind they can act on. Every one is a
`KubernetesError`, whose `status` (the API server's HTTP status, None when there was no answer)
and `message` stay for logs. The kinds:

- `RefusedError`: the API server answered no (a 4xx), and asking again the same way will not
  change that. Its more precise kinds: `NotFoundError` (404), `ForbiddenError` (403),
  `ConflictError` (409: it exists already, or a precondition such as a resourceVersion failed),
  `GoneError` (410: a watch's resourceVersion is too old).
- `UnavailableError`: no answer (no connection, a timeout), or one saying "later" (429, 5xx).
"""

from __future__ import annotations

from typing import Final

import aiohttp
import orjson

#: Statuses that mean "the API server could not answer now" (beside every 5xx).
_TRY_LATER: Final = frozenset({429})

#: What a call that got no answer raises below `cluster` (TimeoutError is an OSError).
NO_ANSWER: Final = (aiohttp.ClientError, OSError)


class KubernetesError(Exception):
    """A call to the Kubernetes API failed; `status` is its HTTP status (None: no answer)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class RefusedError(KubernetesError):
    """The API server refused the request (a 4xx): not a passing fault."""


class NotFoundError(RefusedError):
    """The object (or its kind, or the container asked for) does not exist: 404."""


class ForbiddenError(RefusedError):
    """The operator's credentials may not do this: 403."""


class ConflictError(RefusedError):
    """The object exists already, or changed since it was read (a failed precondition): 409."""


class GoneError(RefusedError):
    """The resourceVersion asked for is too old for the API server to answer from: 410."""


class UnavailableError(KubernetesError):
    """The API server could not be reached or asked to come back later: trying again may work."""


_BY_STATUS: Final[dict[int, type[RefusedError]]] = {
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
}


def from_status(status: int | None, message: str) -> KubernetesError:
    """The error for an API server's answer with HTTP `status` (None: it did not answer)."""
    if status is None or status >= 500 or status in _TRY_LATER:
        return UnavailableError(message, status=status)
    if 400 <= status < 500:
        return _BY_STATUS.get(status, RefusedError)(message, status=status)
    return KubernetesError(message, status=status)


def from_answer(status: int, reason: str | None, body: bytes) -> KubernetesError:
    """The error for a failed answer: the message of its `Status` body when it has one."""
    message = ""
    try:
        decoded = orjson.loads(body)
        if isinstance(decoded, dict) and isinstance(decoded.get("message"), str):
            message = decoded["message"]
    except orjson.JSONDecodeError:
        message = body.decode("utf-8", "replace").strip()[:500]
    return from_status(status, message or f"{status} {reason or ''}".strip())


def unreachable(exc: BaseException) -> UnavailableError:
    """The error for a call that got no answer (a connection, TLS or timeout failure)."""
    return UnavailableError(f"the Kubernetes API is unreachable: {str(exc) or type(exc).__name__}")
