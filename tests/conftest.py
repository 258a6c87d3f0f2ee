"""Shared fixtures: the Kubernetes control plane every Kubernetes-facing test runs against.

* `cluster` (session): a started `LocalCluster` (etcd, kube-apiserver, controller-manager,
  scheduler, kwok and the kubelet simulation built from Go modules) with one untainted kwok node,
  `NODE_NAME`, and a real node (kubelet, containerd) tainted for the namespaces sent to it.
  With `ALLOCBRIDGE_TEST_KUBECONFIG=path` an `ExternalCluster` for that existing cluster (e.g.
  kind) instead; its sandbox helpers skip the test, as only the local cluster
  has them. Missing binaries fail the fixture with the message that says how to build them.
* `kubeconfig` (session): the admin kubeconfig's path.
* `kube` (function): a kubernetes_asyncio `ApiClient` on the test's own event loop;
  `kube_configuration` is its `Configuration` (e.g. for a `WsApiClient`).
* `kubectl` (session): runs the built kubectl with that kubeconfig (`kubectl(...)` returns the
  completed process, `kubectl.json(...)` the parsed `-o json` output).
* `namespace` and `real_namespace` (function, tests/cluster/conftest.py): fresh namespaces whose
  pods go to kwok's node or to the real node.

Tests under tests/cluster/ get the `cluster` marker (`make unit` deselects them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from allocbridge_localcluster import BinariesMissingError, LocalCluster, realnode
from allocbridge_localcluster.binaries import default_bin_dir
from allocbridge_localcluster.kubectl import Kubectl

NODE_NAME = "node-1"
_CLUSTER_TESTS = Path(__file__).parent / "cluster"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _CLUSTER_TESTS in item.path.parents:
            item.add_marker(pytest.mark.cluster)


class ExternalCluster:
    """An existing cluster given by ALLOCBRIDGE_TEST_KUBECONFIG, with LocalCluster's shape."""

    is_local = False

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        built = default_bin_dir() / "kubectl"
        found = str(built) if built.exists() else shutil.which("kubectl")
        if found is None:
            pytest.fail("ALLOCBRIDGE_TEST_KUBECONFIG is set but no kubectl was found", False)
        self.kubectl = Path(found)

    def _local_only(self, *_: object, **__: object) -> NoReturn:
        pytest.skip("needs the local control plane's kwok nodes and kubelet simulation")

    create_node = sandbox_dir = container_exit = signals = set_handled_signals = _local_only


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster | ExternalCluster]:
    external = os.environ.get("ALLOCBRIDGE_TEST_KUBECONFIG")
    if external:
        yield ExternalCluster(Path(external).resolve())
        return
    try:
        bin_dir = LocalCluster().binaries.kubectl.parent
    except BinariesMissingError as err:
        pytest.fail(str(err), pytrace=False)
    local = LocalCluster(
        state_dir=tmp_path_factory.mktemp("controlplane"),
        real_node=realnode.why_unavailable(bin_dir) is None,
        dedicated_real_node=True,  # kwok's node-1 takes every pod not sent to it
    )
    local.start()
    try:
        local.create_node(NODE_NAME)
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def kubeconfig(cluster: LocalCluster | ExternalCluster) -> Path:
    return cluster.kubeconfig


@pytest.fixture
async def kube_configuration(kubeconfig: Path) -> k8s_client.Configuration:
    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    return configuration


@pytest.fixture
async def kube(kube_configuration: k8s_client.Configuration) -> AsyncIterator[Any]:
    async with k8s_client.ApiClient(kube_configuration) as api:
        yield api


@pytest.fixture(scope="session")
def kubectl(cluster: LocalCluster | ExternalCluster) -> Kubectl:
    return Kubectl.of(cluster)
