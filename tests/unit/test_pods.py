"""`render_pod` and its helpers: the Pod an allocation runs as (pure, no I/O)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allocbridge.model.pods import (
    ANNOTATION_ALLOC_NAME,
    ANNOTATION_JOB_ID,
    ANNOTATION_PROBE_CHECKS,
    LABEL_ALLOC_ID,
    LABEL_GROUP,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    PodSettings,
    ProbeAssignment,
    container_resources,
    cpu_millicores,
    honours_container_restart_policies,
    kubelet_honours_container_restart_policies,
    label_value,
    nomad_interpolation,
    pod_restart_policy,
    probe_assignments,
    render_pod,
    termination_grace_seconds,
)
from allocbridge.model.spec import AllocationSpec, Task, parse_spec

UID = "8c3d9a1f-7b2e-4c55-9a10-3f1e2d4c5b6a"


def task(name: str = "main", **fields: Any) -> dict[str, Any]:
    return {"name": name, "driver": "docker", "config": {"image": "busybox:1.37"}, **fields}


def spec_of(*tasks: dict[str, Any], job: dict[str, Any] | None = None, **group: Any) -> Any:
    return parse_spec(
        {
            "job": job or {"id": "web"},
            "taskGroup": {"name": "web", **group},
            "tasks": list(tasks) or [task()],
        }
    )


def pod_of(spec: AllocationSpec, settings: PodSettings | None = None) -> dict[str, Any]:
    return render_pod(
        name="web-0", namespace="apps", uid=UID, spec=spec, settings=settings or PodSettings()
    )


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    everything = pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
    return next(c for c in everything if c["name"] == name)


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


# --- identity ----------------------------------------------------------------------------------


def test_pod_is_named_and_placed_after_the_allocation() -> None:
    pod = pod_of(spec_of())
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert (pod["metadata"]["name"], pod["metadata"]["namespace"]) == ("web-0", "apps")


def test_pod_labels_identify_allocation_job_and_group() -> None:
    settings = PodSettings(extra_labels={"team": "a", LABEL_JOB: "overridden?"})
    labels = pod_of(spec_of(), settings)["metadata"]["labels"]
    assert labels == {
        "team": "a",
        LABEL_ALLOC_ID: UID,
        LABEL_JOB: "web",
        LABEL_GROUP: "web",
        LABEL_MANAGED_BY: "allocbridge",
    }


def test_pod_is_owned_by_the_allocation_as_its_controller() -> None:
    assert pod_of(spec_of())["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "allocbridge.io/v1",
            "kind": "Allocation",
            "name": "web-0",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_annotations_keep_exact_nomad_names() -> None:
    long_id = "reports/" + "x" * 80
    annotations = pod_of(spec_of(job={"id": long_id}))["metadata"]["annotations"]
    assert annotations[ANNOTATION_JOB_ID] == long_id
    assert annotations[ANNOTATION_ALLOC_NAME] == f"{long_id}.web[0]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("web", "web"),
        ("a.b_c-d", "a.b_c-d"),
        ("", ""),
        ("my job", "my-job-"),
        ("-lead", "lead-"),
        ("x" * 64, "x" * 52 + "-"),
    ],
)
def test_label_value_keeps_valid_values_and_repairs_others(text: str, expected: str) -> None:
    value = label_value(text)
    assert value.startswith(expected)
    assert len(value) <= 63
    if value != text:
        assert value != label_value(text + "!")  # the hash tail keeps repaired values apart


def test_render_pod_is_pure() -> None:
    spec = spec_of(task(services=[]))
    before = spec.model_dump()
    first, second = pod_of(spec), pod_of(spec)
    assert first == second
    assert spec.model_dump() == before
    json.dumps(first)  # a plain, serialisable manifest


# --- restart policy and grace period -----------------------------------------------------------


@pytest.mark.parametrize(
    ("job_type", "policy"),
    [
        ("service", "Always"),
        ("system", "Always"),
        ("batch", "OnFailure"),
        ("sysbatch", "OnFailure"),
    ],
)
def test_pod_restart_policy_follows_the_job_type(job_type: str, policy: str) -> None:
    spec = spec_of(job={"id": "j", "type": job_type})
    assert pod_restart_policy(spec) == policy
    assert pod_of(spec)["spec"]["restartPolicy"] == policy


@pytest.mark.parametrize(
    ("timeouts", "grace"),
    [([None], 5), (["30s", "2s"], 30), (["1500ms"], 2), (["0s"], 0), (["1m", None], 60)],
)
def test_grace_period_is_the_longest_kill_timeout(timeouts: list[str | None], grace: int) -> None:
    tasks = [task(f"t{i}", **({"killTimeout": t} if t else {})) for i, t in enumerate(timeouts)]
    spec = spec_of(*tasks)
    assert termination_grace_seconds(spec) == grace
    assert pod_of(spec)["spec"]["terminationGracePeriodSeconds"] == grace


# --- lifecycle -------------------------------------------------------------------------------


def test_lifecycle_hooks_place_tasks_as_init_sidecar_and_regular_containers() -> None:
    spec = spec_of(
        task("main"),
        task("init", lifecycle={"hook": "prestart"}),
        task("side", lifecycle={"hook": "prestart", "sidecar": True}),
        task("after", lifecycle={"hook": "poststart"}),
        task("after-side", lifecycle={"hook": "poststart", "sidecar": True}),
    )
    pod_spec = pod_of(spec)["spec"]
    init = [(c["name"], c.get("restartPolicy")) for c in pod_spec["initContainers"]]
    assert init == [("side", "Always"), ("init", None)]
    assert [c["name"] for c in pod_spec["containers"]] == ["main", "after", "after-side"]
    assert all("restartPolicy" not in c for c in pod_spec["containers"])


LIFECYCLE_TASKS = (
    task("main"),
    task("after", lifecycle={"hook": "poststart"}),
    task("after-side", lifecycle={"hook": "poststart", "sidecar": True}),
)
HONOURED = PodSettings(container_restart_policies=True)


@pytest.mark.parametrize(
    ("job_type", "pod_policy", "own"),
    [
        # A run-once poststart task ends at its exit 0; a sidecar runs again whatever its code.
        ("service", "Always", {"main": None, "after": "OnFailure", "after-side": None}),
        ("batch", "OnFailure", {"main": None, "after": None, "after-side": "Always"}),
    ],
)
def test_poststart_containers_get_their_own_restart_policy_where_the_pods_is_wrong(
    job_type: str, pod_policy: str, own: dict[str, str | None]
) -> None:
    spec = spec_of(*LIFECYCLE_TASKS, job={"id": "web", "type": job_type})
    pod_spec = pod_of(spec, HONOURED)["spec"]
    assert pod_spec["restartPolicy"] == pod_policy
    assert {c["name"]: c.get("restartPolicy") for c in pod_spec["containers"]} == own


@pytest.mark.parametrize("job_type", ["service", "batch"])
def test_no_container_restart_policy_where_the_cluster_does_not_honour_it(job_type: str) -> None:
    """Kubernetes before 1.35 refuses a regular container's restartPolicy."""
    spec = spec_of(*LIFECYCLE_TASKS, job={"id": "web", "type": job_type})
    assert all("restartPolicy" not in c for c in pod_of(spec)["spec"]["containers"])


@pytest.mark.parametrize(
    ("major", "minor", "honoured"),
    [
        ("1", "35", True),
        ("1", "36", True),
        ("1", "35+", True),  # as some providers spell it
        ("2", "0", True),
        ("1", "34", False),
        ("1", "29+", False),
        ("", "", False),
        ("1", "x", False),
    ],
)
def test_container_restart_policies_from_the_server_version(
    major: str, minor: str, honoured: bool
) -> None:
    assert honours_container_restart_policies(major, minor) is honoured


def test_pod_without_prestart_tasks_has_no_init_containers() -> None:
    assert "initContainers" not in pod_of(spec_of())["spec"]


def test_poststop_tasks_are_refused() -> None:
    spec = spec_of(task("main"), task("cleanup", lifecycle={"hook": "poststop"}))
    with pytest.raises(ValueError, match="cleanup"):
        pod_of(spec)


def test_unknown_drivers_are_refused() -> None:
    with pytest.raises(ValueError, match="qemu"):
        pod_of(spec_of({"name": "vm", "driver": "qemu"}))


# --- drivers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "command", "args"),
    [
        ({"image": "i"}, None, None),
        ({"image": "i", "command": "serve"}, None, ["serve"]),
        ({"image": "i", "command": "sh", "args": ["-c", "x"]}, None, ["sh", "-c", "x"]),
        ({"image": "i", "args": ["--verbose"]}, None, ["--verbose"]),
        ({"image": "i", "entrypoint": ["/tini", "--"], "command": "app"}, ["/tini", "--"], ["app"]),
    ],
)
def test_docker_command_is_the_first_argument_and_entrypoint_the_command(
    config: dict[str, Any], command: list[str] | None, args: list[str] | None
) -> None:
    c = container(pod_of(spec_of({"name": "t", "driver": "docker", "config": config})), "t")
    assert c["image"] == "i"
    assert c.get("command") == command
    assert c.get("args") == args


@pytest.mark.parametrize("driver", ["exec", "raw_exec"])
def test_exec_drivers_run_the_command_in_the_base_image(driver: str) -> None:
    raw = {"name": "t", "driver": driver, "config": {"command": "/bin/date", "args": ["-u"]}}
    c = container(pod_of(spec_of(raw), PodSettings(exec_image="debian:12")), "t")
    assert (c["image"], c["command"], c["args"]) == ("debian:12", ["/bin/date"], ["-u"])


def test_work_dir_and_pull_policy() -> None:
    raw = task(config={"image": "i", "workDir": "/srv"})
    c = container(pod_of(spec_of(raw), PodSettings(image_pull_policy="IfNotPresent")), "main")
    assert (c["workingDir"], c["imagePullPolicy"]) == ("/srv", "IfNotPresent")


# --- resources ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mhz", "per_cpu", "millis"),
    [(100, 1000, 100), (1000, 1000, 1000), (500, 2000, 250), (1, 1000, 1), (1, 4000, 1)],
)
def test_cpu_mhz_become_millicores_at_the_configured_ratio(
    mhz: int, per_cpu: int, millis: int
) -> None:
    assert cpu_millicores(mhz, PodSettings(mhz_per_cpu=per_cpu)) == millis


RESOURCE_CASES = [
    # resources, settings, expected requests, expected limits
    ({}, PodSettings(), {"cpu": "100m", "memory": "300Mi"}, {"memory": "300Mi"}),
    (
        {"cpu": 250, "memoryMB": 128, "memoryMaxMB": 512},
        PodSettings(),
        {"cpu": "250m", "memory": "128Mi"},
        {"memory": "512Mi"},
    ),
    (
        {"cpu": 250, "memoryMB": 100},
        PodSettings(memory_limit_factor=1.5, cpu_limit_factor=2),
        {"cpu": "250m", "memory": "100Mi"},
        {"memory": "150Mi", "cpu": "500m"},
    ),
    (
        {"cpu": 3000, "memoryMB": 64},
        PodSettings(mhz_per_cpu=3000),
        {"cpu": "1000m", "memory": "64Mi"},
        {"memory": "64Mi"},
    ),
]


@pytest.mark.parametrize(("resources", "settings", "requests", "limits"), RESOURCE_CASES)
def test_requests_and_limits_follow_the_documented_ratios(
    resources: dict[str, int],
    settings: PodSettings,
    requests: dict[str, str],
    limits: dict[str, str],
) -> None:
    t = Task.model_validate(task(resources=resources))
    assert container_resources(t, settings) == {"requests": requests, "limits": limits}
    c = container(pod_of(spec_of(task(resources=resources)), settings), "main")
    assert c["resources"] == {"requests": requests, "limits": limits}


@pytest.mark.parametrize(
    "kwargs",
    [{"mhz_per_cpu": 0}, {"memory_limit_factor": 0.5}, {"cpu_limit_factor": 0.9}],
)
def test_settings_refuse_limits_below_requests(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PodSettings(**kwargs)


def test_settings_reach_the_pod_spec() -> None:
    settings = PodSettings(
        tolerations=({"key": "nomad", "operator": "Exists"},),
        node_selector={"pool": "nomad"},
        service_account_name="runner",
        automount_service_account_token=True,
        extra_annotations={"note": "x"},
    )
    pod = pod_of(spec_of(), settings)
    assert pod["spec"]["tolerations"] == [{"key": "nomad", "operator": "Exists"}]
    assert pod["spec"]["nodeSelector"] == {"pool": "nomad"}
    assert pod["spec"]["serviceAccountName"] == "runner"
    assert pod["spec"]["automountServiceAccountToken"] is True
    assert pod["metadata"]["annotations"]["note"] == "x"


# --- volumes -----------------------------------------------------------------------------------


def test_alloc_dir_is_shared_and_sized_by_the_ephemeral_disk() -> None:
    spec = spec_of(task("a"), task("b"), ephemeralDisk={"sizeMB": 150})
    pod = pod_of(spec)
    assert pod["spec"]["volumes"] == [
        {"name": "alloc", "emptyDir": {"sizeLimit": "150Mi"}},
        {"name": "local-0", "emptyDir": {}},
        {"name": "local-1", "emptyDir": {}},
    ]
    assert container(pod, "b")["volumeMounts"] == [
        {"name": "alloc", "mountPath": "/alloc"},
        {"name": "local-1", "mountPath": "/local"},
    ]


def test_task_dirs_can_be_turned_off() -> None:
    pod = pod_of(spec_of(), PodSettings(task_dirs=False))
    assert "volumes" not in pod["spec"]
    assert "volumeMounts" not in container(pod, "main")


# --- ports and environment ---------------------------------------------------------------------

NETWORK = {
    "dynamicPorts": [{"label": "http", "to": 8080}, {"label": "Metrics_Port"}],
    "reservedPorts": [{"label": "admin", "value": 9000, "to": 9001}],
}


def test_group_ports_are_declared_on_the_leader() -> None:
    spec = spec_of(task("first"), task("lead", leader=True), networks=[NETWORK])
    pod = pod_of(spec)
    assert "ports" not in container(pod, "first")
    assert container(pod, "lead")["ports"] == [
        {"containerPort": 9001, "protocol": "TCP", "name": "admin"},
        {"containerPort": 8080, "protocol": "TCP", "name": "http"},
        {"containerPort": 20000, "protocol": "TCP", "name": "metrics-port"},
    ]


def test_group_ports_go_to_the_first_main_task_without_a_leader() -> None:
    spec = spec_of(
        task("init", lifecycle={"hook": "prestart"}), task("a"), task("b"), networks=[NETWORK]
    )
    pod = pod_of(spec)
    assert [c["name"] for c in pod["spec"]["containers"] if "ports" in c] == ["a"]


@pytest.mark.parametrize(
    ("labels", "names"),
    [
        (["http", "HTTP"], ["http", None]),  # names must be unique in a container
        (["a_very_long_port_label"], [None]),  # longer than 15 characters
        (["8080"], [None]),  # needs a letter
        (["a__b"], [None]),  # no "--"
    ],
)
def test_port_names_are_valid_iana_service_names_or_absent(
    labels: list[str], names: list[str | None]
) -> None:
    network = {"dynamicPorts": [{"label": label} for label in labels]}
    ports = container(pod_of(spec_of(task(), networks=[network])), "main")["ports"]
    assert [p.get("name") for p in ports] == names


def test_reserved_ports_can_be_host_ports() -> None:
    spec = spec_of(task(), networks=[NETWORK])
    ports = container(pod_of(spec, PodSettings(reserved_ports_as_host_ports=True)), "main")["ports"]
    assert [p.get("hostPort") for p in ports] == [9000, None, None]


def test_tasks_get_nomad_runtime_environment() -> None:
    spec = spec_of(
        task(resources={"cpu": 200, "memoryMB": 64, "memoryMaxMB": 128}, meta={"tier": "web"}),
        job={"id": "shop", "name": "Shop", "region": "eu", "meta": {"owner": "me"}},
        networks=[NETWORK],
        index=1,
        count=2,
    )
    env = env_of(container(pod_of(spec), "main"))
    expected = {
        "NOMAD_ALLOC_ID": UID,
        "NOMAD_ALLOC_NAME": "shop.web[1]",
        "NOMAD_ALLOC_INDEX": "1",
        "NOMAD_NAMESPACE": "apps",
        "NOMAD_REGION": "eu",
        "NOMAD_JOB_ID": "shop",
        "NOMAD_JOB_NAME": "Shop",
        "NOMAD_GROUP_NAME": "web",
        "NOMAD_TASK_NAME": "main",
        "NOMAD_CPU_LIMIT": "200",
        "NOMAD_MEMORY_LIMIT": "64",
        "NOMAD_MEMORY_MAX_LIMIT": "128",
        "NOMAD_ALLOC_DIR": "/alloc",
        "NOMAD_TASK_DIR": "/local",
        "NOMAD_PORT_admin": "9001",
        "NOMAD_HOST_PORT_admin": "9000",
        "NOMAD_ADDR_admin": "$(NOMAD_IP_admin):9001",
        "NOMAD_IP_admin": {"fieldRef": {"fieldPath": "status.podIP"}},
        "NOMAD_PORT_Metrics_Port": "20000",
        "NOMAD_META_owner": "me",
        "NOMAD_META_tier": "web",
    }
    assert {k: env[k] for k in expected} == expected


def test_task_env_wins_over_nomad_variables_and_is_interpolated() -> None:
    spec = spec_of(task(env={"NOMAD_REGION": "mine", "URL": "http://${NOMAD_ADDR_http}/$(x)"}))
    c = container(pod_of(spec), "main")
    names = [e["name"] for e in c["env"]]
    assert names.count("NOMAD_REGION") == 1
    assert names[-2:] == ["NOMAD_REGION", "URL"]
    assert env_of(c)["NOMAD_REGION"] == "mine"
    assert env_of(c)["URL"] == "http://$(NOMAD_ADDR_http)/$$(x)"


@pytest.mark.parametrize(
    ("nomad", "kubernetes"),
    [
        ("${NOMAD_TASK_NAME}", "$(NOMAD_TASK_NAME)"),
        ("a ${B} c ${D_1}", "a $(B) c $(D_1)"),
        ("${node.unique.id}", "${node.unique.id}"),
        ("$(literal)", "$$(literal)"),
        ("plain", "plain"),
    ],
)
def test_nomad_interpolation_becomes_kubernetes_expansion(nomad: str, kubernetes: str) -> None:
    assert nomad_interpolation(nomad) == kubernetes


def test_args_are_interpolated_too() -> None:
    raw = task(config={"image": "i", "command": "serve", "args": ["--name=${NOMAD_ALLOC_NAME}"]})
    assert container(pod_of(spec_of(raw)), "main")["args"] == [
        "serve",
        "--name=$(NOMAD_ALLOC_NAME)",
    ]


# --- checks as probes --------------------------------------------------------------------------


def service(*checks: dict[str, Any], name: str = "svc", port: str | None = "http") -> Any:
    return {"name": name, "portLabel": port, "checks": list(checks)}


def check(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "interval": "10s", "timeout": "2s", **fields}


PROBE_CASES = [
    (
        check("http", path="/health"),
        {"httpGet": {"path": "/health", "port": 8080, "scheme": "HTTP"}},
    ),
    (
        check("http", path="/", protocol="https", portLabel="admin"),
        {"httpGet": {"path": "/", "port": 9001, "scheme": "HTTPS"}},
    ),
    (check("tcp"), {"tcpSocket": {"port": 8080}}),
    (check("tcp", portLabel="7000"), {"tcpSocket": {"port": 7000}}),
    (check("grpc"), {"grpc": {"port": 8080}}),
    (
        check("script", command="/bin/check", args=["-q"]),
        {"exec": {"command": ["/bin/check", "-q"]}},
    ),
]


@pytest.mark.parametrize(("nomad_check", "action"), PROBE_CASES)
def test_task_checks_become_readiness_probes(
    nomad_check: dict[str, Any], action: dict[str, Any]
) -> None:
    spec = spec_of(task(services=[service(nomad_check)]), networks=[NETWORK])
    probe = container(pod_of(spec), "main")["readinessProbe"]
    assert probe == {
        "periodSeconds": 10,
        "timeoutSeconds": 2,
        "successThreshold": 1,
        "failureThreshold": 1,
        **action,
    }


@pytest.mark.parametrize(
    ("interval", "timeout", "period", "timeout_seconds"),
    [("10s", "2s", 10, 2), ("1500ms", "500ms", 2, 1), ("1m", "30s", 60, 30), ("1s", "1s", 1, 1)],
)
def test_probe_timing_rounds_up_to_whole_seconds(
    interval: str, timeout: str, period: int, timeout_seconds: int
) -> None:
    nomad_check = check("tcp", interval=interval, timeout=timeout)
    spec = spec_of(task(services=[service(nomad_check)]), networks=[NETWORK])
    probe = container(pod_of(spec), "main")["readinessProbe"]
    assert (probe["periodSeconds"], probe["timeoutSeconds"]) == (period, timeout_seconds)


def test_each_container_runs_one_probe_and_group_checks_fill_free_containers() -> None:
    spec = spec_of(
        task("web", services=[service(check("http", path="/a", name="a"), check("tcp"))]),
        task("lead", leader=True),
        task("other"),
        networks=[NETWORK],
        services=[
            service(check("tcp", name="g1"), check("script", command="x"), name="grp"),
            service(check("http", path="/", name="g2"), name="grp2"),
        ],
    )
    assert probe_assignments(spec) == {
        "web": ProbeAssignment("web", "web", "svc", "a"),
        "lead": ProbeAssignment("lead", "", "grp", "g1"),
        "other": ProbeAssignment("other", "", "grp2", "g2"),
    }
    pod = pod_of(spec)
    assert container(pod, "lead")["readinessProbe"]["tcpSocket"] == {"port": 8080}
    recorded = json.loads(pod["metadata"]["annotations"][ANNOTATION_PROBE_CHECKS])
    assert recorded["web"] == {"task": "web", "service": "svc", "check": "a"}


def test_unnamed_checks_use_nomads_default_name() -> None:
    spec = spec_of(task(services=[service(check("tcp"), name="db")]), networks=[NETWORK])
    assert probe_assignments(spec)["main"].check == 'service: "db" check'


def test_ephemeral_init_containers_get_no_probe_but_sidecars_do() -> None:
    tcp = service(check("tcp"))
    spec = spec_of(
        task("main"),
        task("init", lifecycle={"hook": "prestart"}, services=[tcp]),
        task("side", lifecycle={"hook": "prestart", "sidecar": True}, services=[tcp]),
        networks=[NETWORK],
    )
    pod = pod_of(spec)
    assert "readinessProbe" not in container(pod, "init")
    assert container(pod, "side")["readinessProbe"]["tcpSocket"] == {"port": 8080}


def test_pods_without_checks_carry_no_probe_annotation() -> None:
    assert ANNOTATION_PROBE_CHECKS not in pod_of(spec_of())["metadata"]["annotations"]


def test_checks_that_cannot_become_probes_give_way_to_the_next_check() -> None:
    unresolvable = check("tcp", name="nowhere", portLabel="missing")
    spec = spec_of(
        task(services=[service(unresolvable, check("tcp", name="ok"))]), networks=[NETWORK]
    )
    assert probe_assignments(spec)["main"].check == "ok"
    assert container(pod_of(spec), "main")["readinessProbe"]["tcpSocket"] == {"port": 8080}


def test_group_script_checks_take_no_container() -> None:
    spec = spec_of(task(), services=[service(check("script", command="x"), name="g")])
    assert probe_assignments(spec) == {}


def test_owning_allocation_is_the_controller_owner() -> None:
    from allocbridge.model.pods import owning_allocation

    pod = {
        "metadata": {
            "ownerReferences": [
                {"kind": "ConfigMap", "name": "x", "controller": False},
                {"kind": "Allocation", "name": "web-0", "controller": True},
            ]
        }
    }
    assert owning_allocation(pod) == "web-0"
    assert owning_allocation({"metadata": {}}) is None


@pytest.mark.parametrize(
    ("kubelet", "honoured"),
    [
        ("v1.35.0", True),
        ("v1.36.3", True),
        ("v1.34.2-eks-113cf36", False),  # a node not upgraded yet under a 1.35 control plane
        ("v1.33.5+k3s1", False),
        ("kwok-v0.8.0", None),  # not a kubelet's version: unknown
        ("", None),
    ],
)
def test_container_restart_policies_from_a_nodes_kubelet_version(
    kubelet: str, honoured: bool | None
) -> None:
    assert kubelet_honours_container_restart_policies(kubelet) is honoured
