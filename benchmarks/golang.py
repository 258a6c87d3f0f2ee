"""The Go clients in `benchmarks/goclients`, built with the local Go; each call a subprocess.

They are the kind of client the nomad CLI is (net/http, the official `nomad/api` SDK), so their
rows measure what a Nomad user's tools pay, beside the Python clients' rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Final

from benchmarks.harness import REPO, BenchError, Json, log

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
