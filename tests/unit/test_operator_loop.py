"""The event loop the Kopf thread runs on (no Kubernetes: the operator itself is replaced)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
import uvloop

from allocbridge.reconcile.runner import OperatorThread


def test_the_kopf_thread_runs_on_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def operate(self: OperatorThread) -> None:
        loops.append(asyncio.get_running_loop())

    monkeypatch.setattr(OperatorThread, "_operate", operate)
    thread = OperatorThread(cast(Any, None), cast(Any, None))
    thread.start()
    thread.thread.join(10)
    assert thread.error is None
    assert len(loops) == 1 and isinstance(loops[0], uvloop.Loop)
