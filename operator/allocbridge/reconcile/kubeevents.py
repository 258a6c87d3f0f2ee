"""A Kubernetes Event about a pod, reduced to the `KubeEvent` the status derivation reads."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from allocbridge.model.status import KubeEvent, parse_time_ns


def kube_event(event: Mapping[str, Any]) -> KubeEvent:
    """The Event's uid, reason, message, type, time, and the container it names, if any
    (from `involvedObject.fieldPath`, `spec.containers{name}`)."""
    involved = event.get("involvedObject") or {}
    field_path = str(involved.get("fieldPath") or "")
    container = None
    if "{" in field_path and field_path.endswith("}"):
        container = field_path[field_path.index("{") + 1 : -1]
    stamp = (
        event.get("eventTime")
        or event.get("lastTimestamp")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
    )
    return KubeEvent(
        uid=str((event.get("metadata") or {}).get("uid", "")),
        reason=str(event.get("reason") or ""),
        message=str(event.get("message") or ""),
        type=str(event.get("type") or "Normal"),
        time_ns=parse_time_ns(stamp) or time.time_ns(),
        container=container,
    )
