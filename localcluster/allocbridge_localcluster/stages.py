"""kwok's configuration for the local control plane: which stages play the kubelet's part.

kwok v0.8.0 ships no built-in stages, so these are ours. kwok applies a stage whenever an object
matches its selector; each selector below only matches an object in the state its stage moves it
out of, so kwok never rewrites a status that the kubelet simulation (`sandbox.py`) has patched
since (restart counts, last states, terminal phases):

* node-initialize: a managed node that is not Ready becomes Ready with InternalIP = kwok's
  `--node-ip`, the kubelet port = kwok's `--node-port` (where the API server sends exec),
  generous capacity, and no taints of its own.
* node-heartbeat: refreshes a Ready node's conditions now and then (kwok renews the node Lease
  itself, which is what the node lifecycle controller watches).
* pod-ready: a Pending pod that is not Ready and whose sandbox is prepared (the condition
  `SANDBOX_CONDITION` set True by the kubelet simulation once the pod's sandbox folders and kwok
  `Exec` exist) becomes Running: containers running and ready, plain init containers completed,
  sidecar init containers (restartPolicy Always) running. Gating on the sandbox means an exec
  right after a pod turns Running always finds its target.
* pod-delete: a pod with a deletionTimestamp is deleted at once (grace period 0), as a kubelet
  confirms a deletion. Finalizers are left alone, as a kubelet leaves them. A pod whose grace
  period is already 0 is left alone too: kwok deletes by name, without the pod's UID as a
  precondition, and its own delete modifies the pod once more (grace period 0) before the pod
  goes. Matching that event would queue a second delete, which can remove a new pod of the same
  name created in between (a pod deleted and re-created at once, as the operator's full restart
  does). A grace-0 pod is removed by the API server itself once its finalizers are gone.

There is deliberately no stage that completes Job pods on its own: containers end only when a test
or a signal says so (see `kubelet.py`).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import yaml

SANDBOX_CONDITION = "localcluster.allocbridge.io/SandboxReady"
NODE_LABEL_KEY = "kwok.x-k8s.io/node"
NODE_LABEL_VALUE = "fake"
NODE_SELECTOR = f"{NODE_LABEL_KEY}={NODE_LABEL_VALUE}"
#: A node annotation that sets the kubeletVersion kwok reports (its own version otherwise).
KUBELET_VERSION_ANNOTATION = "localcluster.allocbridge.io/kubelet-version"

Json = dict[str, Any]


def _template(text: str) -> str:
    """A status template (Go template text that renders YAML), without its source indent."""
    return textwrap.dedent(text).lstrip("\n")


#: Both node stages write every condition kwok knows with a fresh heartbeat.
_NODE_CONDITIONS = _template(
    """
    {{ $now := Now }}
    {{ $since := or .metadata.creationTimestamp $now }}
    conditions:
    {{ range NodeConditions }}
    - type: {{ .type | Quote }}
      status: {{ .status | Quote }}
      reason: {{ .reason | Quote }}
      message: {{ .message | Quote }}
      lastHeartbeatTime: {{ $now | Quote }}
      lastTransitionTime: {{ $since | Quote }}
    {{ end }}
    """
)

_NODE_DETAILS = _template(
    """
    addresses:
    {{ with NodeIP }}
    - type: InternalIP
      address: {{ . | Quote }}
    {{ end }}
    - type: Hostname
      address: {{ .metadata.name | Quote }}
    {{ with NodePort }}
    daemonEndpoints:
      kubeletEndpoint:
        Port: {{ . }}
    {{ end }}
    capacity:
      cpu: "1000"
      memory: 1Ti
      pods: "10000"
      ephemeral-storage: 1Ti
    allocatable:
      cpu: "1000"
      memory: 1Ti
      pods: "10000"
      ephemeral-storage: 1Ti
    {{ $kubelet := printf "kwok-%s" Version }}
    {{ with .metadata.annotations }}
    {{ with index . "@KUBELET_VERSION@" }}{{ $kubelet = . }}{{ end }}
    {{ end }}
    nodeInfo:
      architecture: amd64
      operatingSystem: linux
      osImage: allocbridge local cluster (kwok)
      kernelVersion: {{ printf "kwok-%s" Version | Quote }}
      kubeletVersion: {{ $kubelet | Quote }}
      kubeProxyVersion: {{ printf "kwok-%s" Version | Quote }}
      containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
      machineID: ""
      systemUUID: ""
      bootID: ""
    phase: Running
    """
).replace("@KUBELET_VERSION@", KUBELET_VERSION_ANNOTATION)

_POD_RUNNING = _template(
    """
    {{ $now := Now }}
    conditions:
    - type: PodReadyToStartContainers
      status: "True"
      lastTransitionTime: {{ $now | Quote }}
    - type: Initialized
      status: "True"
      lastTransitionTime: {{ $now | Quote }}
    - type: ContainersReady
      status: "True"
      lastTransitionTime: {{ $now | Quote }}
    - type: Ready
      status: "True"
      lastTransitionTime: {{ $now | Quote }}
    initContainerStatuses:
    {{ range .spec.initContainers }}
    - name: {{ .name | Quote }}
      image: {{ .image | Quote }}
      imageID: {{ printf "kwok://%s" .image | Quote }}
      restartCount: 0
      {{ if eq .restartPolicy "Always" }}
      ready: true
      started: true
      state:
        running:
          startedAt: {{ $now | Quote }}
      {{ else }}
      ready: true
      started: false
      state:
        terminated:
          exitCode: 0
          reason: Completed
          startedAt: {{ $now | Quote }}
          finishedAt: {{ $now | Quote }}
      {{ end }}
    {{ end }}
    containerStatuses:
    {{ range .spec.containers }}
    - name: {{ .name | Quote }}
      image: {{ .image | Quote }}
      imageID: {{ printf "kwok://%s" .image | Quote }}
      restartCount: 0
      ready: true
      started: true
      state:
        running:
          startedAt: {{ $now | Quote }}
    {{ end }}
    {{ with NodeIPWith .spec.nodeName }}
    hostIP: {{ . | Quote }}
    hostIPs:
    - ip: {{ . | Quote }}
    {{ end }}
    {{ $m := .metadata }}
    {{ $hostNet := or .spec.hostNetwork false }}
    {{ $uid := or $m.uid "" }}
    {{ with PodIPWith .spec.nodeName $hostNet $uid (or $m.name "") (or $m.namespace "") }}
    podIP: {{ . | Quote }}
    podIPs:
    - ip: {{ . | Quote }}
    {{ end }}
    phase: Running
    startTime: {{ $now | Quote }}
    """
)


def _match(key: str, operator: str, *values: str) -> Json:
    """One of a stage's selector expressions: a jq-style `key` of the object."""
    expression: Json = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return expression


def _stage(name: str, kind: str, *selector: Json, next_: Json, **spec: Any) -> Json:
    """A kwok Stage for the core `kind`, applied to the objects all of `selector` matches."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": f"allocbridge-{name}"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": kind},
            "selector": {"matchExpressions": list(selector)},
            **spec,
            "next": next_,
        },
    }


def _condition(kind: str) -> str:
    return f'.status.conditions.[] | select( .type == "{kind}" ) | .status'


def stages() -> list[Json]:
    """The Stage objects, in the order of the module docstring."""
    return [
        _stage(
            "node-initialize",
            "Node",
            _match(_condition("Ready"), "NotIn", "True"),
            next_={"statusTemplate": _NODE_CONDITIONS + _NODE_DETAILS},
        ),
        _stage(
            "node-heartbeat",
            "Node",
            _match(".status.phase", "In", "Running"),
            _match(_condition("Ready"), "In", "True"),
            delay={"durationMilliseconds": 300000, "jitterDurationMilliseconds": 360000},
            next_={"statusTemplate": _NODE_CONDITIONS},
            immediateNextStage=True,
        ),
        _stage(
            "pod-ready",
            "Pod",
            _match(".metadata.deletionTimestamp", "DoesNotExist"),
            _match(".status.phase", "In", "Pending"),
            _match(_condition("Ready"), "NotIn", "True"),
            _match(_condition(SANDBOX_CONDITION), "In", "True"),
            next_={"statusTemplate": _POD_RUNNING},
        ),
        _stage(
            "pod-delete",
            "Pod",
            _match(".metadata.deletionTimestamp", "Exists"),
            _match(".metadata.deletionGracePeriodSeconds | tostring", "NotIn", "0"),
            next_={"delete": True},
        ),
    ]


class _Dumper(yaml.SafeDumper):
    """Writes multi-line strings (the templates) as literal blocks, so the file reads as
    the templates do here."""


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    )


_Dumper.add_representer(str, _string)


def kwok_config() -> str:
    """The multi-document YAML passed to kwok with `--config`."""
    return yaml.dump_all(stages(), Dumper=_Dumper, sort_keys=False)


def write_kwok_config(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(kwok_config())
    return path
