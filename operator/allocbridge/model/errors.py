"""The one error a Nomad API request ends with: an HTTP status and Nomad's text.

Raised where the refusal is decided (query parsing and handlers in `api/`, and the actions they
call) and answered in one place, `api.answers`, as Nomad answers: the text is the whole
plain-text body. It lives here, below every layer that raises it; it does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping


class NomadError(Exception):
    """A request that ends with `status` and the plain-text `message` (Nomad's texts).

    `index`, when set, adds the read endpoints' `X-Nomad-*` metadata headers (Nomad sends them
    with a read's 404 too); `headers` are any others (`Allow` on a 405, `Retry-After`).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        index: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.index = index
        self.headers = dict(headers or {})
