"""The Go clients in `benchmarks/goclients`, built with the local Go; each call a subprocess.

They are the kind of client the nomad CLI is (net/http, the official `nomad/api` SDK), so their
rows measure what a Nomad user's tools pay, beside the Python clients' rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Final

from benchmarks.harness import REPO, BenchError, Json, log
from benchmarks.table import Latencies
from benchmarks.timing import Series

SOURCE: Final = REPO / "benchmarks" / "goclients"
BINARY: Final = REPO / ".cache" / "bench" / "goclients"


async def build() -> Path | None:
    """The built binary (the Go build cache makes a rebuild cheap); None without Go."""
    go = shutil.which("go")
    if go is None:
        log("no Go on PATH: the Go client rows are left out")
        return None
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
    BINARY.parent.mkdir(parents=True, exist_ok=True)
    compiler = await asyncio.create_subprocess_exec(
        go, "build", "-o", str(BINARY), ".", cwd=SOURCE, env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await compiler.communicate()
    if compiler.returncode != 0:
        raise BenchError(f"go build of {SOURCE}: {err.decode(errors='replace')}")
    return BINARY


async def run(binary: Path, command: str, *args: str, gomaxprocs: int = 0) -> Json:
    """`goclients <command> <args>`'s JSON output; its stderr in the error when it fails.

    `gomaxprocs` above 0 caps the threads that run the client's Go code (`GOMAXPROCS`); 0 leaves
    Go's default, one per core.
    """
    env = {**os.environ, "GOMAXPROCS": str(gomaxprocs)} if gomaxprocs > 0 else None
    process = await asyncio.create_subprocess_exec(
        str(binary),
        command,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise BenchError(f"goclients {command}: {err.decode(errors='replace')}")
    result: Json = json.loads(out)
    return result


async def one_client_series(
    binary: Path, url: str, *, requests: int, seconds: float, token: str = ""
) -> Series:
    """`goclients load` with one client: up to `requests` GETs of `url` one after another,
    each body read as it arrives and discarded."""
    args = ["-url", url, "-clients", "1", "-requests", str(requests), "-seconds", str(seconds)]
    result = await run(binary, "load", *args, *(["-token", token] if token else []))
    return Series(Latencies.of(result["latencies"]), int(result["bytes"]))


@contextlib.asynccontextmanager
async def listening(argv: Sequence[str], what: str, patience: float) -> AsyncIterator[int]:
    """A child process that prints the port it listens on, for as long as the block runs:
    yields that port; killed afterwards (it may have ended on its own, which is not an error
    here: the block's own error, if any, is the one that tells)."""
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, cwd=REPO)
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), patience)
        if not line.strip().isdigit():
            raise BenchError(f"{what} did not start")
        yield int(line)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
