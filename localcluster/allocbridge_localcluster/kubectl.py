"""The built kubectl bound to one kubeconfig, and `eventually`: how the test suites (`tests/`,
`tests/e2e/`) drive a cluster from outside, as a user would, written once for all of them."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol


class HasKubectl(Protocol):
    """A cluster that has a kubectl and an admin kubeconfig (a LocalCluster or an external one)."""

    @property
    def kubectl(self) -> Path | str: ...

    @property
    def kubeconfig(self) -> Path: ...


class Kubectl:
    """`kubectl --kubeconfig=...`; a failed command raises AssertionError with its stderr unless
    `check=False`."""

    def __init__(self, binary: Path | str, kubeconfig: Path, timeout: float = 60) -> None:
        self.binary = Path(binary)
        self.kubeconfig = kubeconfig
        self.timeout = timeout

    @classmethod
    def of(cls, cluster: HasKubectl, timeout: float = 60) -> Kubectl:
        return cls(cluster.kubectl, cluster.kubeconfig, timeout)

    def __call__(
        self, *args: str, check: bool = True, stdin: str | None = None, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=self.timeout if timeout is None else timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}"
            )
        return done

    def json(self, *args: str, check: bool = True) -> Any:
        return json.loads(self(*args, "-o", "json", check=check).stdout)

    def apply(self, manifest: dict[str, Any] | str) -> subprocess.CompletedProcess[str]:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        return self("apply", "-f", "-", stdin=text)

    def apply_crds(self, path: Path, timeout: float = 60.0) -> None:
        """Apply the CRDs in `path` (a file or a folder); wait until each is established.

        Not `kubectl wait --for=condition=Established`: on a fresh API server a CRD can be read
        before its status has any conditions, and kubectl wait then fails at once
        (".status.conditions accessor error") instead of waiting."""
        applied = self("apply", "-f", str(path), "-o", "name").stdout.split()
        names = [ref.rpartition("/")[2] for ref in applied]

        def established() -> bool:
            answer = self.json("get", "crd", *names)
            crds = answer["items"] if answer.get("kind") == "List" else [answer]
            return len(crds) == len(names) and all(
                any(
                    condition.get("type") == "Established" and condition.get("status") == "True"
                    for condition in (crd.get("status") or {}).get("conditions") or ()
                )
                for crd in crds
            )

        eventually(established, timeout, what=f"the CRDs {', '.join(names)} to be established")

    def create_namespace(self, name: str) -> None:
        """Create it and wait for its default ServiceAccount, which pods need."""
        self("create", "namespace", name)
        eventually(
            lambda: (
                self("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0
            ),
            what=f"the default ServiceAccount of {name}",
        )


def eventually(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll `check` until it returns something truthy (and return it) or fail after `timeout`
    with the last error it raised (assertions, lookups, I/O and parse errors count as not yet)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except (AssertionError, KeyError, IndexError, OSError, ValueError) as exc:
            last_error = exc
        time.sleep(0.1)
    raise AssertionError(
        f"timed out waiting for {what}" + (f": {last_error}" if last_error else "")
    )
