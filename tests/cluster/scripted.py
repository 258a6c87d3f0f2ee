"""Tasks that run a small BusyBox script in a real container, for behaviour tests on the real node.

The script writes the name of every signal it traps to `/local/signals` (one a line; `/local`
is the task's emptyDir, so the record outlives a container restart) and ends with the exit code
a test writes to `/tmp/exit` (in the container's own writable layer, so a restarted container
starts without it), so a test can see what reached the process and can end a container as if
its program had exited by itself. Three ways to run it, as the PID 1 rules of
docs/kubernetes-mapping.md distinguish them:

* `bare`: the shell is the container's PID 1 (a signal without a trap never reaches it);
* `tini`: tini is PID 1 and forwards signals to the shell;
* `children`: as `tini`, and the shell also keeps a child process (`sleep`) running.

(A shell that waits always has a child, its `sleep`; a PID 1 with no child at all is plain
`sleep`: `idle_task`.)
"""

from __future__ import annotations

from typing import Any, Literal

IMAGE = "busybox:1.37"
SIGNALS_FILE = "/local/signals"
EXIT_FILE = "/tmp/exit"

Init = Literal["bare", "tini", "children"]


def script(traps: tuple[str, ...], *, exits_on: tuple[str, ...] = (), child: bool = False) -> str:
    """The shell program: trap `traps`, record them, wait for the exit file; a signal of
    `exits_on` is recorded too, and then the program exits 0 (a clean shutdown)."""
    lines = [f"trap 'echo {sig} >> {SIGNALS_FILE}' {sig}" for sig in traps]
    lines += [f"trap 'echo {sig} >> {SIGNALS_FILE}; exit 0' {sig}" for sig in exits_on]
    if child:
        lines.append("sleep 100000 &")
    # `sleep & wait` rather than `sleep`: a trapped signal interrupts `wait` at once.
    lines.append(f"while [ ! -e {EXIT_FILE} ]; do sleep 0.1 & wait $!; done")
    lines.append(f'exit "$(cat {EXIT_FILE})"')
    return "\n".join(lines)


def scripted_task(
    name: str = "main",
    *,
    traps: tuple[str, ...] = (),
    exits_on: tuple[str, ...] = (),
    init: Init = "tini",
    **fields: Any,
) -> dict[str, Any]:
    """A docker task that runs `script(...)` under `init`; `fields` go into the task."""
    program = script(traps, exits_on=exits_on, child=init == "children")
    if init == "bare":
        command, args = "sh", ["-c", program]
    else:
        command, args = "/sbin/tini", ["--", "sh", "-c", program]
    return {
        "name": name,
        "driver": "docker",
        "config": {"image": IMAGE, "command": command, "args": args},
        **fields,
    }


def idle_task(name: str = "main", **fields: Any) -> dict[str, Any]:
    """A task whose PID 1 is `sleep` itself: no signal handler, no child, no init."""
    config = {"image": IMAGE, "command": "sleep", "args": ["100000"]}
    return {"name": name, "driver": "docker", "config": config, **fields}


def end_container(kubectl: Any, namespace: str, pod: str, container: str, code: int) -> None:
    """Make the task's program exit with `code`, as if it had ended by itself."""
    kubectl(
        "exec", "-n", namespace, pod, "-c", container, "--",
        "sh", "-c", f"echo {code} > {EXIT_FILE}.tmp && mv {EXIT_FILE}.tmp {EXIT_FILE}",
    )  # fmt: skip


def trapped_signals(kubectl: Any, namespace: str, pod: str, container: str) -> list[str]:
    """The signals the task's script has trapped so far, oldest first."""
    done = kubectl(
        "exec", "-n", namespace, pod, "-c", container, "--",
        "sh", "-c", f"cat {SIGNALS_FILE} 2>/dev/null || true",
    )  # fmt: skip
    signals: list[str] = done.stdout.split()
    return signals


def process_states(kubectl: Any, namespace: str, pod: str, container: str) -> dict[str, str]:
    """The state letter (R, S, T, ...) of each process of the container but the reader's own,
    by command name (the last one wins for names that repeat): `T` is a stopped process."""
    done = kubectl(
        "exec", "-n", namespace, pod, "-c", container, "--",
        "sh", "-c",
        'for f in /proc/[0-9]*/stat; do [ "$f" = /proc/$$/stat ] || cat "$f" 2>/dev/null; done;'
        " true",
    )  # fmt: skip
    states: dict[str, str] = {}
    for line in done.stdout.splitlines():
        name = line[line.find("(") + 1 : line.rfind(")")]
        state = line[line.rfind(")") + 2 :].split(" ", 1)[0]
        if name not in ("cat",):
            states[name] = state
    return states


#: A file name no shell may run (a shell would create `pwned` in its working directory):
#: `alloc fs` must pass paths as arguments, never as shell text.
HOSTILE_NAME = "$(touch pwned);`touch pwned` -n x"
FILES_SCRIPT = f"""
mkdir -p /alloc/data /local/sub
printf 'hello\\n' > /alloc/data/hello.txt
printf '0123456789' > /local/digits.txt
printf '{{"a":1}}' > /local/conf.json
printf 'odd' > '/alloc/data/{HOSTILE_NAME}'
ln -s hello.txt /alloc/data/link
ln -s /etc/passwd /local/passwd
ln -s ../../etc /alloc/data/up
i=0
while true; do
    i=$((i + 1))
    echo "out $i"
    echo "err $i" >&2
    echo "line $i" >> /alloc/data/grow.log
    sleep 1
done
"""


def files_task(name: str = "main", **fields: Any) -> dict[str, Any]:
    """A task that lays out files for `alloc fs` (`FILES_SCRIPT`: text, JSON, a file with a
    hostile name, symlinks inside and out of their directory, a growing log) and writes
    `out N` to stdout and `err N` to stderr each second."""
    config = {"image": IMAGE, "command": "sh", "args": ["-c", FILES_SCRIPT]}
    return {"name": name, "driver": "docker", "config": config, **fields}
