"""Checks on an allocation spec that end as Nomad `Failed Validation`, never as a crash.

The CRD schema rejects most mistakes at `kubectl apply`; this module is the operator's own
word on what it can run. It covers what a schema cannot (drivers the operator does not know,
references between ports, services and checks, Go durations, Nomad's restart-policy rules) and
repeats the schema's rules that matter, because objects may predate a stricter CRD.

Every `Problem` names the task (empty for group-level problems, which fail every task) and the
camelCase field path inside `spec`, so the reconciler can write one task event per problem.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from allocbridge.model.durations import DurationError, parse_go_duration
from allocbridge.model.spec import (
    DRIVER_DOCKER,
    EXEC_DRIVERS,
    KNOWN_DRIVERS,
    AllocationSpec,
    Check,
    Service,
    Task,
)

_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_PORT_LABEL: Final = re.compile(r"[A-Za-z0-9_]+")
_SERVICE_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?")
_CRON_FIELD: Final = re.compile(r"[^\s,/]+")
_TIMEZONE: Final = re.compile(r"Local|UTC|[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*")

#: Nomad refuses restart intervals below this (seconds).
RESTART_MIN_INTERVAL: Final = 5.0
#: Nomad's minimum check interval and timeout (seconds).
CHECK_MIN_INTERVAL: Final = 1.0
MIN_MEMORY_MB: Final = 10
MIN_DISK_MB: Final = 10
#: Signal names a kill signal may use (POSIX plus the Linux real-time range).
SIGNALS: Final = frozenset(
    {
        "SIGABRT", "SIGALRM", "SIGBUS", "SIGCHLD", "SIGCONT", "SIGFPE", "SIGHUP", "SIGILL",
        "SIGINT", "SIGIO", "SIGIOT", "SIGKILL", "SIGPIPE", "SIGPROF", "SIGPWR", "SIGQUIT",
        "SIGSEGV", "SIGSTKFLT", "SIGSTOP", "SIGSYS", "SIGTERM", "SIGTRAP", "SIGTSTP", "SIGTTIN",
        "SIGTTOU", "SIGURG", "SIGUSR1", "SIGUSR2", "SIGVTALRM", "SIGWINCH", "SIGXCPU", "SIGXFSZ",
    }
    | {f"SIGRTMIN+{n}" for n in range(1, 16)}
    | {f"SIGRTMAX-{n}" for n in range(1, 15)}
    | {"SIGRTMIN", "SIGRTMAX"}
)  # fmt: skip


@dataclass(frozen=True)
class Problem:
    """One reason the allocation cannot run; `task` is "" for group-level problems."""

    task: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"task {self.task!r}: " if self.task else ""
        return f"{where}{self.field}: {self.message}"


def validate(spec: AllocationSpec) -> list[Problem]:
    """Every problem in `spec`; an empty list means the operator can run it."""
    return [*_group_problems(spec), *_task_list_problems(spec), *_per_task_problems(spec)]


def parse_and_validate(raw: Mapping[str, Any]) -> tuple[AllocationSpec | None, list[Problem]]:
    """Parse the raw `spec` and validate it; a spec that does not parse gives problems too."""
    try:
        spec = AllocationSpec.model_validate(raw)
    except ValidationError as exc:
        return None, [_problem_from_error(raw, err) for err in exc.errors()]
    return spec, validate(spec)


def _problem_from_error(raw: Mapping[str, Any], err: ErrorDetails) -> Problem:
    loc = tuple(err["loc"])
    task = ""
    if len(loc) >= 2 and loc[0] == "tasks" and isinstance(loc[1], int):
        tasks = raw.get("tasks")
        if isinstance(tasks, list) and loc[1] < len(tasks) and isinstance(tasks[loc[1]], dict):
            task = str(tasks[loc[1]].get("name", ""))
    return Problem(task, _path(loc), err["msg"])


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "spec"


def _duration(
    task: str, field: str, text: str | None, *, minimum: float = 0.0, what: str = ""
) -> Iterator[Problem]:
    if text is None:
        return
    try:
        seconds = parse_go_duration(text)
    except DurationError:
        yield Problem(task, field, f"{text!r} is not a Go duration such as 30s, 5m or 1h30m")
        return
    if seconds < minimum:
        limit = f"{minimum:g}s" if minimum else "0s"
        yield Problem(task, field, f"{what or 'duration'} must be at least {limit}, got {text}")


def _group_problems(spec: AllocationSpec) -> Iterator[Problem]:
    group = spec.task_group
    if not _DNS_LABEL.fullmatch(group.name) or len(group.name) > 63:
        yield Problem(
            "",
            "taskGroup.name",
            f"{group.name!r} must be a DNS-1123 label (lowercase letters, digits and '-', "
            "at most 63 characters): it becomes a label of the pod",
        )
    if not spec.job.id or any(c.isspace() for c in spec.job.id):
        yield Problem("", "job.id", "the job ID must be non-empty and contain no whitespace")
    if not 1 <= spec.job.priority <= 100:
        yield Problem("", "job.priority", f"priority must be 1 to 100, got {spec.job.priority}")
    if group.count < 1:
        yield Problem("", "taskGroup.count", "count must be at least 1")
    if group.index < 0 or group.index >= group.count:
        yield Problem(
            "", "taskGroup.index", f"index {group.index} must be lower than count {group.count}"
        )
    if group.ephemeral_disk.size_mb < MIN_DISK_MB:
        yield Problem("", "taskGroup.ephemeralDisk.sizeMB", f"must be at least {MIN_DISK_MB} MB")
    yield from _duration("", "taskGroup.shutdownDelay", group.shutdown_delay)
    yield from _restart_problems(spec)
    yield from _network_problems(spec)
    for i, service in enumerate(group.services):
        yield from _service_problems(spec, "", f"taskGroup.services[{i}]", service, group=True)
    yield from _duplicate_service_names(spec)


def _restart_problems(spec: AllocationSpec) -> Iterator[Problem]:
    policy = spec.task_group.restart_policy
    base = "taskGroup.restartPolicy"
    bad = [*_duration("", f"{base}.interval", policy.interval)]
    bad += _duration("", f"{base}.delay", policy.delay)
    yield from bad
    if policy.attempts is not None and policy.attempts < 0:
        yield Problem("", f"{base}.attempts", "attempts must not be negative")
        return
    if bad:
        return
    effective = spec.restart_policy()
    if effective.attempts == 0 and effective.mode != "fail":
        yield Problem(
            "", f"{base}.mode", "a restart policy with 0 attempts is ambiguous unless mode is fail"
        )
    if effective.interval_seconds < RESTART_MIN_INTERVAL:
        yield Problem(
            "", f"{base}.interval", f"interval must be at least {RESTART_MIN_INTERVAL:g}s"
        )
    elif effective.attempts * effective.delay_seconds > effective.interval_seconds:
        yield Problem(
            "",
            base,
            f"{effective.attempts} restarts with a delay of {effective.delay_seconds:g}s do not "
            f"fit in an interval of {effective.interval_seconds:g}s",
        )


def _network_problems(spec: AllocationSpec) -> Iterator[Problem]:
    networks = spec.task_group.networks
    if len(networks) > 1:
        yield Problem("", "taskGroup.networks", "a group has at most one network")
    labels: Counter[str] = Counter()
    for n, net in enumerate(networks):
        base = f"taskGroup.networks[{n}]"
        for i, dyn in enumerate(net.dynamic_ports):
            labels[dyn.label] += 1
            yield from _port_label(f"{base}.dynamicPorts[{i}].label", dyn.label)
            yield from _port_number(f"{base}.dynamicPorts[{i}].to", dyn.to, allow_unset=True)
        for i, res in enumerate(net.reserved_ports):
            labels[res.label] += 1
            yield from _port_label(f"{base}.reservedPorts[{i}].label", res.label)
            yield from _port_number(f"{base}.reservedPorts[{i}].value", res.value)
            yield from _port_number(f"{base}.reservedPorts[{i}].to", res.to, allow_unset=True)
    for label, count in labels.items():
        if count > 1:
            yield Problem("", "taskGroup.networks", f"port label {label!r} is used {count} times")
    listening = Counter(p.container_port for p in spec.ports())
    for port, count in sorted(listening.items()):
        if count > 1 and 0 < port <= 65535:
            yield Problem(
                "", "taskGroup.networks", f"{count} ports would all listen on port {port}"
            )


def _port_label(field: str, label: str) -> Iterator[Problem]:
    if not _PORT_LABEL.fullmatch(label):
        yield Problem("", field, f"port label {label!r} may only hold letters, digits and '_'")


def _port_number(field: str, value: int | None, *, allow_unset: bool = False) -> Iterator[Problem]:
    if value is None or (allow_unset and value in (0, -1)):
        return
    if not 1 <= value <= 65535:
        yield Problem("", field, f"port {value} is outside 1-65535")


def _duplicate_service_names(spec: AllocationSpec) -> Iterator[Problem]:
    names: Counter[str] = Counter(s.name for s in spec.task_group.services)
    for task in spec.tasks:
        names.update(s.name for s in task.services)
    for name, count in names.items():
        if count > 1:
            yield Problem("", "services", f"service name {name!r} is registered {count} times")


def _service_problems(
    spec: AllocationSpec, task: str, base: str, service: Service, *, group: bool
) -> Iterator[Problem]:
    if not _SERVICE_NAME.fullmatch(service.name) or len(service.name) > 63:
        yield Problem(
            task,
            f"{base}.name",
            f"service name {service.name!r} must be letters, digits and '-' (RFC 1123), "
            "at most 63 characters",
        )
    if service.port_label is not None:
        yield from _port_reference(spec, task, f"{base}.portLabel", service.port_label)
    check_names: Counter[str] = Counter()
    for i, check in enumerate(service.checks):
        check_names[check.display_name(service.name)] += 1
        yield from _check_problems(spec, task, f"{base}.checks[{i}]", service, check, group=group)
    for name, count in check_names.items():
        if count > 1:
            yield Problem(task, f"{base}.checks", f"check name {name!r} is used {count} times")


def _port_reference(spec: AllocationSpec, task: str, field: str, label: str) -> Iterator[Problem]:
    if label.isdigit():
        yield from (Problem(task, p.field, p.message) for p in _port_number(field, int(label)))
        return
    if label not in {p.label for p in spec.ports()}:
        yield Problem(task, field, f"port label {label!r} is not a port of the group network")


def _check_problems(
    spec: AllocationSpec, task: str, base: str, service: Service, check: Check, *, group: bool
) -> Iterator[Problem]:
    yield from _duration(
        task, f"{base}.interval", check.interval, minimum=CHECK_MIN_INTERVAL, what="interval"
    )
    yield from _duration(
        task, f"{base}.timeout", check.timeout, minimum=CHECK_MIN_INTERVAL, what="timeout"
    )
    if check.type == "http" and not check.path:
        yield Problem(task, f"{base}.path", "http checks need a path")
    if check.type == "script":
        if not check.command:
            yield Problem(task, f"{base}.command", "script checks need a command")
        if group:
            yield Problem(
                task,
                f"{base}.type",
                "script checks run inside a task: put the service on a task",
            )
    if check.type in ("http", "tcp", "grpc"):
        label = check.port_label or service.port_label
        if label is None:
            yield Problem(
                task, f"{base}.portLabel", f"{check.type} checks need a port label or a service one"
            )
        elif check.port_label is not None:
            yield from _port_reference(spec, task, f"{base}.portLabel", check.port_label)


def _task_list_problems(spec: AllocationSpec) -> Iterator[Problem]:
    if not spec.tasks:
        yield Problem("", "tasks", "an allocation needs at least one task")
        return
    for name, count in Counter(t.name for t in spec.tasks).items():
        if count > 1:
            yield Problem(name, "tasks", f"task name {name!r} is used {count} times")
    leaders = [t.name for t in spec.tasks if t.leader]
    if len(leaders) > 1:
        for name in leaders:
            yield Problem(name, "tasks", f"only one task may be the leader, found {len(leaders)}")
    if all(t.hook in ("prestart", "poststop") for t in spec.tasks):
        yield Problem(
            "",
            "tasks",
            "at least one task must be a main or poststart task: prestart tasks "
            "only run before them",
        )


def _per_task_problems(spec: AllocationSpec) -> Iterator[Problem]:
    for i, task in enumerate(spec.tasks):
        yield from _task_problems(spec, i, task)


def _task_problems(spec: AllocationSpec, i: int, task: Task) -> Iterator[Problem]:
    base = f"tasks[{i}]"
    name = task.name
    if not _DNS_LABEL.fullmatch(name) or len(name) > 63:
        yield Problem(
            name,
            f"{base}.name",
            f"{name!r} must be a DNS-1123 label (lowercase letters, digits and '-', at most "
            "63 characters): it becomes the container name",
        )
    if task.driver not in KNOWN_DRIVERS:
        yield Problem(
            name,
            f"{base}.driver",
            f"unsupported driver {task.driver!r}: allocbridge runs "
            f"{', '.join(KNOWN_DRIVERS[:-1])} and {KNOWN_DRIVERS[-1]} tasks",
        )
    elif task.driver == DRIVER_DOCKER and not task.config.image:
        yield Problem(name, f"{base}.config.image", "docker tasks need config.image")
    elif task.driver in EXEC_DRIVERS and not task.config.command:
        yield Problem(name, f"{base}.config.command", f"{task.driver} tasks need config.command")
    if task.hook == "poststop":
        yield Problem(
            name,
            f"{base}.lifecycle.hook",
            "poststop tasks are not supported: a pod cannot start containers after its main "
            "containers have stopped",
        )
    yield from _duration(name, f"{base}.killTimeout", task.kill_timeout)
    yield from _duration(name, f"{base}.shutdownDelay", task.shutdown_delay)
    if task.kill_signal is not None and task.kill_signal not in SIGNALS:
        yield Problem(
            name, f"{base}.killSignal", f"{task.kill_signal!r} is not a signal name like SIGINT"
        )
    res = task.resources
    if res.cpu < 1:
        yield Problem(name, f"{base}.resources.cpu", "cpu must be at least 1 MHz")
    if res.memory_mb < MIN_MEMORY_MB:
        yield Problem(
            name, f"{base}.resources.memoryMB", f"memoryMB must be at least {MIN_MEMORY_MB}"
        )
    if res.memory_max_mb is not None and res.memory_max_mb < res.memory_mb:
        yield Problem(
            name,
            f"{base}.resources.memoryMaxMB",
            f"memoryMaxMB ({res.memory_max_mb}) must be at least memoryMB ({res.memory_mb})",
        )
    for key in task.env:
        if not key or "=" in key:
            yield Problem(name, f"{base}.env", f"{key!r} is not an environment variable name")
    if task.log_config.max_files < 1 or task.log_config.max_file_size_mb < 1:
        yield Problem(name, f"{base}.logConfig", "maxFiles and maxFileSizeMB must be at least 1")
    for s, service in enumerate(task.services):
        yield from _service_problems(spec, name, f"{base}.services[{s}]", service, group=False)
    if task.schedule is not None:
        yield from _schedule_problems(name, f"{base}.schedule.cron", task)


def _schedule_problems(name: str, base: str, task: Task) -> Iterator[Problem]:
    assert task.schedule is not None
    cron = task.schedule.cron
    start = cron.start.split()
    if len(start) != 6 or not all(_CRON_FIELD.fullmatch(f) for f in start):
        yield Problem(
            name,
            f"{base}.start",
            f"{cron.start!r} must be 6 cron fields (minute hour day month weekday year) "
            "without ',' or '/'",
        )
    end = cron.end.split()
    if len(end) != 2 or not all(f.isdigit() for f in end):
        yield Problem(name, f"{base}.end", f"{cron.end!r} must be 'minute hour', e.g. '0 16'")
    elif not (0 <= int(end[0]) <= 59 and 0 <= int(end[1]) <= 23):
        yield Problem(name, f"{base}.end", f"{cron.end!r} is not a time of day")
    if cron.timezone is not None and not _TIMEZONE.fullmatch(cron.timezone):
        yield Problem(
            name, f"{base}.timezone", f"{cron.timezone!r} is not a time zone like Europe/Berlin"
        )
