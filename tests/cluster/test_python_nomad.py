"""python-nomad (PyPI `python-nomad`, module `nomad`) against the real operator.

Every allocation call the library offers: `allocations.get_allocations` (prefix, filter,
per_page, next_token, namespace, resources, task_states, reverse) and the `len`/`iter` of
`allocations`; `allocation.get_allocation`, `in`, `[]` and `stop_allocation` (then
`evaluation.get_evaluation` and `get_allocations` for the stop's evaluation);
`client.allocation.signal_allocation`, `restart_allocation` and `read_allocation_stats`;
`client.gc_allocation.garbage_collect`; and `alloc fs` and logs: `client.ls`, `stat`, `cat`,
`read_at` and `stream_logs` (not `stream_file`, which always follows). python-nomad raises by
status: 400 `BadRequestNomadException`, 403 `URLNotAuthorizedNomadException`, 404
`URLNotFoundNomadException`, 409 `VariableConflict` (its name for any 409), anything else
`BaseNomadException`; each carries the response, whose text is allocbridge's (Nomad's) message.

python-nomad returns bodies only, never headers, so it cannot read `X-Nomad-NextToken`; the
paging test builds the next token the way Nomad's paginator does (`<CreateIndex>.<ID>`). It
sends Python booleans as `True`/`False`: Go's ParseBool accepts them for `resources` and
`task_states`, but `reverse` counts only when exactly `true` (in Nomad too), so
`reverse=True` from python-nomad does not reverse.

The allocations run on the real node: signals are seen as what the task's script trapped, a
restart as the kubelet running the container again after SIGTERM ended it, and the stats come
from the node's kubelet.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import nomad
import pytest
from nomad.api import exceptions
from running_operator import (
    Operator,
    http,
    make_namespace,
    quick_allocation,
    real_node_annotations,
)
from scripted import IMAGE, files_task, scripted_task, trapped_signals

from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster

UNKNOWN = "0f0f0f0f-0000-4000-8000-000000000000"
READ = ("pa", "pb", "pc")  # allocations nothing changes
ACT = ("psig", "prst", "pstop")
FILES = ("pfiles",)  # alloc fs and logs, in a namespace of its own


#: The task of every allocation but `psig`: tini above `sleep`, which a forwarded TERM ends.
IDLE: dict[str, Any] = {
    "name": "main",
    "driver": "docker",
    "config": {"image": IMAGE, "command": "/sbin/tini", "args": ["--", "sleep", "100000"]},
}
#: `psig`'s task traps (and records) what the test sends.
SIGNALLED = scripted_task(traps=("USR1", "HUP"))


@dataclass
class World:
    operator: Operator
    kubectl: Any
    read: str
    act: str
    files: str
    ids: dict[str, str] = field(default_factory=dict)

    def signals(self, name: str) -> list[str]:
        """What the task `main` of allocation `name` (in the act namespace) has trapped."""
        return trapped_signals(self.kubectl, self.act, name, "main")

    def container(self, name: str) -> dict[str, Any]:
        """The kubelet's status of that task's container."""
        pod = self.kubectl.json("get", "pod", name, "-n", self.act)
        found: dict[str, Any] = pod["status"]["containerStatuses"][0]
        return found


def _wait_running(w: World, namespace: str, name: str) -> str:
    def uid() -> str | None:
        found = w.kubectl.json("get", "allocation", name, "-n", namespace)
        running = (found.get("status") or {}).get("clientStatus") == "running"
        return str(found["metadata"]["uid"]) if running else None

    alloc_id: str = eventually(uid, timeout=120, what=f"{namespace}/{name} to run")

    def served() -> bool:
        code, body, _ = http(f"{w.operator.api}/v1/allocation/{alloc_id}")
        return code == 200 and b'"ClientStatus":"running"' in body

    eventually(served, timeout=60, what=f"the API to serve {name} running")
    return alloc_id


@pytest.fixture(scope="module")
def world(operator: Operator, cluster: Any, kubectl: Any) -> Iterator[World]:
    """Three allocations to read, three to act on and one with files, each group in a
    namespace of the real node."""
    suffix = uuid.uuid4().hex[:6]
    w = World(
        operator,
        kubectl,
        read=f"py-read-{suffix}",
        act=f"py-act-{suffix}",
        files=f"py-files-{suffix}",
    )
    annotations = real_node_annotations(cluster)
    made: list[Iterator[str]] = []  # each deletes its namespace when resumed
    try:
        groups = ((w.read, READ), (w.act, ACT), (w.files, FILES))
        for namespace, names in groups:
            made.append(make_namespace(kubectl, namespace, annotations))
            next(made[-1])
            for name in names:
                task = {"psig": SIGNALLED, "pfiles": files_task()}.get(name, IDLE)
                kubectl.apply(quick_allocation(name, namespace, tasks=[task]))
        for namespace, names in groups:
            for name in names:
                w.ids[name] = _wait_running(w, namespace, name)
        yield w
    finally:
        for namespace_made in made:
            next(namespace_made, None)


def client_for(world: World, namespace: str | None) -> Any:
    return nomad.Nomad(address=world.operator.api, namespace=namespace, timeout=30)


@pytest.fixture
def read(world: World, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A client for the READ namespace; NOMAD_* from the environment must not leak in."""
    for name in ("NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_NAMESPACE", "NOMAD_REGION"):
        monkeypatch.delenv(name, raising=False)
    return client_for(world, world.read)


@pytest.fixture
def act(world: World, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name in ("NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_NAMESPACE", "NOMAD_REGION"):
        monkeypatch.delenv(name, raising=False)
    return client_for(world, world.act)


def raised(kind: type[Exception], call: Any, *args: Any, **kwargs: Any) -> str:
    """Call, expect `kind`, return the response text it carries."""
    with pytest.raises(kind) as caught:
        call(*args, **kwargs)
    response = caught.value.nomad_resp  # type: ignore[attr-defined]
    return str(response.text)


# -- allocations ------------------------------------------------------------------------------


def test_get_allocations(world: World, read: Any) -> None:
    ids = {world.ids[name] for name in READ}
    listed = read.allocations.get_allocations()
    assert {a["ID"] for a in listed} == ids
    assert all(a["Namespace"] == world.read and a["TaskStates"]["main"] for a in listed)
    assert len(read.allocations) == 3
    assert {a["ID"] for a in read.allocations} == ids
    # Another namespace by parameter, and all of them.
    assert {a["ID"] for a in read.allocations.get_allocations(namespace=world.act)} == {
        world.ids[name] for name in ACT
    }
    everywhere = read.allocations.get_allocations(namespace="*")
    assert ids | {world.ids[name] for name in ACT} <= {a["ID"] for a in everywhere}


def test_get_allocations_prefix_filter_and_fields(world: World, read: Any) -> None:
    target = world.ids["pb"]
    for prefix in (target[:2], target[:8], target):
        found = read.allocations.get_allocations(prefix=prefix)
        assert target in {a["ID"] for a in found}
        assert all(a["ID"].startswith(prefix) for a in found)
    text = raised(exceptions.BadRequestNomadException, read.allocations.get_allocations, "abc")
    assert text == "alloc lookup failed: index error: Input (without hyphens) must be even length"

    found = read.allocations.get_allocations(filter_='JobID == "pb"')
    assert [a["ID"] for a in found] == [target]
    text = raised(
        exceptions.BadRequestNomadException, read.allocations.get_allocations, filter_="x"
    )
    assert text.startswith("failed to create result paginator: failed to read filter expression:")

    slim = read.allocations.get_allocations(task_states=False)
    assert len(slim) == 3 and all(a["TaskStates"] is None for a in slim)
    full = read.allocations.get_allocations(resources=True)
    assert all("AllocatedResources" in a for a in full)
    assert all("AllocatedResources" not in a for a in read.allocations.get_allocations())


def test_get_allocations_pages(world: World, read: Any) -> None:
    ordered = read.allocations.get_allocations()  # CreateIndex order, then ID
    first = read.allocations.get_allocations(per_page=2)
    assert [a["ID"] for a in first] == [a["ID"] for a in ordered[:2]]
    third = ordered[2]
    rest = read.allocations.get_allocations(
        per_page=2, next_token=f"{third['CreateIndex']}.{third['ID']}"
    )
    assert [a["ID"] for a in rest] == [third["ID"]]
    # python-nomad sends reverse=True as "True", which Nomad (and allocbridge) ignore.
    assert read.allocations.get_allocations(reverse=True) == ordered


# -- allocation -------------------------------------------------------------------------------


def test_get_allocation(world: World, read: Any) -> None:
    alloc_id = world.ids["pa"]
    alloc = read.allocation.get_allocation(alloc_id)
    assert alloc["ID"] == alloc_id and alloc["JobID"] == "pa" and alloc["Namespace"] == world.read
    assert alloc["ClientStatus"] == "running" and alloc["TaskStates"]["main"]["State"] == "running"
    assert alloc_id in read.allocation
    assert read.allocation[alloc_id]["ID"] == alloc_id

    assert UNKNOWN not in read.allocation
    with pytest.raises(KeyError):
        read.allocation[UNKNOWN]
    text = raised(exceptions.URLNotFoundNomadException, read.allocation.get_allocation, UNKNOWN)
    assert text == "alloc not found"
    text = raised(exceptions.BadRequestNomadException, read.allocation.get_allocation, "0f0f0f0f")
    assert text == "alloc lookup failed: index error: UUID must be 36 characters"


# -- client.allocation: signal, restart, stats, gc --------------------------------------------


def test_signal_allocation(world: World, act: Any) -> None:
    alloc_id = world.ids["psig"]
    signal = act.client.allocation.signal_allocation
    assert signal(alloc_id, "SIGUSR1", task="main") == {}
    assert signal(alloc_id, "SIGHUP") == {}  # python-nomad sends "Task": null: every task
    eventually(
        lambda: world.signals("psig") == ["USR1", "HUP"], what="the task to trap USR1, then HUP"
    )

    assert raised(exceptions.URLNotFoundNomadException, signal, alloc_id, "SIGUSR1", "ghost") == (
        "Task not found"
    )
    assert "SIGNOPE" in raised(exceptions.BadRequestNomadException, signal, alloc_id, "SIGNOPE")
    assert raised(exceptions.URLNotFoundNomadException, signal, UNKNOWN, "SIGHUP") == (
        f'Unknown allocation "{UNKNOWN}"'
    )
    # The refused calls sent nothing: a last signal arrives right after the first two.
    assert signal(alloc_id, "SIGUSR1", task="main") == {}
    eventually(lambda: len(world.signals("psig")) >= 3, what="the last signal to be trapped")
    assert world.signals("psig") == ["USR1", "HUP", "USR1"]


def test_restart_allocation(world: World, act: Any) -> None:
    alloc_id = world.ids["prst"]
    assert act.client.allocation.restart_allocation(alloc_id) == {}  # the running tasks

    def restarted() -> bool:
        state = act.allocation.get_allocation(alloc_id)["TaskStates"]["main"]
        return bool(state["Restarts"] == 1 and state["State"] == "running")

    eventually(restarted, what="the running task to restart")
    # The task's kill signal (SIGTERM) ended it (tini exits 128 + 15) and the kubelet ran the
    # container again in the same pod.
    container = world.container("prst")
    assert container["restartCount"] == 1
    assert container["lastState"]["terminated"]["exitCode"] == 128 + 15
    text = raised(
        exceptions.URLNotFoundNomadException, act.client.allocation.restart_allocation, UNKNOWN
    )
    assert text == f'Unknown allocation "{UNKNOWN}"'


def test_stats_are_the_node_s_and_gc_is_not_served(world: World, act: Any) -> None:
    """The real node's kubelet measures the task's container; client GC is outside the API
    allocbridge serves."""
    alloc_id = world.ids["prst"]
    stats = act.client.allocation.read_allocation_stats

    def measured() -> dict[str, Any] | None:
        try:
            usage: dict[str, Any] = stats(alloc_id)
        except exceptions.BaseNomadException:  # 503 until the kubelet has a sample
            return None
        memory = usage["Tasks"]["main"]["ResourceUsage"]["MemoryStats"]
        return usage if memory["RSS"] > 0 else None

    usage = eventually(measured, what="the kubelet's first sample of the task")
    assert set(usage["Tasks"]) == {"main"}
    assert (
        usage["ResourceUsage"]["MemoryStats"]["RSS"]
        >= (usage["Tasks"]["main"]["ResourceUsage"]["MemoryStats"]["RSS"])
    )
    gc = act.client.gc_allocation.garbage_collect
    assert raised(exceptions.URLNotFoundNomadException, gc, alloc_id) == "resource not found"


# -- client fs: alloc fs and logs ----------------------------------------------------------------


@pytest.fixture
def files(world: World, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name in ("NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_NAMESPACE", "NOMAD_REGION"):
        monkeypatch.delenv(name, raising=False)
    client = client_for(world, world.files)
    alloc_id = world.ids["pfiles"]
    eventually(  # the task lays out its files as it starts
        lambda: any(
            f["Name"] == "grow.log" for f in client.client.ls.list_files(alloc_id, "alloc/data")
        ),
        what="the task's files",
    )
    return client


def test_fs_list_stat_cat_and_read_at(world: World, files: Any) -> None:
    """`client.ls`, `stat`, `cat` and `read_at` (`stream_file` is left out: it cannot ask for
    `follow=false`, so its request never ends, against Nomad as here)."""
    alloc_id = world.ids["pfiles"]
    assert [f["Name"] for f in files.client.ls.list_files(alloc_id)] == ["alloc", "main"]
    listed = {f["Name"]: f for f in files.client.ls.list_files(alloc_id, "main/local")}
    assert listed["digits.txt"]["Size"] == 10 and listed["sub"]["IsDir"]
    info = files.client.stat.stat_file(alloc_id, "main/local/conf.json")
    assert (info["Name"], info["Size"], info["ContentType"]) == ("conf.json", 7, "application/json")
    assert files.client.cat.read_file(alloc_id, "alloc/data/hello.txt") == "hello\n"
    read_at = files.client.read_at.read_file_offset
    assert read_at(alloc_id, 2, 3, "main/local/digits.txt") == "234"
    text = raised(exceptions.URLNotFoundNomadException, files.client.stat.stat_file, alloc_id, "x")
    assert text == "stat x: no such file or directory"
    text = raised(
        exceptions.BadRequestNomadException,
        files.client.cat.read_file,
        alloc_id,
        "main/local/passwd",
    )
    assert text == "Path escapes the alloc directory"


def test_stream_logs_stdout_and_stderr(world: World, files: Any) -> None:
    """`client.stream_logs` without follow: plain text, and Nomad's frames; each type its own."""
    alloc_id = world.ids["pfiles"]
    logs = files.client.stream_logs.stream
    stdout = eventually(
        lambda: (text := logs(alloc_id, "main", "stdout", plain=True)).count("\n") >= 2 and text,
        what="two lines of stdout",
    )
    assert stdout.startswith("out 1\nout 2\n") and "err" not in stdout
    stderr = logs(alloc_id, "main", "stderr", plain=True)
    assert stderr.startswith("err 1\nerr 2\n") and "out" not in stderr
    framed = logs(alloc_id, "main", "stderr", offset=4, origin="start")
    frame = json.loads(framed[: framed.index("}") + 1])
    assert frame["File"] == "alloc/logs/main.stderr.0"
    assert base64.b64decode(frame["Data"]).startswith(b"1\nerr 2\n")


# -- stop -------------------------------------------------------------------------------------


def test_stop_allocation(world: World, act: Any) -> None:
    alloc_id = world.ids["pstop"]
    answer = act.allocation.stop_allocation(alloc_id)
    assert set(answer) == {"EvalID", "Index"} and len(answer["EvalID"]) == 36
    assert answer["Index"] > 0

    def stopped() -> dict[str, Any] | None:
        alloc: dict[str, Any] = act.allocation.get_allocation(alloc_id)
        return alloc if alloc["ClientStatus"] == "complete" else None

    old = eventually(stopped, what="the allocation to stop")
    assert old["DesiredStatus"] == "stop" and old["NextAllocation"]
    replacement = eventually(
        lambda: (
            (a := act.allocation.get_allocation(old["NextAllocation"]))["ClientStatus"] == "running"
            and a
        ),
        what="the replacement to run",
    )
    assert replacement["PreviousAllocation"] == alloc_id
    evaluation = act.evaluation.get_evaluation(answer["EvalID"])
    assert (evaluation["Status"], evaluation["TriggeredBy"]) == ("complete", "alloc-stop")
    placed = act.evaluation.get_allocations(answer["EvalID"])
    assert [a["ID"] for a in placed] == [old["NextAllocation"]]

    # allocbridge answers 409 where the allocation's state forbids the call; python-nomad
    # raises its VariableConflict for any 409, with allocbridge's text.
    text = raised(exceptions.VariableConflict, act.allocation.stop_allocation, alloc_id)
    assert "already stopped" in text
    text = raised(exceptions.VariableConflict, act.client.allocation.restart_allocation, alloc_id)
    assert text == "restart of an alloc that should not run"
    signal = act.client.allocation.signal_allocation
    assert raised(exceptions.VariableConflict, signal, alloc_id, "SIGHUP") == "Task not running"
    assert raised(exceptions.VariableConflict, signal, alloc_id, "SIGHUP", "main") == (
        "Task not running"
    )
    started = time.monotonic()
    text = raised(exceptions.URLNotFoundNomadException, act.allocation.stop_allocation, UNKNOWN)
    assert text == "allocation not found" and time.monotonic() - started < 5
