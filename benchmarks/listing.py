"""Listing: `GET /v1/allocations?task_states=false` over 10,000 allocations, against the API server.

allocbridge answers from its store (`namespace=*`: every allocation; then a `filter` that
matches 1%); the peers list the same 10,000 Allocation objects from kube-apiserver: a raw
kubernetes_asyncio list (`_preload_content=False`, the body read as bytes, as the operator's
own watch does) and the built `kubectl get allocations -A -o json` (a whole process: start,
discovery from its cache, 500-object chunks, decoding and printing). The API server cannot
evaluate a Nomad filter, so those are also the filter's peers (the goal's "API server list of
the same objects"); its nearest feature, a label selector matching the same 100 objects, is
shown beside them without a goal.

Each figure: p50 and p99 of `--samples` sequential requests on one keep-alive connection (after
2 unrecorded warm-up requests; a slow series stops after `--series-budget` seconds with at least
5 samples), and requests per second with `--concurrency` closed-loop clients for
`--rps-seconds`. Time is to the last byte of the body; no side decodes the JSON.
"""

from __future__ import annotations

import subprocess
import urllib.parse
from dataclasses import dataclass
from typing import Any, Final

from kubernetes_asyncio import client, config

from benchmarks.harness import Bench, BenchError, OperatorProcess, fetch_body, log
from benchmarks.population import JOB_LABEL
from benchmarks.table import Row, below, faster_than, mb, rate_times
from benchmarks.timing import Fetch, Series, closed_loop_rate, latency_series, timed_in_thread

SECTION: Final = "Listing"
FILTER_JOB: Final = "bench-7"
P50_GOAL_MS: Final = 50.0
SPEEDUP_GOAL: Final = 5.0


@dataclass(frozen=True)
class ListingOptions:
    samples: int
    series_budget: float
    rps_seconds: float
    concurrency: int
    kubectl_samples: int


def ours(bench: Bench, replica: OperatorProcess, extra: str = "") -> Fetch:
    return fetch_body(
        bench.http, f"{replica.api}/v1/allocations?namespace=*&task_states=false{extra}"
    )


async def admin_client(bench: Bench) -> client.ApiClient:
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(bench.cluster.kubeconfig), client_configuration=configuration
    )
    configuration.connection_pool_maxsize = 16
    return client.ApiClient(configuration)


def raw_list(api: client.ApiClient, **params: Any) -> Fetch:
    custom: Any = client.CustomObjectsApi(api)

    async def fetch() -> int:
        response = await custom.list_cluster_custom_object(
            "allocbridge.io", "v1", "allocations", _preload_content=False, **params
        )
        async with response:
            body = await response.read()
            if response.status != 200:
                raise BenchError(f"raw list: {response.status}")
            return len(body)

    return fetch


def kubectl_list(bench: Bench, *selector: str) -> Fetch:
    argv = bench.kubectl_argv("get", "allocations", "-A", "-o", "json", *selector)

    def work() -> int:
        done = subprocess.run(argv, capture_output=True, timeout=300, check=False)
        if done.returncode != 0:
            raise BenchError(f"kubectl get allocations: {done.stderr[:300]!r}")
        return len(done.stdout)

    return timed_in_thread(work)


async def measure(
    bench: Bench, replica: OperatorProcess, count: int, options: ListingOptions
) -> list[Row]:
    selector = f"{JOB_LABEL}={FILTER_JOB}"
    expression = urllib.parse.quote(f'JobID == "{FILTER_JOB}"')
    api = await admin_client(bench)
    try:
        series: dict[str, Series] = {}
        rates: dict[str, float] = {}
        fetches = {
            "ours-all": ours(bench, replica),
            "ours-1%": ours(bench, replica, f"&filter={expression}"),
            "raw-all": raw_list(api),
            "raw-1%": raw_list(api, label_selector=selector),
        }
        for name, fetch in fetches.items():
            log(f"listing: {name} latency")
            series[name] = await latency_series(
                fetch, samples=options.samples, budget=options.series_budget
            )
            log(f"listing: {name} requests per second")
            rates[name] = await closed_loop_rate(
                fetch, concurrency=options.concurrency, seconds=options.rps_seconds
            )
        log("listing: kubectl get allocations -A -o json")
        series["kubectl-all"] = await latency_series(
            kubectl_list(bench),
            samples=options.kubectl_samples,
            budget=options.series_budget,
            warmup=1,
            minimum=3,
        )
    finally:
        await api.close()
    return _rows(series, rates, count)


def _rows(series: dict[str, Series], rates: dict[str, float], count: int) -> list[Row]:
    raw, cli, selected = series["raw-all"], series["kubectl-all"], series["raw-1%"]
    peer = f"raw kubernetes_asyncio list of all {count:,}"
    kubectl = f"kubectl get allocations -A -o json (all {count:,})"
    rows: list[Row] = []
    for scope, label in (("all", f"all {count:,}"), ("1%", f"filter matching 1% ({FILTER_JOB})")):
        mine = series[f"ours-{scope}"]
        p50_goals = (below(P50_GOAL_MS, "ms"),) if scope == "all" else ()
        rows += [
            Row(
                SECTION,
                f"{label}: p50",
                mine.latencies.ms(50),
                "ms",
                peer,
                raw.latencies.ms(50),
                goals=(*p50_goals, faster_than(SPEEDUP_GOAL)),
                note=(
                    f"n={mine.latencies.n}/{raw.latencies.n}; bodies "
                    f"{mb(mine.body_bytes):.2f} MB vs {mb(raw.body_bytes):.2f} MB"
                ),
            ),
            Row(
                SECTION,
                f"{label}: p99",
                mine.latencies.ms(99),
                "ms",
                peer,
                raw.latencies.ms(99),
                goals=(faster_than(SPEEDUP_GOAL),),
            ),
            Row(
                SECTION,
                f"{label}: requests/s",
                rates[f"ours-{scope}"],
                "req/s",
                peer,
                rates["raw-all"],
                better="higher",
                goals=(rate_times(SPEEDUP_GOAL),),
            ),
            Row(
                SECTION,
                f"{label}: p50 vs kubectl",
                mine.latencies.ms(50),
                "ms",
                kubectl,
                cli.latencies.ms(50),
                goals=(faster_than(SPEEDUP_GOAL),),
                note=f"kubectl n={cli.latencies.n}, whole process",
            ),
        ]
    mine = series["ours-1%"]
    nearest = f"raw list, label selector {JOB_LABEL}={FILTER_JOB} (same 100)"
    rows += [
        Row(
            SECTION,
            "filter matching 1%: p50 vs a label selector",
            mine.latencies.ms(50),
            "ms",
            nearest,
            selected.latencies.ms(50),
            note="no goal: the API server's nearest feature to a filter",
        ),
        Row(
            SECTION,
            "filter matching 1%: p99 vs a label selector",
            mine.latencies.ms(99),
            "ms",
            nearest,
            selected.latencies.ms(99),
        ),
        Row(
            SECTION,
            "filter matching 1%: requests/s vs a label selector",
            rates["ours-1%"],
            "req/s",
            nearest,
            rates["raw-1%"],
            better="higher",
        ),
    ]
    return rows
