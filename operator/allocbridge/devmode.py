"""`allocbridge dev`: the product on a local control plane, in one command.

Starts the local control plane (state under `.dev/`), installs the CRDs, creates a node, applies
an example allocation and runs the operator with the API on 4646 and the ops listener on 9203
(ACL disabled), then prints what to export. Ctrl-C or SIGTERM stops the operator, then every
control-plane process; nothing is left running.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from allocbridge import app, config, logs
from allocbridge.localcluster.binaries import BinariesMissingError
from allocbridge.localcluster.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]


def dev_config(api_port: int, ops_port: int, kubeconfig: Path) -> str:
    settings = config.local_settings(
        "allocbridge-dev",
        api_port,
        ops_port,
        config.KubernetesSettings(kubeconfig=str(kubeconfig), standalone=True),
        graceful_shutdown_wait=2.0,
    )
    return "# Written by `allocbridge dev`.\n" + config.render(settings)


def run_dev(state_dir: str, *, api_port: int, ops_port: int) -> int:
    state = Path(state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    logs.configure("text", "info")
    cluster = LocalCluster(state_dir=state)
    try:
        print(f"==> starting the local control plane (state in {state}) ...", flush=True)
        cluster.start()
    except BinariesMissingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        cluster.create_node("node-1")
        kubectl = [str(cluster.kubectl), f"--kubeconfig={cluster.kubeconfig}"]
        crds = REPO / "crds"
        subprocess.run([*kubectl, "apply", "-f", str(crds)], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(
            [*kubectl, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
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
