"""`make e2e`: allocbridge deployed as users deploy it, on the local cluster's real node.

The session fixture builds the image (`make image`'s builder, cached), starts a LocalCluster
with a real node (kubelet, kube-proxy, containerd) and no kwok node, imports the image into
the node's containerd, and runs `make deploy` as a user would; the tests then talk to the
replicas only through the Service's ClusterIP, through kube-proxy. The figures the tests
measure are printed at the end of the run (`pytest_terminal_summary`).

These tests need the one real node a machine can run; `make test` runs them in a pytest run
of their own, after the rest of the suite has released it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_support import REPORT, Deployed, deploy

from allocbridge_localcluster import BinariesMissingError, LocalCluster, realnode


@pytest.fixture(scope="session")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    try:
        bin_dir = LocalCluster().binaries.kubectl.parent
    except BinariesMissingError as err:
        pytest.fail(str(err), pytrace=False)
    reason = realnode.why_unavailable(bin_dir)
    if reason is not None:
        pytest.skip(f"make e2e needs a real node on this machine: {reason}")
    cluster = LocalCluster(state_dir=tmp_path_factory.mktemp("controlplane"), real_node=True)
    cluster.start()
    try:
        yield deploy(cluster, tmp_path_factory.mktemp("deploy"))
    finally:
        cluster.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORT:
        terminalreporter.section("make e2e: what the deployed replicas did")
        for line in REPORT:
            terminalreporter.write_line(line)
