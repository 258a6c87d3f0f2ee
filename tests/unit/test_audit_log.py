"""The local cluster's audit log reader: what a recorded list or watch says about its request."""

from __future__ import annotations

import json
from pathlib import Path

from allocbridge_localcluster.audit import AuditedRequest, read_audit_log


def test_a_recorded_watch_gives_its_path_selectors_client_and_code(tmp_path: Path) -> None:
    entry = {
        "verb": "watch",
        "requestURI": "/api/v1/events?fieldSelector=involvedObject.kind%3DPod&watch=true",
        "userAgent": "kopf/1.45.2",
        "user": {"username": "system:serviceaccount:ns:sa"},
        "responseStatus": {"code": 200},
    }
    log = tmp_path / "audit.log"
    log.write_text(json.dumps(entry) + "\n\n")
    assert read_audit_log(log) == [
        AuditedRequest(
            verb="watch",
            path="/api/v1/events",
            query={"fieldSelector": "involvedObject.kind=Pod", "watch": "true"},
            user_agent="kopf/1.45.2",
            username="system:serviceaccount:ns:sa",
            code=200,
        )
    ]


def test_an_entry_without_a_response_has_no_code() -> None:
    assert AuditedRequest.of({"verb": "list", "requestURI": "/api/v1/pods"}).code is None


def test_no_log_yet_is_no_requests(tmp_path: Path) -> None:
    assert read_audit_log(tmp_path / "missing.log") == []
