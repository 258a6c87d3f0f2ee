"""The Allocation spec models and `validation.validate` (pure, no I/O)."""

from __future__ import annotations

import copy
import types
from typing import Any

import pytest

from allocbridge.model.spec import (
    DYNAMIC_PORT_MIN,
    AllocationSpec,
    EffectiveRestartPolicy,
    Resources,
    Task,
    parse_spec,
)
from allocbridge.model.validation import Problem, parse_and_validate, validate


def minimal() -> dict[str, Any]:
    return {
        "job": {"id": "web"},
        "taskGroup": {"name": "web"},
        "tasks": [{"name": "server", "driver": "docker", "config": {"image": "nginx:1.27"}}],
    }


def full() -> dict[str, Any]:
    return {
        "job": {
            "id": "shop",
            "name": "Shop",
            "type": "service",
            "priority": 70,
            "datacenters": ["dc1", "dc2"],
            "region": "eu",
            "meta": {"owner": "team"},
            "version": 3,
        },
        "taskGroup": {
            "name": "api",
            "index": 2,
            "count": 3,
            "restartPolicy": {"attempts": 4, "interval": "10m", "delay": "30s", "mode": "delay"},
            "shutdownDelay": "5s",
            "ephemeralDisk": {"sticky": True, "sizeMB": 500, "migrate": True},
            "networks": [
                {
                    "mode": "bridge",
                    "dynamicPorts": [{"label": "http", "to": 8080}, {"label": "metrics"}],
                    "reservedPorts": [{"label": "admin", "value": 9000, "to": 9001}],
                }
            ],
            "services": [
                {
                    "name": "api-admin",
                    "portLabel": "admin",
                    "tags": ["a"],
                    "checks": [{"type": "tcp", "interval": "10s", "timeout": "2s"}],
                }
            ],
            "meta": {"tier": "backend"},
        },
        "tasks": [
            {
                "name": "init",
                "driver": "exec",
                "config": {"command": "/bin/true"},
                "lifecycle": {"hook": "prestart"},
            },
            {
                "name": "app",
                "driver": "docker",
                "config": {
                    "image": "app:1",
                    "command": "serve",
                    "args": ["--port", "8080"],
                    "entrypoint": ["/init"],
                    "workDir": "/srv",
                    "force_pull": True,
                },
                "env": {"A": "1"},
                "resources": {"cpu": 500, "memoryMB": 256, "memoryMaxMB": 512},
                "services": [
                    {
                        "name": "api",
                        "portLabel": "http",
                        "checks": [
                            {
                                "name": "alive",
                                "type": "http",
                                "path": "/health",
                                "protocol": "https",
                                "interval": "5s",
                                "timeout": "1s",
                                "initialStatus": "critical",
                                "onUpdate": "ignore",
                            }
                        ],
                    }
                ],
                "leader": True,
                "killTimeout": "20s",
                "killSignal": "SIGINT",
                "shutdownDelay": "2s",
                "logConfig": {"maxFiles": 3, "maxFileSizeMB": 5},
                "meta": {"m": "v"},
                "schedule": {
                    "cron": {"start": "30 9 * * MON-FRI *", "end": "0 16", "timezone": "UTC"}
                },
            },
        ],
    }


# --- parsing -----------------------------------------------------------------------------------


def test_minimal_spec_takes_nomad_defaults() -> None:
    spec = parse_spec(minimal())
    task = spec.tasks[0]
    assert (spec.job.type, spec.job.priority, spec.job.region) == ("service", 50, "global")
    assert spec.job.datacenters == ("*",)
    assert spec.job.display_name == "web"
    assert (spec.task_group.index, spec.task_group.count) == (0, 1)
    assert spec.task_group.ephemeral_disk.size_mb == 300
    assert (task.resources.cpu, task.resources.memory_mb, task.resources.memory_max_mb) == (
        100,
        300,
        None,
    )
    assert task.kill_timeout == "5s"
    assert (task.log_config.max_files, task.log_config.max_file_size_mb) == (10, 10)
    assert task.is_main and not task.is_sidecar and task.hook is None


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("job", "name"), "Shop"),
        (("job", "datacenters"), ("dc1", "dc2")),
        (("task_group", "ephemeral_disk", "size_mb"), 500),
        (("task_group", "restart_policy", "mode"), "delay"),
        (("task_group", "networks", 0, "reserved_ports", 0, "to"), 9001),
        (("task_group", "services", 0, "checks", 0, "type"), "tcp"),
        (("tasks", 1, "resources", "memory_max_mb"), 512),
        (("tasks", 1, "config", "work_dir"), "/srv"),
        (("tasks", 1, "config", "entrypoint"), ("/init",)),
        (("tasks", 1, "log_config", "max_file_size_mb"), 5),
        (("tasks", 1, "services", 0, "checks", 0, "initial_status"), "critical"),
        (("tasks", 1, "services", 0, "checks", 0, "on_update"), "ignore"),
        (("tasks", 1, "schedule", "cron", "start"), "30 9 * * MON-FRI *"),
        (("tasks", 0, "lifecycle", "hook"), "prestart"),
    ],
)
def test_camel_case_fields_parse_into_python_names(path: tuple[Any, ...], expected: Any) -> None:
    value: Any = parse_spec(full())
    for part in path:
        value = value[part] if isinstance(part, int) else getattr(value, part)
    assert value == expected


def test_unknown_driver_config_keys_are_kept_as_extras() -> None:
    spec = parse_spec(full())
    assert spec.tasks[1].config.extras == {"force_pull": True}


def test_dump_by_alias_round_trips() -> None:
    spec = parse_spec(full())
    dumped = spec.model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert dumped["tasks"][1]["resources"] == {"cpu": 500, "memoryMB": 256, "memoryMaxMB": 512}
    assert parse_spec(dumped) == spec


def test_models_accept_python_field_names() -> None:
    task = Task(name="t", driver="docker", resources=Resources(memory_mb=64, memory_max_mb=128))
    assert task.resources.memory_mb == 64
    assert task.model_dump(by_alias=True)["resources"]["memoryMaxMB"] == 128


def test_parse_accepts_any_mapping_like_kopfs_spec() -> None:
    raw = minimal()
    proxy = types.MappingProxyType({**raw, "job": types.MappingProxyType(raw["job"])})
    assert parse_spec(proxy) == parse_spec(raw)


def test_models_are_immutable() -> None:
    spec = parse_spec(minimal())
    with pytest.raises(ValueError, match="frozen"):
        spec.job.id = "other"  # type: ignore[misc]


def test_alloc_name_is_job_group_and_index() -> None:
    assert parse_spec(full()).alloc_name == "shop.api[2]"


def test_task_lookup_and_leader() -> None:
    spec = parse_spec(full())
    assert spec.task("app") is spec.tasks[1]
    assert spec.task("nope") is None
    assert spec.leader is spec.tasks[1]


# --- restart policy ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job_type", "expected"),
    [
        ("service", EffectiveRestartPolicy(2, 1800.0, 15.0, "fail")),
        ("system", EffectiveRestartPolicy(2, 1800.0, 15.0, "fail")),
        ("batch", EffectiveRestartPolicy(3, 86400.0, 15.0, "fail")),
        ("sysbatch", EffectiveRestartPolicy(3, 86400.0, 15.0, "fail")),
    ],
)
def test_restart_policy_defaults_follow_the_job_type(
    job_type: str, expected: EffectiveRestartPolicy
) -> None:
    raw = minimal()
    raw["job"]["type"] = job_type
    assert parse_spec(raw).restart_policy() == expected


def test_restart_policy_fields_override_defaults_one_by_one() -> None:
    raw = minimal()
    raw["job"]["type"] = "batch"
    raw["taskGroup"]["restartPolicy"] = {"attempts": 0, "delay": "1m"}
    assert parse_spec(raw).restart_policy() == EffectiveRestartPolicy(0, 86400.0, 60.0, "fail")


# --- ports -------------------------------------------------------------------------------------


def test_ports_resolve_reserved_then_dynamic_with_to_or_from_the_range() -> None:
    ports = parse_spec(full()).ports()
    assert [(p.label, p.value, p.to, p.reserved, p.container_port) for p in ports] == [
        ("admin", 9000, 9001, True, 9001),
        ("http", 8080, 8080, False, 8080),
        ("metrics", DYNAMIC_PORT_MIN, 0, False, DYNAMIC_PORT_MIN),
    ]


def test_dynamic_ports_skip_numbers_already_used() -> None:
    raw = minimal()
    raw["taskGroup"]["networks"] = [
        {
            "dynamicPorts": [{"label": "a"}, {"label": "b", "to": 20001}, {"label": "c"}],
            "reservedPorts": [{"label": "r", "value": 20000}],
        }
    ]
    values = {p.label: p.value for p in parse_spec(raw).ports()}
    assert values == {"r": 20000, "a": 20002, "b": 20001, "c": 20003}


def test_ports_are_deterministic() -> None:
    assert parse_spec(full()).ports() == parse_spec(full()).ports()


def test_ports_are_resolved_once_per_spec() -> None:
    spec = parse_spec(full())
    assert spec.ports() is spec.ports()
    assert spec == parse_spec(full())  # the memo is not a field


def test_ports_follow_a_copied_spec() -> None:
    spec = parse_spec(full())
    spec.ports()
    group = spec.task_group.model_copy(update={"networks": ()})
    assert spec.model_copy(update={"task_group": group}).ports() == ()


# --- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize("factory", [minimal, full])
def test_valid_specs_have_no_problems(factory: Any) -> None:
    spec, problems = parse_and_validate(factory())
    assert spec is not None
    assert problems == []


def _mutate(path: str, value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(full())
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = raw
    for part in parents:
        node = node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return raw


_DELETE = object()

# (what is wrong, path to change in `full()`, new value, task named, field named, message part)
VALIDATION_CASES = [
    ("unknown driver", "tasks.1.driver", "qemu", "app", "tasks[1].driver", "unsupported driver"),
    ("docker without image", "tasks.1.config.image", "", "app", "tasks[1].config.image", "image"),
    ("exec without command", "tasks.0.config", {}, "init", "tasks[0].config.command", "command"),
    ("bad kill timeout", "tasks.1.killTimeout", "5 s", "app", "tasks[1].killTimeout", "Go dur"),
    ("negative delay", "tasks.1.shutdownDelay", "-1s", "app", "tasks[1].shutdownDelay", "least"),
    ("bad interval", "taskGroup.restartPolicy.interval", "1x", "", "restartPolicy.interval", "Go"),
    (
        "short interval",
        "taskGroup.restartPolicy.interval",
        "2s",
        "",
        "restartPolicy.interval",
        "5s",
    ),
    ("too many restarts", "taskGroup.restartPolicy.attempts", 30, "", "restartPolicy", "fit"),
    ("ambiguous 0 attempts", "taskGroup.restartPolicy.attempts", 0, "", "restartPolicy.mode", "0"),
    ("poststop", "tasks.0.lifecycle.hook", "poststop", "init", "lifecycle.hook", "not supported"),
    ("two leaders", "tasks.0.leader", True, "init,app", "tasks", "only one task may be the leader"),
    ("bad task name", "tasks.1.name", "App_1", "App_1", "tasks[1].name", "DNS-1123"),
    ("bad group name", "taskGroup.name", "API", "", "taskGroup.name", "DNS-1123"),
    ("index >= count", "taskGroup.index", 3, "", "taskGroup.index", "lower than"),
    ("no tasks", "tasks", [], "", "tasks", "at least one task"),
    ("small memory", "tasks.1.resources.memoryMB", 5, "app", "resources.memoryMB", "at least"),
    ("max < memory", "tasks.1.resources.memoryMaxMB", 100, "app", "memoryMaxMB", "at least"),
    ("bad signal", "tasks.1.killSignal", "STOP", "app", "tasks[1].killSignal", "signal"),
    ("check too fast", "tasks.1.services.0.checks.0.interval", "100ms", "app", "interval", "1s"),
    ("http no path", "tasks.1.services.0.checks.0.path", _DELETE, "app", "checks[0].path", "path"),
    ("unknown port", "tasks.1.services.0.portLabel", "nope", "app", "services[0].portLabel", "not"),
    ("bad port label", "taskGroup.networks.0.dynamicPorts.1.label", "a-b", "", "label", "letters"),
    ("port range", "taskGroup.networks.0.reservedPorts.0.value", 70000, "", "value", "1-65535"),
    ("bad cron start", "tasks.1.schedule.cron.start", "0 9 * * *", "app", "cron.start", "6 cron"),
    ("bad cron end", "tasks.1.schedule.cron.end", "16:00", "app", "cron.end", "minute hour"),
    ("env name", "tasks.1.env", {"A=B": "x"}, "app", "tasks[1].env", "environment variable"),
    ("job id space", "job.id", "my job", "", "job.id", "whitespace"),
    ("small disk", "taskGroup.ephemeralDisk.sizeMB", 5, "", "ephemeralDisk.sizeMB", "10"),
    ("service name", "tasks.1.services.0.name", "a_b", "app", "services[0].name", "RFC 1123"),
    ("wrong type", "tasks.1.resources.cpu", "lots", "app", "tasks[1].resources.cpu", "integer"),
    ("bad enum", "job.type", "cron", "", "job.type", "service"),
]


@pytest.mark.parametrize(
    ("path", "value", "task", "field", "message"),
    [case[1:] for case in VALIDATION_CASES],
    ids=[case[0] for case in VALIDATION_CASES],
)
def test_validate_reports_the_task_and_field(
    path: str, value: Any, task: str, field: str, message: str
) -> None:
    _, problems = parse_and_validate(_mutate(path, value))
    matching = [p for p in problems if field in p.field and message in p.message]
    assert matching, problems
    assert {p.task for p in matching} == set(task.split(",")), matching


def test_duplicate_task_names_are_reported_once_per_name() -> None:
    raw = minimal()
    raw["tasks"].append(copy.deepcopy(raw["tasks"][0]))
    problems = validate(parse_spec(raw))
    assert [p for p in problems if "used 2 times" in p.message] == [
        Problem("server", "tasks", "task name 'server' is used 2 times")
    ]


def test_only_prestart_tasks_cannot_make_a_pod() -> None:
    raw = minimal()
    raw["tasks"][0]["lifecycle"] = {"hook": "prestart"}
    problems = validate(parse_spec(raw))
    assert any(p.field == "tasks" and "main or poststart" in p.message for p in problems)


def test_group_script_checks_are_rejected() -> None:
    raw = minimal()
    raw["taskGroup"]["services"] = [
        {
            "name": "s",
            "checks": [{"type": "script", "command": "true", "interval": "5s", "timeout": "1s"}],
        }
    ]
    problems = validate(parse_spec(raw))
    assert any(p.field == "taskGroup.services[0].checks[0].type" for p in problems)


def test_numeric_port_labels_need_no_network() -> None:
    raw = minimal()
    check = {"type": "tcp", "interval": "5s", "timeout": "1s"}
    raw["tasks"][0]["services"] = [{"name": "s", "portLabel": "8080", "checks": [check]}]
    assert validate(parse_spec(raw)) == []


def test_problems_read_as_sentences() -> None:
    assert str(Problem("app", "tasks[1].driver", "bad")) == "task 'app': tasks[1].driver: bad"
    assert str(Problem("", "taskGroup.name", "bad")) == "taskGroup.name: bad"


def test_parse_errors_become_problems_not_exceptions() -> None:
    spec, problems = parse_and_validate({"job": {}, "taskGroup": {"name": "g"}, "tasks": []})
    assert spec is None
    assert any(p.field == "job.id" for p in problems)


def test_spec_is_typed_allocation_spec() -> None:
    assert isinstance(parse_spec(minimal()), AllocationSpec)
