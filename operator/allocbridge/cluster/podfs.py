"""Reading files inside a task's container through `pods/exec` (what `alloc fs` serves).

One fixed shell script (`SCRIPT`) does the work with BusyBox's (or coreutils') `realpath`,
`stat -c`, `head -c`, `tail -c`; paths and numbers reach it only as its arguments (`sh -c
SCRIPT allocfs OP ROOT PATH ...`), never inside the script text. Before any operation it checks,
inside the container where the files are, that the path exists (exit 44: no such path) and that
its real path (symlinks resolved) lies in ROOT's real path (exit 46: escapes). Then:

- `stat`: `MODE SIZE MTIME` (hex mode, bytes, Unix seconds), a newline, and a regular file's
  first 512 bytes (for the content type);
- `ls`: one `MODE SIZE MTIME ./NAME` line per entry (lstat: a symlink is listed as one; an
  entry removed between the listing and its stat is left out); exit 47 when the path is not a
  directory;
- `read OFFSET LIMIT ORIGIN FOLLOW`: `ok START` and a newline, then the bytes from START (OFFSET
  from the start, or back from the end for ORIGIN `end`), at most LIMIT of them (0: no limit),
  and with FOLLOW `1` what is appended later (`tail -f`) until stdin closes, which is how the
  follower ends when the client goes away; exit 48 for a directory.

Numbers in `ls` output are parsed from the start of each line, and a line that does not start
like an entry continues the previous entry's name (a name with a newline in it).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

from allocbridge.cluster.errors import KubernetesError, NotFoundError
from allocbridge.cluster.podexec import (
    Channel,
    ContainerNotRunningError,
    Exited,
    Output,
    PodExecutor,
)

SCRIPT: Final = r"""
op=$1 root=$2 p=$3
shift 3
[ -e "$p" ] || [ -L "$p" ] || exit 44
r=$(realpath "$root" 2>/dev/null) || exit 44
t=$(realpath "$p" 2>/dev/null) || exit 44
case "$t" in "$r" | "$r"/*) ;; *) [ "$r" = / ] || exit 46 ;; esac
case "$op" in
stat)
    stat -c '%f %s %Y' "$t" || exit 1
    if [ -f "$t" ]; then head -c 512 "$t"; fi ;;
ls)
    [ -d "$t" ] || exit 47
    cd "$t" || exit 1
    set --
    for f in ./* ./.[!.]* ./..?*; do
        if [ -e "$f" ] || [ -L "$f" ]; then set -- "$@" "$f"; fi
    done
    [ $# -eq 0 ] || stat -c '%f %s %Y %n' "$@" 2>/dev/null || true ;;
read)
    [ -d "$t" ] && exit 48
    start=$1
    if [ "$3" = end ]; then
        size=$(stat -c %s "$t") || exit 1
        start=$((size - $1))
        [ "$start" -lt 0 ] && start=0
    fi
    echo "ok $start"
    from=$((start + 1))
    if [ "$4" = 1 ]; then
        tail -c +"$from" -f "$t" &
        follower=$!
        cat >/dev/null
        kill "$follower" 2>/dev/null
    elif [ "$2" -gt 0 ]; then
        tail -c +"$from" "$t" | head -c "$2"
    else
        tail -c +"$from" "$t"
    fi ;;
*) exit 2 ;;
esac
"""

NOT_FOUND: Final = 44
ESCAPES: Final = 46
NOT_A_DIRECTORY: Final = 47
IS_A_DIRECTORY: Final = 48
#: The shell's code for a command it cannot find (a container without the tools).
NO_COMMAND: Final = 127
#: What the runtime says when the container has no `sh` at all (Go's os/exec text, which runc
#: and crun pass on): the same lack of a tool, found before the script could start.
NO_EXECUTABLE: Final = "executable file not found"
#: Bytes of stderr kept for an error message.
STDERR_KEPT: Final = 4096

_ENTRY: Final = re.compile(rb"^([0-9a-f]+) (\d+) (\d+) \./")


class FsError(Exception):
    """The operation failed: `code` is the script's exit code (None: the exec itself failed;
    `not_running` when Kubernetes refused it because the pod or its container is gone or not
    running)."""

    def __init__(self, message: str, *, code: int | None = None, not_running: bool = False):
        super().__init__(message)
        self.message = message
        self.code = code
        self.not_running = not_running


@dataclass(frozen=True)
class Stat:
    mode: int
    size: int
    mtime: int
    head: bytes  # a regular file's first 512 bytes


@dataclass(frozen=True)
class Entry:
    name: str
    mode: int
    size: int
    mtime: int


@dataclass(frozen=True)
class Where:
    """The container to read in and the directory the path must stay in."""

    namespace: str
    pod: str
    container: str
    root: str


def parse_stat(output: bytes) -> Stat:
    line, _, head = output.partition(b"\n")
    fields = line.split()
    if len(fields) != 3:
        raise FsError(f"unreadable stat output: {line[:200]!r}")
    try:
        return Stat(int(fields[0], 16), int(fields[1]), int(fields[2]), head)
    except ValueError:
        raise FsError(f"unreadable stat output: {line[:200]!r}") from None


def parse_listing(output: bytes) -> list[Entry]:
    entries: list[tuple[int, int, int, bytearray]] = []
    for line in output.split(b"\n"):
        found = _ENTRY.match(line)
        if found:
            name = bytearray(line[found.end() :])
            entries.append((int(found[1], 16), int(found[2]), int(found[3]), name))
        elif entries:
            entries[-1][3].extend(b"\n" + line)
        elif line:
            raise FsError(f"unreadable stat output: {line[:200]!r}")
    if entries and entries[-1][3].endswith(b"\n"):  # the output's final newline
        del entries[-1][3][-1:]
    return [
        Entry(bytes(name).decode(errors="replace"), mode, size, mtime)
        for mode, size, mtime, name in entries
    ]


class PodFiles:
    """Runs `SCRIPT` in containers through `executor`."""

    def __init__(self, executor: PodExecutor) -> None:
        self._executor = executor

    def _argv(self, op: str, where: Where, path: str, *args: str) -> list[str]:
        return ["sh", "-c", SCRIPT, "allocfs", op, where.root, path, *args]

    async def _run(self, argv: Sequence[str], where: Where) -> bytes:
        out = bytearray()
        async with self._chunks(argv, where) as chunks:
            async for chunk in chunks:
                out += chunk
        return bytes(out)

    async def stat(self, where: Where, path: str) -> Stat:
        return parse_stat(await self._run(self._argv("stat", where, path), where))

    async def list(self, where: Where, path: str) -> list[Entry]:
        return parse_listing(await self._run(self._argv("ls", where, path), where))

    @asynccontextmanager
    async def read(
        self,
        where: Where,
        path: str,
        *,
        offset: int,
        limit: int = 0,
        origin: str = "start",
        follow: bool = False,
    ) -> AsyncIterator[tuple[int, AsyncIterator[bytes]]]:
        """(the file offset the data starts at, the data); the checks' failures raise here,
        before the block runs; a failure later ends the data with FsError."""
        argv = self._argv("read", where, path, str(offset), str(limit), origin, str(int(follow)))
        async with self._chunks(argv, where) as chunks:
            header = bytearray()
            rest = b""
            async for chunk in chunks:
                header += chunk
                if b"\n" in header:
                    line, _, rest = bytes(header).partition(b"\n")
                    break
            else:
                raise FsError("the read ended before it started", code=0)
            fields = line.split()
            if len(fields) != 2 or fields[0] != b"ok" or not fields[1].isdigit():
                raise FsError(f"unreadable read output: {line[:200]!r}")

            async def data() -> AsyncIterator[bytes]:
                if rest:
                    yield rest
                async for chunk in chunks:
                    yield chunk

            yield int(fields[1]), data()

    @asynccontextmanager
    async def _chunks(
        self, argv: Sequence[str], where: Where
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """stdout as it comes; FsError when the command fails (at its exit)."""
        try:
            async with self._executor.open(
                where.namespace, where.pod, where.container, argv, tty=False
            ) as stream:

                async def chunks() -> AsyncIterator[bytes]:
                    errors = bytearray()
                    async for event in stream.events():
                        if isinstance(event, Output):
                            if event.channel == Channel.STDOUT:
                                yield event.data
                            elif len(errors) < STDERR_KEPT:
                                errors += event.data
                        elif isinstance(event, Exited) and event.exit_code != 0:
                            text = errors.decode(errors="replace").strip()
                            raise FsError(
                                text or f"exit code {event.exit_code}", code=event.exit_code
                            )

                yield chunks()
        except (NotFoundError, ContainerNotRunningError) as exc:
            raise FsError(exc.message, not_running=True) from exc
        except KubernetesError as exc:
            code = NO_COMMAND if NO_EXECUTABLE in exc.message else None
            raise FsError(exc.message, code=code) from exc
