"""A minimal synchronous JSON client for the harness's own start-up and test helpers.

Start-up runs before any event loop exists (a pytest session fixture, the CLI before
`asyncio.run`), so readiness checks, the CRD and nodes go through this small urllib client that
authenticates with the admin client certificate instead of through kubernetes_asyncio.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


class ApiError(RuntimeError):
    """A non-2xx answer; `status` is the HTTP status, `body` the decoded text."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class RestClient:
    """JSON requests against one API server with a client certificate."""

    def __init__(self, server: str, ca_file: Path, cert_file: Path, key_file: Path) -> None:
        self.server = server.rstrip("/")
        self._ctx = ssl.create_default_context(cafile=str(ca_file))
        self._ctx.load_cert_chain(str(cert_file), str(key_file))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> Any:
        """Send `body` as JSON; return the decoded JSON answer (or the text if it is not JSON)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            raise ApiError(method, path, err.code, text) from None
        text = raw.decode(errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            return text

    def get(self, path: str, *, timeout: float = 10.0) -> Any:
        return self.request("GET", path, timeout=timeout)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Any, *, merge: bool = True) -> Any:
        kind = "merge-patch" if merge else "strategic-merge-patch"
        return self.request("PATCH", path, body, content_type=f"application/{kind}+json")

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)
