"""The API server's audit log of list and watch requests, for tests that check what a client
asks the API server for (its selectors), not only what it does with the answers.

Only lists and watches are recorded, at the `Metadata` level (the request URI, user, user agent
and response code, no bodies), once each: a watch when its response starts, a list when it
completes. Other requests are not recorded, so the log stays small and costs next to nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, Panic]
rules:
  - level: Metadata
    verbs: [watch]
    omitStages: [ResponseComplete]
  - level: Metadata
    verbs: [list]
  - level: None
"""
"""The first matching rule applies: a watch is recorded when its response starts (its end
comes minutes later), a list when it completes, anything else not at all."""


@dataclass(frozen=True)
class AuditedRequest:
    """One recorded list or watch: its path, query and who asked."""

    verb: str
    path: str
    query: dict[str, str]
    user_agent: str
    username: str
    code: int | None

    @classmethod
    def of(cls, entry: dict[str, object]) -> AuditedRequest:
        url = urlsplit(str(entry.get("requestURI", "")))
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        user = entry.get("user")
        status = entry.get("responseStatus")
        code = status.get("code") if isinstance(status, dict) else None
        return cls(
            verb=str(entry.get("verb", "")),
            path=url.path,
            query=query,
            user_agent=str(entry.get("userAgent", "")),
            username=str(user.get("username", "")) if isinstance(user, dict) else "",
            code=code if isinstance(code, int) else None,
        )


def write_audit_policy(path: Path) -> Path:
    path.write_text(POLICY)
    return path


def read_audit_log(path: Path) -> list[AuditedRequest]:
    """Every request recorded so far (none when the log does not exist yet)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [AuditedRequest.of(json.loads(line)) for line in lines if line.strip()]
