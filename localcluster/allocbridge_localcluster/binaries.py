"""Where the control plane's binaries and kwok's CRD manifests are.

`make controlplane` (controlplane/build.sh) builds etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kubectl and kwok from Go modules into `.cache/controlplane/bin`. Tests and
`allocbridge dev` find that folder through `ALLOCBRIDGE_CONTROLPLANE_BIN` (the Makefile sets it)
and otherwise fall back to the repository's own cache folder, so a plain `pytest` works after one
`make controlplane`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ENV_BIN_DIR = "ALLOCBRIDGE_CONTROLPLANE_BIN"
NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
KWOK_MODULE = "sigs.k8s.io/kwok"
KWOK_DEFAULT_VERSION = "v0.8.0"
#: kwok's CRDs the local cluster enables (kind -> plural): `Exec` runs exec commands on this
#: machine, `Logs` serves a pod's container logs from a file (tests write both).
KWOK_CRDS = {"Exec": "execs", "Logs": "logs"}
_HOW_TO_BUILD = (
    "run `make controlplane` in the repository root (it builds them from Go modules; it needs "
    "Go 1.26 or newer on PATH and the Go module proxy reachable), or point "
    f"{ENV_BIN_DIR} at a folder that holds them"
)


class BinariesMissingError(RuntimeError):
    """The control plane cannot start because something it needs was never built."""


def repo_root() -> Path | None:
    """The source checkout this package runs from, if it runs from one (editable install)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "controlplane" / "build.sh").is_file() else None


def default_bin_dir() -> Path:
    """`$ALLOCBRIDGE_CONTROLPLANE_BIN`, else `<repo>/.cache/controlplane/bin`."""
    env = os.environ.get(ENV_BIN_DIR)
    if env:
        return Path(env).expanduser().resolve()
    root = repo_root()
    if root is None:
        return (Path.cwd() / ".cache" / "controlplane" / "bin").resolve()
    return root / ".cache" / "controlplane" / "bin"


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the six executables the local control plane runs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kwok: Path

    @classmethod
    def locate(cls, bin_dir: Path | None = None) -> Binaries:
        """Find all six or raise `BinariesMissingError` naming the missing ones and the fix."""
        folder = (bin_dir or default_bin_dir()).resolve()
        missing = [n for n in NAMES if not os.access(folder / n, os.X_OK)]
        if missing:
            raise BinariesMissingError(
                f"the local Kubernetes control plane is not built: {', '.join(missing)} "
                f"missing in {folder}; {_HOW_TO_BUILD}."
            )
        return cls(*(folder / n for n in NAMES))


def kwok_version() -> str:
    """The kwok version the wrapper module pins (the CRDs must match the binary)."""
    root = repo_root()
    if root is not None:
        gomod = root / "controlplane" / "kwok" / "go.mod"
        match = re.search(r"^require sigs\.k8s\.io/kwok (v\S+)", gomod.read_text(), re.M)
        if match:
            return match.group(1)
    return KWOK_DEFAULT_VERSION


def kwok_crd_file(kind_plural: str, bin_dir: Path | None = None) -> Path:
    """kwok's own CRD manifest for `kind_plural` (e.g. `execs`), from the Go module cache.

    kwok does not install its CRDs itself. The manifests ship inside the kwok module, which
    `make controlplane` has downloaded; a copy next to the binaries (`kwok-crds/`) wins if
    someone put one there.
    """
    name = f"kwok.x-k8s.io_{kind_plural}.yaml"
    folder = (bin_dir or default_bin_dir()).resolve()
    if (folder / "kwok-crds" / name).is_file():
        return folder / "kwok-crds" / name
    version = kwok_version()
    candidates: list[Path] = []
    modcache = os.environ.get("GOMODCACHE")
    if modcache:
        candidates.append(Path(modcache))
    gopath = os.environ.get("GOPATH")
    if gopath:
        candidates.extend(Path(p) / "pkg" / "mod" for p in gopath.split(os.pathsep) if p)
    candidates.append(Path.home() / "go" / "pkg" / "mod")
    for cache in candidates:
        path = cache / "sigs.k8s.io" / f"kwok@{version}" / "kustomize" / "crd" / "bases" / name
        if path.is_file():
            return path
    module_dir = _go_mod_download(f"{KWOK_MODULE}@{version}")
    if module_dir is not None:
        path = module_dir / "kustomize" / "crd" / "bases" / name
        if path.is_file():
            return path
    raise BinariesMissingError(
        f"kwok's CRD manifest {name} ({KWOK_MODULE}@{version}) is not in the Go module cache; "
        f"{_HOW_TO_BUILD}."
    )


def _go_mod_download(module: str) -> Path | None:
    """Ask `go` where a module lives (downloading it through the proxy if needed)."""
    try:
        out = subprocess.run(
            ["go", "mod", "download", "-json", module],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    directory = json.loads(out.stdout).get("Dir")
    return Path(directory) if isinstance(directory, str) and directory else None
