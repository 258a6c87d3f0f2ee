"""A local Kubernetes control plane for tests and `allocbridge dev`, built from Go modules.

`LocalCluster` runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (the
kubelet of fake nodes) and a kubelet simulation on loopback, and optionally a real node
(`realnode.py`: kubelet, kube-proxy, containerd, runc, CNI; images from `images.py`; host changes
undone by `hoststate.py`). See `cluster.py` for its use, `sandbox.py` for what happens to commands
exec'd into kwok's pods, `kubelet.py` for how they end and restart, and `standins.py` for the
recording `kill` that makes signalling safe on the host.

The names below are imported lazily, so that `python -m allocbridge_localcluster.sandbox` (the
kubelet simulation's process) does not import its own module twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .binaries import Binaries, BinariesMissingError
    from .cluster import ClusterStartError, LocalCluster
    from .kubelet import SignalRecord
    from .pki import write_token_kubeconfig

__all__ = [
    "Binaries",
    "BinariesMissingError",
    "ClusterStartError",
    "LocalCluster",
    "SignalRecord",
    "write_token_kubeconfig",
]

_WHERE = {
    "Binaries": "binaries",
    "BinariesMissingError": "binaries",
    "ClusterStartError": "cluster",
    "LocalCluster": "cluster",
    "SignalRecord": "kubelet",
    "write_token_kubeconfig": "pki",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
