"""Schemathesis against a running replica of the API: the OpenAPI document is the contract.

`st run --checks all` fuzzes every operation of `/v1/openapi.json` (exec aside, see below)
with a fixed seed and a bounded number of examples, against an in-process server over a
store fed with wire objects. It passes only with 0 failures and 0 errors: every schema-valid
request is accepted (2xx, or 404 for an ID no allocation has), every schema-violating one is
refused with a 4xx, no answer is a 5xx, every answer matches its documented status, headers
and body, and every other method gets 405 with an `Allow` header.

Half of the generated allocation and evaluation IDs and task names are the store's, so
requests reach the handlers' own checks (bodies, task names) and not only the 404 of an
unknown ID. Write endpoints act through `InMemoryActions`, which answers as `Actions` does for
what it checks before touching a pod (an unknown task is 404).

What the replica changes, and why:
- Its store caps each park of a blocking query at `PARK` seconds. A generated `index` above
  the store's makes the query block for `wait` (up to 5 minutes); capped, it answers with the
  current result as a wait that ran out does. Parsing and validation are untouched.
- Exec is left out: after its 101 the conversation is WebSocket frames, which an HTTP fuzzer
  cannot speak (test_exec_properties.py drives it instead).
- `/v1/client/fs/` (logs, stat, ls, cat, readat, stream) and `.../stats` are left out: they
  need a running container (its log, an exec into it) or the node's stats, which this replica
  has no Kubernetes to reach (503), and they answer 400 for a task or path the allocation does
  not have, as Nomad does, which the positive-data check counts as a rejected valid request.
  tests/cluster/test_alloc_logs.py, test_alloc_fs.py and test_stats.py drive them instead.

docs/reliability.md says what the run found and what the document now promises.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import cast

from aiohttp.test_utils import TestServer
from allocations_fixture import SAMPLE, stored

from allocbridge.actions.lifecycle import Actions, ActionsSlot, Target
from allocbridge.api.openapi import DOCUMENT
from allocbridge.api.server import create_app
from allocbridge.auth import AllowAll
from allocbridge.model.errors import NomadError
from allocbridge.store import AllocationStore
from allocbridge.telemetry import Metrics

#: Longest park of a blocking query in this replica, seconds.
PARK = 0.05
SEED = 34
MAX_EXAMPLES = 25
#: A generous bound on the whole run, so a hang fails the test instead of stalling `make test`.
RUN_LIMIT = 540.0
HERE = Path(__file__).parent
#: Paths not fuzzed (see the module docstring).
EXCLUDED = r"(/exec$|^/v1/client/fs/|/stats$)"


class ShortParkStore(AllocationStore):
    """A store whose waits end after at most `PARK` seconds (see the module docstring)."""

    async def wait_for_index(self, index: int, timeout: float) -> int:  # noqa: ASYNC109
        return await super().wait_for_index(index, min(timeout, PARK))


ALLOCATIONS = [stored(ident, **options) for ident, options in SAMPLE]


def replica_store() -> AllocationStore:
    store = ShortParkStore()
    store.replace_all(ALLOCATIONS, 120)
    return store


class InMemoryActions:
    """Stop, signal, restart and pause that succeed on any task the allocation has."""

    def __init__(self, store: AllocationStore) -> None:
        self.store = store

    def _task(self, target: Target, task: str) -> None:
        alloc = self.store.get(target.alloc_id)
        if alloc is None or task not in (alloc.wire.get("TaskStates") or {}):
            raise NomadError(404, "Task not found")

    async def stop(self, target: Target, *, no_shutdown_delay: bool) -> tuple[str, int]:
        return "5d1b7c2e-0000-4000-8000-000000000001", self.store.index

    async def signal(self, target: Target, signal_name: str, task: str | None) -> None:
        if task:
            self._task(target, task)

    async def restart(self, target: Target, task_name: str, all_tasks: bool) -> None:
        if task_name:
            self._task(target, task_name)

    async def set_pause(self, target: Target, task: str, request: str) -> int:
        self._task(target, task)
        return self.store.index


def config() -> str:
    """schemathesis.toml: half the IDs and task names drawn from the store's allocations."""
    allocations = [alloc.id for alloc in ALLOCATIONS]
    evaluations = sorted({str(alloc.wire["EvalID"]) for alloc in ALLOCATIONS})
    tasks = sorted({task for alloc in ALLOCATIONS for task in alloc.wire["TaskStates"]})
    return "\n".join(
        [
            f"dictionaries.allocations.values = {json.dumps(allocations)}",
            f"dictionaries.evaluations.values = {json.dumps(evaluations)}",
            f"dictionaries.tasks.values = {json.dumps(tasks)}",
            "[parameters]",
            '"path.alloc_id" = { dictionary = "allocations", probability = 0.5 }',
            '"path.eval_id" = { dictionary = "evaluations", probability = 0.5 }',
            *(
                f'"{where}" = {{ dictionary = "tasks", probability = 0.5 }}'
                for where in ("query.task", "body.Task")
            ),
            "",
        ]
    )


async def test_the_server_keeps_the_openapi_document(tmp_path: Path) -> None:
    store = replica_store()
    slot = ActionsSlot()
    slot.current = cast(Actions, InMemoryActions(store))
    app = create_app(Metrics(), store=store, authorizer=AllowAll(), actions=slot)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    report = tmp_path / "events.ndjson"
    settings = tmp_path / "schemathesis.toml"
    settings.write_text(config())
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "schemathesis.cli",
            f"--config-file={settings}",
            "run",
            str(server.make_url("/v1/openapi.json")),
            "--checks=all",
            f"--max-examples={MAX_EXAMPLES}",
            f"--seed={SEED}",
            "--workers=1",
            "--request-timeout=10",
            f"--exclude-path-regex={EXCLUDED}",
            "--report=ndjson",
            f"--report-ndjson-path={report}",
            cwd=tmp_path,
            env={
                **os.environ,
                "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [str(HERE), os.environ.get("PYTHONPATH")])
                ),
                "NO_COLOR": "1",
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(process.communicate(), RUN_LIMIT)
    finally:
        await server.close()
    text = output.decode("utf-8", "replace")
    assert process.returncode == 0, text
    events = [json.loads(line) for line in report.read_text().splitlines()]
    scenarios = [event["ScenarioFinished"] for event in events if "ScenarioFinished" in event]
    assert {scenario["status"] for scenario in scenarios} <= {"success", "skip"}, text
    tested = {
        scenario["recorder"]["label"]
        for scenario in scenarios
        if scenario["phase"] in ("coverage", "fuzzing") and scenario["status"] == "success"
    }
    documented = {
        f"{method.upper()} {path}"
        for path, operations in DOCUMENT["paths"].items()
        for method in operations
        if not re.search(EXCLUDED, path) and path != "/v1/openapi.json"  # its own source
    }
    assert tested == documented, text
