"""Fixtures for tests against the local control plane: the operator under test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from running_operator import Operator, install, service_account_kubeconfig


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
