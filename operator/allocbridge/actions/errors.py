"""Nomad's texts the actions answer with. Their refusals raise the API's one error type,
`model.errors.NomadError` (a status and Nomad's text), which `api` answers as it is."""

from __future__ import annotations

from typing import Final

#: Nomad's text for an action on a task that does not run (a 409).
TASK_NOT_RUNNING: Final = "Task not running"
