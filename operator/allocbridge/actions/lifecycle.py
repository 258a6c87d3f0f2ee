"""The lifecycle actions (stop, signal, restart, pause), bound to one Kubernetes client.

Each verb is a module of its own (`stop`, `signal`, `restart`, `pause`) over two shared ones:
`records` reads the Allocation and writes its status with optimistic concurrency, so API
replicas and the reconciler never overwrite each other; `incontainer` runs `kill` and the PID 1
probe in the task's container. What each action does, step by step: docs/kubernetes-mapping.md
("How the actions map to Kubernetes", "Signals and a container's PID 1").
"""

from __future__ import annotations

from dataclasses import dataclass

from allocbridge.actions.pause import Pausing
from allocbridge.actions.records import Target
from allocbridge.actions.restart import Restarting
from allocbridge.actions.signal import Signalling
from allocbridge.actions.stop import Stopping

__all__ = ["Actions", "ActionsSlot", "Target"]


@dataclass
class Actions(Stopping, Signalling, Restarting, Pausing):
    """The lifecycle actions, bound to one Kubernetes client (on the API's event loop)."""


@dataclass
class ActionsSlot:
    """Where the API finds the actions: empty until Kubernetes credentials are loaded."""

    current: Actions | None = None
