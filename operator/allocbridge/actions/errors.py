"""The error every action answers when it refuses or cannot carry out a request."""

from __future__ import annotations

from typing import Final

#: Nomad's text for an action on a task that does not run (a 409).
TASK_NOT_RUNNING: Final = "Task not running"


class ActionError(Exception):
    """A request the action refuses or cannot carry out; `status` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
