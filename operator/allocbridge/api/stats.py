"""`GET /v1/client/allocation/:alloc_id/stats`: the tasks' CPU and memory, from the kubelet.

What `nomad alloc status` shows under each task (it prints `Couldn't retrieve stats: ...` and
goes on when this fails). Like Nomad's other client endpoints: no blocking, no `X-Nomad-*`
headers, 404 `Unknown allocation "<id>"`, `read-job` on the allocation's namespace; `task`
narrows the answer to one task (400 `unknown task name "x"` for a task it does not have).

The numbers are the node's summary stats (`cluster.nodestats`) mapped by `model.usage`. Where
there are none, the answer says why with a 5xx, never a 404 that would read as an unknown
allocation: 501 when the node serves no summary (kwok's fake nodes: the API server does not
even proxy to their loopback address), 503 when the allocation is not on a node yet or its node
cannot be reached, 500 for anything else Kubernetes refuses.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.context import context
from allocbridge.api.errors import NomadError
from allocbridge.api.logs import task_names
from allocbridge.api.query import parse_query
from allocbridge.api.routing import ALLOC_ID, Endpoint
from allocbridge.api.targets import readable_allocation
from allocbridge.auth import READ_JOB
from allocbridge.cluster.errors import KubernetesError, NotFoundError, UnavailableError
from allocbridge.model.goformat import go_quote
from allocbridge.model.usage import alloc_usage, find_pod

#: The API server's answer (a 500) when a node's address is not one it proxies to: loopback
#: and link-local addresses, where the local cluster's kwok nodes are.
PROXY_REFUSED: Final = "address not allowed"


async def allocation_stats(request: web.Request) -> Answer:
    parse_query(request.query)  # its 400s, though only `namespace` and `pretty` are used
    alloc = await readable_allocation(request, READ_JOB)
    task = request.query.get("task", "")
    tasks = task_names(alloc)
    if task and task not in tasks:
        raise NomadError(400, f"unknown task name {go_quote(task)}")
    node = str(alloc.wire.get("NodeName") or "")
    if not node:
        raise NomadError(503, "the allocation is not on a node yet: no stats")
    services = context(request).pods.stats
    if services is None:
        raise NomadError(503, "stats are not available: no Kubernetes stats reader")
    try:
        summary = await services.reader.summary(node)
    except KubernetesError as exc:
        raise _stats_error(node, exc) from exc
    pod = find_pod(summary, alloc.namespace, alloc.object_name)
    if pod is None:
        raise NomadError(503, f"node {node} reports no stats for the allocation's pod yet")
    usage = alloc_usage(pod, tasks, mhz_per_cpu=services.mhz_per_cpu, task=task)
    return Answer(usage)


def _stats_error(node: str, exc: KubernetesError) -> NomadError:
    if isinstance(exc, NotFoundError):
        return NomadError(501, f"node {node} serves no resource stats (/stats/summary): {exc}")
    if PROXY_REFUSED in exc.message:  # a node on a loopback address (the local cluster's kwok)
        return NomadError(
            501,
            f"node {node} serves no resource stats: the API server's node proxy refuses it ({exc})",
        )
    if isinstance(exc, UnavailableError):
        return NomadError(503, f"cannot read the stats of node {node}: {exc}")
    return NomadError(500, f"cannot read the stats of node {node}: {exc}")


ENDPOINTS = [Endpoint(f"/v1/client/allocation/{ALLOC_ID}/stats", {"GET": allocation_stats})]
