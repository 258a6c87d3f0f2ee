"""`python -m benchmarks`: run the measurements on a local control plane and print one table.

Order: the control plane (with the real node when the interactive section runs) and
allocbridge's manifests; a reconciling operator and one seed allocation running on a pod; exec,
interactive exec (a shell on the real node) and reconciliation; then that operator stops and a
standby replica serves the store measurements (10,000 allocations, no pods; see
`population`): footprint, blocking queries, listing, paging. Everything started here is
stopped at the end, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import datetime
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from allocbridge_localcluster import realnode
from benchmarks import (
    blocking,
    exec_stream,
    footprint,
    interactive,
    listing,
    logstream,
    paging,
    reads,
    reconcile,
    scale,
    writes,
)
from benchmarks.harness import (
    Bench,
    BenchError,
    Json,
    cpu_snapshot,
    load_average,
    log,
    machine,
    other_control_planes,
    other_cpu_share,
    rss,
)
from benchmarks.population import (
    PEERING,
    collection,
    create_seed,
    hold_peering,
    populate,
    wait_listed,
)
from benchmarks.table import Report, Row, render_report

DEFAULT_SECTIONS: Final = (
    "listing",
    "reads",
    "paging",
    "blocking",
    "exec",
    "interactive",
    "logs",
    "reconcile",
    "footprint",
)
#: Every section; on request only: `writes`, a diagnostic of the reconciliation's API server work,
#: and `scale`, 50,000 allocations in one replica (creating them takes minutes).
SECTIONS: Final = (*DEFAULT_SECTIONS, "writes", "scale")
STORE_SECTIONS: Final = frozenset({"listing", "reads", "paging", "blocking", "footprint", "scale"})
TITLES: Final = {
    "listing": listing.SECTION,
    "reads": reads.SECTION,
    "paging": paging.SECTION,
    "blocking": blocking.SECTION,
    "exec": exec_stream.SECTION,
    "interactive": interactive.SECTION,
    "logs": logstream.SECTION,
    "reconcile": reconcile.SECTION,
    "footprint": footprint.SECTION,
    "writes": writes.SECTION,
    "scale": scale.SECTION,
}
EXEC_NS: Final = "bench-exec"
INTERACTIVE_NS: Final = "bench-interactive"  # annotated: its pods go to the real node
LOGS_NS: Final = "bench-logs"  # annotated too
#: Sections that run on the real node.
REAL_NODE_SECTIONS: Final = frozenset({"interactive", "logs"})
RECONCILE_NS: Final = "bench-reconcile"
LIST_NAMESPACES: Final = 4
BUDGET_MINUTES: Final = 15


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="allocbridge's benchmark suite on a local control plane (make bench).",
    )
    scale = parser.add_argument_group("scale (the issue's defaults)")
    scale.add_argument("--allocations", type=int, default=10_000, help="allocations in the store")
    scale.add_argument("--blocking", type=int, default=1_000, help="parked blocking queries")
    scale.add_argument("--exec-mb", type=int, default=200, help="MiB written through exec")
    scale.add_argument("--reconcile", type=int, default=500, help="allocations reconciled")
    scale.add_argument(
        "--scale-allocations",
        type=int,
        default=50_000,
        help="allocations the scale section grows the store to (--only scale)",
    )
    timing = parser.add_argument_group("sampling")
    timing.add_argument("--samples", type=int, default=50, help="requests per latency series")
    timing.add_argument(
        "--series-budget", type=float, default=20.0, help="seconds after which a series stops"
    )
    timing.add_argument("--rps-seconds", type=float, default=5.0, help="seconds per rate")
    timing.add_argument(
        "--load-gomaxprocs",
        type=int,
        default=1,
        help="GOMAXPROCS of the single reads' Go client, both sides (0: Go's default)",
    )
    timing.add_argument("--concurrency", type=int, default=4, help="clients for the rates")
    timing.add_argument("--kubectl-samples", type=int, default=5, help="kubectl runs per list")
    timing.add_argument("--per-page", type=int, default=100, help="page size of the walk")
    timing.add_argument("--walks", type=int, default=5, help="paging walks per side")
    timing.add_argument("--exec-runs", type=int, default=3, help="exec sessions per side")
    timing.add_argument(
        "--keystrokes",
        type=int,
        default=3000,
        help="timed keystrokes per side (interactive; p99 of 3000 is the 30th-largest sample)",
    )
    timing.add_argument(
        "--shell-sessions", type=int, default=10, help="shell sessions per side (interactive)"
    )
    timing.add_argument(
        "--logs-mb", type=float, default=8.0, help="MB of the followed log (at most 9.5)"
    )
    timing.add_argument("--logs-runs", type=int, default=3, help="followed logs per side")
    timing.add_argument(
        "--reconcile-rounds", type=int, default=3, help="reconciliation rounds per side"
    )
    timing.add_argument("--writes", type=int, default=500, help="writes of a kind (--only writes)")
    timing.add_argument("--write-rounds", type=int, default=4, help="rounds of the writes")
    parser.add_argument(
        "--only",
        default=",".join(DEFAULT_SECTIONS),
        help=(
            f"comma-separated sections to run (default: {','.join(DEFAULT_SECTIONS)}; "
            "also: writes, scale)"
        ),
    )
    parser.add_argument("--state-dir", type=Path, help="control-plane state (default: a tmp dir)")
    parser.add_argument(
        "--output", type=Path, help="also write the table here (docs/benchmarks/YYYY-MM-DD.md)"
    )
    options = parser.parse_args(argv)
    chosen = [s.strip() for s in options.only.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    options.sections = frozenset(chosen)
    if options.load_gomaxprocs < 0:
        parser.error("--load-gomaxprocs must be at least 0 (0: Go's default)")
    if not 0 < options.logs_mb <= 9.5:
        parser.error("--logs-mb must be above 0 and at most 9.5 (kubelet rotates at 10 MiB)")
    for name in (
        "allocations",
        "blocking",
        "exec_mb",
        "reconcile",
        "scale_allocations",
        "exec_runs",
        "keystrokes",
        "shell_sessions",
        "logs_runs",
        "reconcile_rounds",
        "samples",
        "walks",
        "writes",
        "write_rounds",
    ):
        if getattr(options, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return options


async def run(options: argparse.Namespace, report: Report) -> None:
    bench = Bench(options.state_dir, real_node=bool(options.sections & REAL_NODE_SECTIONS))
    atexit.register(bench.stop_operators)
    rows: list[Row] = []
    try:
        await bench.start()
        found, template = await _with_reconciler(bench, options, report)
        rows += found
        if options.sections & STORE_SECTIONS:
            rows += await _store(bench, options, report, template)
    except BenchError:
        _show_operator_logs(bench)  # the state folder (a tmp dir by default) goes with the run
        raise
    finally:
        log("stopping the operators and the control plane")
        await bench.close()
    order = {TITLES[name]: i for i, name in enumerate(SECTIONS)}
    report.rows = sorted(rows, key=lambda row: order.get(row.section, len(order)))


def _show_operator_logs(bench: Bench, lines: int = 25) -> None:
    for process in bench.operators:
        with contextlib.suppress(OSError):
            tail = process.log_path.read_text(errors="replace").splitlines()[-lines:]
            log(f"last {len(tail)} lines of operator {process.name}'s log:\n" + "\n".join(tail))


async def _with_reconciler(
    bench: Bench, options: argparse.Namespace, report: Report
) -> tuple[list[Row], Json]:
    """Exec and reconciliation; returns their rows and the seed's status, which the store
    allocations copy."""
    rows: list[Row] = []
    operator = bench.operator(
        "reconciler", namespaces=(EXEC_NS, INTERACTIVE_NS, LOGS_NS, RECONCILE_NS)
    )
    log("starting a reconciling operator (standalone, ServiceAccount token, ACL on)")
    await operator.start()
    seed = await create_seed(bench, EXEC_NS, "seed")
    report.notes.append(
        "Store allocations copy the status the reconciler wrote for a seed allocation that "
        f"runs on a real pod (taskStates with {_events(seed)} events)."
    )
    if "exec" in options.sections:
        target = exec_stream.ExecTarget(EXEC_NS, "seed", seed["metadata"]["uid"])
        if await _exec_available(bench, operator.api, target.alloc_id):
            rows += await exec_stream.measure(
                bench, operator, target, options.exec_mb * 2**20, options.exec_runs
            )
        else:
            report.notes.append("Exec was skipped: this build has no exec endpoint.")
    if "interactive" in options.sections:
        if bench.no_real_node is None:
            shell = await interactive.create_target(
                bench, INTERACTIVE_NS, realnode.NAMESPACE_ANNOTATIONS
            )
            rows += await interactive.measure(
                bench, operator, shell, options.keystrokes, options.shell_sessions
            )
        else:
            report.notes.append(
                f"Interactive exec was skipped: it runs on the real node, and {bench.no_real_node}."
            )
    if "logs" in options.sections:
        if bench.no_real_node is None:
            size = logstream.log_bytes(options.logs_mb)
            logs_target = await logstream.create_target(
                bench, LOGS_NS, realnode.NAMESPACE_ANNOTATIONS, size
            )
            rows += await logstream.measure(bench, operator, logs_target, options.logs_runs)
        else:
            report.notes.append(
                f"Logs were skipped: they are read on the real node, and {bench.no_real_node}."
            )
    if "reconcile" in options.sections:
        rows += await reconcile.measure(
            bench, RECONCILE_NS, options.reconcile, options.reconcile_rounds, operator.pid
        )
    if "writes" in options.sections:
        seed_pod = await bench.api.get(f"/api/v1/namespaces/{EXEC_NS}/pods/seed")
        status = seed.get("status") or {}
        rows += await writes.measure(bench, seed_pod, status, options.writes, options.write_rounds)
    operator.stop()
    # Gone before the store sections: their replica must list exactly their allocations.
    await bench.api.delete(f"{collection(EXEC_NS)}/seed")
    await bench.api.delete(f"{collection(INTERACTIVE_NS)}/{interactive.NAME}")
    await bench.api.delete(f"{collection(LOGS_NS)}/{logstream.NAME}")
    for namespace in (EXEC_NS, INTERACTIVE_NS, LOGS_NS):
        await bench.api.wait_gone(collection(namespace), patience=120)
    return rows, seed.get("status") or {}


def _events(seed: Json) -> int:
    states = (seed.get("status") or {}).get("taskStates") or {}
    return sum(len(state.get("events") or []) for state in states.values())


async def _exec_available(bench: Bench, api: str, alloc_id: str) -> bool:
    """A plain GET of the exec endpoint answers 400 (not upgraded) when it exists."""
    async with bench.http.get(f"{api}/v1/client/allocation/{alloc_id}/exec") as response:
        return response.status == 400 and b"websocket" in (await response.read()).lower()


async def _store(
    bench: Bench, options: argparse.Namespace, report: Report, template: Json
) -> list[Row]:
    count = options.allocations
    namespaces = [f"bench-list-{i}" for i in range(LIST_NAMESPACES)]
    await hold_peering(bench)
    replica = bench.operator("standby", peering=PEERING, priority=0)
    log("starting a standby replica (Kopf peering lease held by a higher priority)")
    await replica.start()
    apiserver = bench.component_pid("kube-apiserver")
    readings = footprint.Readings()
    await asyncio.sleep(2.0)
    readings.empty = (replica.rss(), rss(apiserver))

    log(f"creating {count:,} allocations in {len(namespaces)} namespaces, status included")
    seconds = await populate(bench, count, namespaces, template)
    log(f"created in {seconds:.1f}s ({count / seconds:.0f}/s); waiting for the store")
    await wait_listed(bench, replica.api, count)
    await _no_pods(bench, namespaces)
    await asyncio.sleep(3.0)
    readings.live = (replica.rss(), rss(apiserver))

    log("restarting the standby replica (initial list of every allocation)")
    await replica.restart()
    await wait_listed(bench, replica.api, count)
    await asyncio.sleep(3.0)
    readings.fresh = (replica.rss(), rss(apiserver))
    report.notes.append(
        f"{count:,} allocations created in {seconds:.0f} s, spread over {len(namespaces)} "
        "namespaces, served by a standby replica: Kopf's peering lease is held by a "
        "higher-priority peer (what `kopf freeze` writes), so it serves /v1 from its watch-fed "
        "store and reconciles nothing (no pods for them; checked)."
    )

    rows: list[Row] = []
    # Blocking first: its memory figure is a difference of two readings, cleanest on a replica
    # that has just synced (listing and paging leave transient buffers that are freed later).
    if "blocking" in options.sections:
        rows += await blocking.measure(
            bench,
            replica,
            namespace=namespaces[0],
            target="alloc-00000",
            count=options.blocking,
            apiserver_pid=apiserver,
        )
    if "listing" in options.sections:
        rows += await listing.measure(
            bench,
            replica,
            count,
            listing.ListingOptions(
                samples=options.samples,
                series_budget=options.series_budget,
                rps_seconds=options.rps_seconds,
                concurrency=options.concurrency,
                kubectl_samples=options.kubectl_samples,
            ),
        )
    if "reads" in options.sections:
        rows += await reads.measure(
            bench,
            replica,
            namespaces[0],
            "alloc-00000",
            options.rps_seconds,
            gomaxprocs=options.load_gomaxprocs,
        )
    if "paging" in options.sections:
        rows += await paging.measure(
            bench, replica, count, paging.PagingOptions(options.per_page, options.walks)
        )
    await _no_pods(bench, namespaces)
    readings.peak = replica.peak_rss()
    if "scale" in options.sections:
        rows += await scale.measure(
            bench,
            replica,
            namespaces,
            template,
            scale.ScaleOptions(options.scale_allocations, options.samples, options.series_budget),
            already=count,
            empty_rss=readings.empty[0],
            apiserver_pid=apiserver,
        )
        await _no_pods(bench, namespaces)
    replica.stop()
    if "footprint" in options.sections:
        rows += footprint.rows(readings, count)
    return rows


async def _no_pods(bench: Bench, namespaces: list[str]) -> None:
    for namespace in namespaces:
        pods = await bench.api.get(f"/api/v1/namespaces/{namespace}/pods?limit=1")
        if pods.get("items"):
            raise BenchError(f"the standby replica reconciled: pods appeared in {namespace}")


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    began = time.monotonic()
    today = datetime.datetime.now().astimezone()
    cpu_start = cpu_snapshot()
    load_start = load_average()
    others_start = other_control_planes()
    report = Report(title=f"allocbridge benchmarks, {today:%Y-%m-%d %H:%M %Z}")
    try:
        asyncio.run(_main(options, report))
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    except BenchError as exc:
        log(f"error: {exc}")
        return 1
    minutes = (time.monotonic() - began) / 60
    others, share = other_cpu_share(cpu_start, cpu_snapshot())
    busy = share >= 0.10 or others_start > 0
    report.heading = [
        f"Date: {today:%Y-%m-%d %H:%M %Z}; whole suite {minutes:.1f} min"
        + (f" (over the {BUDGET_MINUTES}-minute budget)" if minutes > BUDGET_MINUTES else ""),
        f"Machine: {machine()}",
        f"Scale: {options.allocations:,} allocations, {options.blocking:,} blocking queries, "
        f"{options.exec_mb} MiB exec, {options.reconcile:,} reconciled; "
        f"{options.samples} samples per latency series, {options.concurrency} clients for rates",
        f"Load: load average {load_start} at the start, {load_average()} at the end; other "
        f"processes used {others:.0f} CPU-seconds ({share:.0%} of the machine) during the run; "
        f"{others_start} other control plane(s) running at the start"
        + (" — **the machine was busy**" if busy else ""),
        "Everything shares the machine: control plane, operator and the benchmark's clients.",
    ]
    report.notes.append(
        "Ratio = allocbridge ÷ peer in the row's unit: below 1 is less time or memory, above 1 "
        "is more throughput. ACL is on: the client sends a ServiceAccount token bound to "
        "allocbridge-admin (decisions cached for 10 s); peers use the admin certificate."
    )
    text = render_report(report)
    print(text)
    if options.output is not None:
        options.output.write_text(text)
    missed = report.missed
    log(f"{len(missed)} row(s) missed a goal" if missed else "every goal was met")
    return 0


async def _main(options: argparse.Namespace, report: Report) -> None:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if task is not None:
            loop.add_signal_handler(signum, task.cancel)
    try:
        await run(options, report)
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
    finally:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signum)


if __name__ == "__main__":
    sys.exit(main())
