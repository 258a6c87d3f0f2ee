"""The kustomize base in manifests/: what it builds, and that the API server accepts all of it.

The build uses the kustomize built into kubectl; the server-side dry run checks every object
against the real API server (schemas, the CRDs, and Pod Security admission of the restricted
namespace, which answers with warnings for a pod template it would refuse).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from running_operator import (
    REPO,
    install,
)

from allocbridge.app import IN_FLIGHT_TIMEOUT
from allocbridge.config import load_file, load_text
from allocbridge_localcluster.binaries import default_bin_dir

pytestmark = pytest.mark.cluster

MANIFESTS = REPO / "manifests"
NAMESPACE = "allocbridge-system"


def kubectl_binary() -> Path:
    built = default_bin_dir() / "kubectl"
    found = str(built) if built.exists() else shutil.which("kubectl")
    if found is None:
        pytest.skip("no kubectl (make controlplane builds one)")
    return Path(found)


@pytest.fixture(scope="module")
def built() -> list[dict[str, Any]]:
    """Every object `kubectl kustomize manifests/` renders."""
    done = subprocess.run(
        [str(kubectl_binary()), "kustomize", str(MANIFESTS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"{len(matches)} {kind} objects named {name}"
    return matches[0]


def test_server_side_dry_run_accepts_every_object(kubectl: Any) -> None:
    install(kubectl)
    done = kubectl("apply", "--dry-run=server", "-k", str(MANIFESTS), check=False)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr  # e.g. Pod Security "would violate"
    for expected in (
        "deployment.apps/allocbridge",
        "service/allocbridge",
        "configmap/allocbridge-config-",
        "customresourcedefinition.apiextensions.k8s.io/allocations.allocbridge.io",
        "poddisruptionbudget.policy/allocbridge",
    ):
        assert expected in done.stdout, done.stdout


def test_the_base_lists_every_manifest_and_the_crds_without_copies(
    built: list[dict[str, Any]],
) -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    on_disk = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk <= listed, f"not in kustomization.yaml: {on_disk - listed}"
    assert "../crds" in listed
    assert not list(MANIFESTS.rglob("allocations.yaml")), "a copy of the CRD in manifests/"
    crds = {o["metadata"]["name"] for o in built if o["kind"] == "CustomResourceDefinition"}
    assert crds == {
        "allocations.allocbridge.io",
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    }


def test_the_configuration_enables_health_acl_and_peering(built: list[dict[str, Any]]) -> None:
    config_map = find(built, "ConfigMap")
    assert config_map["metadata"]["name"].startswith("allocbridge-config-")  # hashed: rolls pods
    settings = load_text(config_map["data"]["allocbridge.hcl"])
    api, ops = settings.listener("api"), settings.listener("ops")
    assert api is not None and (api.host, api.port) == ("0.0.0.0", 4646)
    assert ops is not None and (ops.host, ops.port) == ("0.0.0.0", 9203)
    assert settings.health_enabled and settings.acl.enabled
    assert settings.controller is not None and settings.controller.graceful_shutdown_wait
    assert not settings.kubernetes.standalone  # the replicas create their ClusterKopfPeering


def test_one_apply_installs_everything_on_a_fresh_cluster(built: list[dict[str, Any]]) -> None:
    """kubectl cannot map an object whose CRD it creates in the same apply ("ensure CRDs are
    installed first"): the base must hold no object of a kind its own CRDs define."""
    defined = {
        (o["spec"]["group"], o["spec"]["names"]["kind"])
        for o in built
        if o["kind"] == "CustomResourceDefinition"
    }
    assert ("kopf.dev", "ClusterKopfPeering") in defined
    custom = [
        f"{o['kind']}/{o['metadata']['name']}"
        for o in built
        if (o["apiVersion"].split("/")[0], o["kind"]) in defined
    ]
    assert custom == [], f"objects of kinds the base's CRDs define: {custom}"


def test_the_deployment_is_highly_available_probed_and_restricted(
    built: list[dict[str, Any]],
) -> None:
    deployment = find(built, "Deployment", "allocbridge")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 4646, "ops": 9203}
    ready = container["readinessProbe"]["httpGet"]
    assert (ready["path"], ready["port"]) == ("/health", "ops")
    alive = container["livenessProbe"]
    assert alive.get("httpGet", {}).get("path") == "/metrics" or "tcpSocket" in alive
    assert {"requests", "limits"} <= set(container["resources"])

    settings = load_text(find(built, "ConfigMap")["data"]["allocbridge.hcl"])
    assert settings.controller is not None
    grace = settings.controller.graceful_shutdown_wait or 0
    assert pod["terminationGracePeriodSeconds"] > grace + IN_FLIGHT_TIMEOUT

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for each in [*pod["initContainers"], container]:
        context = each["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_volume = volumes[mounts["/etc/allocbridge"]]
    assert "emptyDir" in config_volume  # written by the init container from the ConfigMap
    assert (
        volumes["config-template"]["configMap"]["name"]
        == find(built, "ConfigMap")["metadata"]["name"]
    )

    service = find(built, "Service", "allocbridge")
    (port,) = service["spec"]["ports"]
    assert (port["name"], port["port"], port["targetPort"]) == ("http", 4646, "http")
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()


def test_the_init_container_gives_each_pod_its_own_valid_priority(
    built: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Runs the init container's script here, with its two folders moved under tmp_path."""
    pod = find(built, "Deployment", "allocbridge")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"] == ["/bin/sh", "-c"]
    template, config = tmp_path / "template", tmp_path / "config"
    template.mkdir()
    (template / "allocbridge.hcl").write_text(find(built, "ConfigMap")["data"]["allocbridge.hcl"])
    script = (
        init["args"][0]
        .replace("/etc/allocbridge-template/", f"{template}/")
        .replace("/etc/allocbridge/", f"{config}/")
    )
    assert "/etc/allocbridge" not in script
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    priorities = set()
    for run in range(2):
        config.mkdir(exist_ok=True)
        before = int(time.time())
        done = subprocess.run(
            ["/bin/sh", "-c", script], env=env, capture_output=True, text=True, check=False
        )
        after = int(time.time())
        assert done.returncode == 0, done.stderr
        settings = load_file(config / "allocbridge.hcl")
        priority = settings.kubernetes.priority
        assert re.search(rf"priority = {priority}\b", done.stdout), run
        # Seconds before 2100 in the high digits (an older pod outranks a newer one), six
        # random digits below them (pods started in the same second still differ).
        seconds_before_2100 = priority // 10**6
        assert 4102444800 - after <= seconds_before_2100 <= 4102444800 - before, priority
        priorities.add(priority)
    assert len(priorities) == 2
