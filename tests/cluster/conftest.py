"""Fixtures for tests against the local control plane: the operator under test, and control
planes of a test's own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from running_operator import (
    Operator,
    install,
    make_namespace,
    real_node_annotations,
    service_account_kubeconfig,
)

from allocbridge_localcluster import BinariesMissingError, LocalCluster


@pytest.fixture(scope="session")
def operator(
    cluster: Any, kubectl: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    install(kubectl)
    folder = tmp_path_factory.mktemp("operator")
    kubeconfig = service_account_kubeconfig(kubectl, cluster.kubeconfig, folder / "kubeconfig")
    running = Operator(folder, kubeconfig).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A control plane of the test's own, with one node `node-1`, for tests that stop its
    parts or replace its nodes, which would disturb the session's cluster."""
    yield from _started(LocalCluster(state_dir=tmp_path / "controlplane"))


@pytest.fixture
def audited_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """As `own_cluster`, with the API server's audit log of lists and watches, for tests of
    what a client asks for; one client at a time makes the log easy to read."""
    yield from _started(LocalCluster(state_dir=tmp_path / "controlplane", audit=True))


def _started(local: LocalCluster) -> Iterator[LocalCluster]:
    try:
        local.binaries  # noqa: B018 - skips below when the control plane is not built
    except BinariesMissingError as exc:
        pytest.skip(f"needs the local control plane binaries: {exc}")
    local.start()
    try:
        local.create_node("node-1")
        yield local
    finally:
        local.stop()


@pytest.fixture
def namespace(kubectl: Any) -> Iterator[str]:
    """A fresh namespace whose pods go to kwok's node `node-1`."""
    yield from make_namespace(kubectl, f"t-{uuid.uuid4().hex[:10]}", {})


@pytest.fixture
def real_namespace(cluster: Any, kubectl: Any) -> Iterator[str]:
    """A fresh namespace whose pods run on the session cluster's real node (kubelet,
    containerd): real containers, for behaviour inside pods. Skips, saying why, where this
    machine cannot run a real node."""
    annotations = real_node_annotations(cluster)
    yield from make_namespace(kubectl, f"r-{uuid.uuid4().hex[:10]}", annotations)
