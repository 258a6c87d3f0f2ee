"""`allocbridge dev`: the product on a local control plane, in one command.

Starts the local control plane (state under `.dev/`) with a real node (kubelet, containerd,
runc, CNI: pods run as real containers), installs the CRDs, applies an example allocation and
runs the operator with the API on 4646 and the ops listener on 9203 (ACL disabled), then prints
what to export. Where this machine cannot run containers (not root, no cgroups, the node's parts
not built) it says why in one line and uses a kwok node instead (`--kwok` asks for that).
Ctrl-C or SIGTERM stops the operator, then every process of the cluster, and undoes what the
real node changed on the host (docs/real-node.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from allocbridge import app, config, logs

from .binaries import BinariesMissingError, default_bin_dir
from .cluster import LocalCluster
from .kubectl import Kubectl
from .realnode import why_unavailable

REPO = Path(__file__).resolve().parents[2]


def _real_node_possible() -> bool:
    """Whether the real node can run here; if not, say why in one line."""
    reason = why_unavailable(default_bin_dir())
    if reason:
        print(f"==> no real node: {reason}; pods run on kwok's fake node instead", flush=True)
    return reason is None


def dev_config(api_port: int, ops_port: int, kubeconfig: Path) -> str:
    settings = config.local_settings(
        "allocbridge-dev",
        api_port,
        ops_port,
        config.KubernetesSettings(kubeconfig=str(kubeconfig), standalone=True),
        graceful_shutdown_wait=2.0,
    )
    return "# Written by `allocbridge dev`.\n" + config.render(settings)


def run_dev(state_dir: str, *, api_port: int, ops_port: int, kwok: bool = False) -> int:
    state = Path(state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    logs.configure("text", "info")
    try:
        real_node = not kwok and _real_node_possible()
        cluster = LocalCluster(state_dir=state, real_node=real_node)
        kind = "a real node" if real_node else "a kwok node"
        print(f"==> starting the local control plane with {kind} (state in {state}) ...")
        cluster.start()
    except BinariesMissingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        if not real_node:
            cluster.create_node("node-1")
        kubectl = [str(cluster.kubectl), f"--kubeconfig={cluster.kubeconfig}"]
        Kubectl.of(cluster).apply_crds(REPO / "crds")
        example = REPO / "examples" / "web.yaml"
        if example.exists():
            subprocess.run([*kubectl, "apply", "-f", str(example)], check=True)
        path = state / "allocbridge.hcl"
        path.write_text(dev_config(api_port, ops_port, cluster.kubeconfig))
        settings = config.load_file(path)
        os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
        print(
            f"""
==> allocbridge dev is running. In another shell:

    export KUBECONFIG={cluster.kubeconfig}
    export NOMAD_ADDR=http://127.0.0.1:{api_port}
    export PATH={cluster.kubectl.parent}:$PATH   # the kubectl built for this control plane

    kubectl get allocations
    kubectl get nodes -o wide
    curl -s $NOMAD_ADDR/v1/allocations | python3 -m json.tool
    curl -s http://127.0.0.1:{ops_port}/health?worker_info=1

Ctrl-C stops everything.
""",
            flush=True,
        )
        return app.run(settings)
    finally:
        print("==> stopping the local control plane ...", flush=True)
        cluster.stop()
