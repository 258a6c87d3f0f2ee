"""API errors and the one place that turns them into responses.

Handlers raise `ApiError(status, message)` (or let `PermissionDeniedError`, 403, or
`AuthUnavailableError`, 503, escape from the authorizer); `error_middleware` renders them as
Nomad does: a plain-text body holding exactly the message, `text/plain; charset=utf-8`, no
trailing newline. Anything else that escapes a handler is an internal fault: logged with its
traceback, answered 500 without internals.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

from allocbridge.actions.lifecycle import ActionError
from allocbridge.auth import AuthUnavailableError, PermissionDeniedError

log = logging.getLogger(__name__)

INVALID_METHOD: Final = "Invalid method"
RESOURCE_NOT_FOUND: Final = "resource not found"
PERMISSION_DENIED: Final = "Permission denied"
INTERNAL_ERROR: Final = "Internal error: see the allocbridge log"


class ApiError(Exception):
    """A request that ends with `status` and a plain-text `message` (Nomad's texts)."""

    def __init__(
        self, status: int, message: str, *, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


def text_response(
    status: int, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status,
        text=message,
        content_type="text/plain",
        charset="utf-8",
        headers=headers,
    )


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map every error a handler raises to its response (4xx logged at debug, 5xx at error)."""
    try:
        return await handler(request)
    except ApiError as exc:
        level = logging.ERROR if exc.status >= 500 else logging.DEBUG
        log.log(level, "request failed", extra=_fields(request, exc.status, exc.message))
        return text_response(exc.status, exc.message, exc.headers)
    except PermissionDeniedError as exc:
        log.debug("permission denied", extra=_fields(request, 403, exc.reason))
        return text_response(403, PERMISSION_DENIED)
    except AuthUnavailableError as exc:
        log.warning("authorization unavailable", extra=_fields(request, 503, exc.reason))
        return text_response(503, f"ACL check unavailable: {exc.reason}", {"Retry-After": "1"})
    except ActionError as exc:
        level = logging.ERROR if exc.status >= 500 else logging.DEBUG
        log.log(level, "action failed", extra=_fields(request, exc.status, exc.message))
        return text_response(exc.status, exc.message)
    except web.HTTPException:
        raise  # aiohttp's own (for example a request body too large) answer themselves
    except Exception:
        log.exception("internal error", extra=_fields(request, 500, ""))
        return text_response(500, INTERNAL_ERROR)


def _fields(request: web.Request, status: int, message: str) -> dict[str, object]:
    return {"method": request.method, "path": request.path, "status": status, "error": message}
