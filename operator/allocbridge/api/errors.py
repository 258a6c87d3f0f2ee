"""What each failure of a `/v1` request answers, decided in one place.

Handlers, the query parsers and the actions raise `NomadError(status, message)` with Nomad's
text; the authorizer's `PermissionDeniedError` (403) and `AuthUnavailableError` (503) escape as
they are (`auth/base.py` says why they are not status codes), and so does `cluster`'s
`UnavailableError` when Kubernetes did not answer an action (503: trying again may work).
`failure` turns any of them into
a `Failure`; `api.answers` sends it as Nomad does (a plain-text body holding exactly the
message, `text/plain; charset=utf-8`, no trailing newline) and `api.exec`, past its WebSocket
upgrade, as a close frame. Anything else is an internal fault: logged with its traceback,
answered 500 without internals.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from allocbridge.auth import AuthUnavailableError, PermissionDeniedError
from allocbridge.cluster.errors import UnavailableError
from allocbridge.model.errors import NomadError

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_METHOD",
    "PERMISSION_DENIED",
    "RESOURCE_NOT_FOUND",
    "Failure",
    "NomadError",
    "failure",
]

INVALID_METHOD: Final = "Invalid method"
RESOURCE_NOT_FOUND: Final = "resource not found"
PERMISSION_DENIED: Final = "Permission denied"
INTERNAL_ERROR: Final = "Internal error: see the allocbridge log"


@dataclass(frozen=True)
class Failure:
    """How a request that failed is answered, and how it is logged."""

    status: int
    message: str  # the answer's text
    headers: Mapping[str, str] = field(default_factory=dict)
    index: int | None = None  # adds the read metadata headers (see `NomadError`)
    level: int = logging.DEBUG
    event: str = "request failed"  # the log line
    detail: str = ""  # the log's error field, when it says more than `message`
    traceback: bool = False  # an internal fault: logged with its traceback

    @property
    def retry_later(self) -> bool:
        """A passing outage (the authorizer's): the client should try again soon."""
        return "Retry-After" in self.headers


def failure(exc: Exception) -> Failure:
    """The answer to `exc`; a 500 for anything that is not one of the known failures."""
    if isinstance(exc, NomadError):
        level = logging.ERROR if exc.status >= 500 else logging.DEBUG
        return Failure(exc.status, exc.message, exc.headers, exc.index, level)
    if isinstance(exc, PermissionDeniedError):
        return Failure(403, PERMISSION_DENIED, event="permission denied", detail=exc.reason)
    if isinstance(exc, AuthUnavailableError):
        return _passing_outage("ACL check unavailable", "authorization unavailable", exc.reason)
    if isinstance(exc, UnavailableError):
        return _passing_outage("Kubernetes unavailable", "kubernetes unavailable", str(exc))
    return Failure(500, INTERNAL_ERROR, level=logging.ERROR, event="internal error", traceback=True)


def _passing_outage(what: str, event: str, reason: str) -> Failure:
    """A 503 asking the client to try again in a second: something below us did not answer."""
    return Failure(
        503,
        f"{what}: {reason}",
        {"Retry-After": "1"},
        level=logging.WARNING,
        event=event,
        detail=reason,
    )
