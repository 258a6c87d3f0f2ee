"""The `kubernetes` block's pod fields: read into `PodSettings` (the one home of their defaults),
checked with a problem per mistake, written back by `render`, and seen in the rendered pod."""

from __future__ import annotations

from typing import Any

import pytest

from allocbridge import config
from allocbridge.model.pods import PodSettings, render_pod
from allocbridge.model.spec import parse_spec

LISTENERS = """
listener "tcp" {
  purpose = "api"
  tls_disable = true
}
"""


def pods(body: str) -> PodSettings:
    return config.load_text(f"kubernetes {{\n{body}\n}}\n" + LISTENERS).kubernetes.pods


def problems(body: str) -> list[str]:
    with pytest.raises(config.ConfigError) as info:
        pods(body)
    return info.value.problems


def test_an_unset_block_keeps_every_pod_default_of_pod_settings() -> None:
    assert pods("") == PodSettings()
    assert config.load_text(LISTENERS).kubernetes.pods == PodSettings()
    assert config.KubernetesSettings().pods == PodSettings()


@pytest.mark.parametrize(
    ("hcl", "attribute", "value"),
    [
        ("mhz_per_cpu = 2500", "mhz_per_cpu", 2500),
        ('exec_image = "debian:12"', "exec_image", "debian:12"),
        ("cpu_limit_factor = 2", "cpu_limit_factor", 2.0),
        ("memory_limit_factor = 1.5", "memory_limit_factor", 1.5),
        ('image_pull_policy = "IfNotPresent"', "image_pull_policy", "IfNotPresent"),
        ('pod_labels = { team = "a" }', "extra_labels", {"team": "a"}),
        (
            'pod_annotations = { "example.com/owner" = "ops" }',
            "extra_annotations",
            {"example.com/owner": "ops"},
        ),
        ('node_selector = { "disk" = "ssd" }', "node_selector", {"disk": "ssd"}),
        (
            'tolerations = [{ key = "gpu", operator = "Exists", effect = "NoSchedule" }]',
            "tolerations",
            ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},),
        ),
        ('service_account_name = "tasks"', "service_account_name", "tasks"),
        ("automount_service_account_token = true", "automount_service_account_token", True),
        ("reserved_ports_as_host_ports = true", "reserved_ports_as_host_ports", True),
        ("task_dirs = false", "task_dirs", False),
    ],
)
def test_each_pod_field_is_read_and_the_others_keep_their_defaults(
    hcl: str, attribute: str, value: Any
) -> None:
    settings = pods(hcl)
    assert getattr(settings, attribute) == value
    others = {
        name: getattr(settings, name)
        for name in PodSettings.__dataclass_fields__
        if name != attribute
    }
    defaults = PodSettings()
    assert others == {name: getattr(defaults, name) for name in others}


def test_every_mistake_in_the_pod_fields_is_reported_together() -> None:
    found = problems(
        "\n".join(
            [
                "mhz_per_cpu = 0",
                "cpu_limit_factor = 0.5",
                'memory_limit_factor = "big"',
                'image_pull_policy = "Sometimes"',
                "pod_labels = { team = 1 }",
                'tolerations = [{ key = "gpu", colour = "red" }, { tolerationSeconds = "30" }]',
            ]
        )
    )
    where = "kubernetes block"
    assert found == [
        f"{where}: mhz_per_cpu: must be greater than 0",
        f"{where}: memory_limit_factor: must be a number, got 'big'",
        f"{where}: cpu_limit_factor: must be at least 1 (a limit is never below its request)",
        f"{where}: image_pull_policy: unknown policy 'Sometimes'; allowed: Always, "
        "IfNotPresent, Never",
        f'{where}: pod_labels: must be a map of strings, like {{ team = "a" }}',
        f"{where}: tolerations #1: unknown field 'colour'; allowed: key, operator, value, "
        "effect, tolerationSeconds",
        f"{where}: tolerations #2: tolerationSeconds must be a whole number, got '30'",
    ]


def test_pod_fields_survive_render_and_load() -> None:
    """`check-config` prints them and the cluster tests and benchmarks write their operators'
    files with `render`: what is loaded back is what was rendered."""
    asked = config.local_settings(
        "replica",
        14646,
        19203,
        config.KubernetesSettings(
            pods=PodSettings(
                mhz_per_cpu=2000,
                cpu_limit_factor=2.0,
                memory_limit_factor=1.25,
                exec_image="debian:12",
                image_pull_policy="Never",
                extra_labels={"team": "a", "app.kubernetes.io/part-of": "shop"},
                extra_annotations={"note": 'says "hi"'},
                tolerations=({"key": "gpu", "operator": "Exists", "tolerationSeconds": 30},),
                node_selector={"disk": "ssd"},
                service_account_name="tasks",
                automount_service_account_token=True,
                reserved_ports_as_host_ports=True,
                task_dirs=False,
            )
        ),
    )
    assert config.load_text(config.render(asked), source="<local>") == asked


def test_the_configured_fields_reach_the_rendered_pod() -> None:
    settings = pods(
        "\n".join(
            [
                'pod_labels = { team = "a" }',
                'node_selector = { disk = "ssd" }',
                'tolerations = [{ key = "gpu", operator = "Exists" }]',
                'service_account_name = "tasks"',
                'image_pull_policy = "Never"',
            ]
        )
    )
    spec = parse_spec(
        {
            "job": {"id": "web"},
            "taskGroup": {"name": "web"},
            "tasks": [{"name": "main", "driver": "docker", "config": {"image": "busybox:1.37"}}],
        }
    )
    pod = render_pod(name="web-0", namespace="apps", uid="u", spec=spec, settings=settings)
    assert pod["metadata"]["labels"]["team"] == "a"
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd"}
    assert pod["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert pod["spec"]["serviceAccountName"] == "tasks"
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "Never"
