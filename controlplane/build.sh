#!/usr/bin/env bash
# Builds the local control plane's binaries, and the real node's kubelet, kube-proxy and containerd,
# from the Go wrapper modules beside this script into $1 (default ../.cache/controlplane/bin). A binary already there, built from the same go.sum, is
# reused, so a warm run takes seconds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../.cache/controlplane/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if ! command -v go >/dev/null 2>&1; then
  echo "error: building the local control plane needs Go 1.26 or newer on PATH (https://go.dev/dl/)," >&2
  echo "       and the Go module proxy (GOPROXY) reachable." >&2
  exit 2
fi
if ! go env GOVERSION | awk -F'[go.]' '{exit !($3 > 1 || ($3 == 1 && $4 >= 26))}'; then
  echo "error: Go $(go env GOVERSION) is too old; the control plane needs Go 1.26 or newer." >&2
  exit 2
fi

export CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS=-mod=readonly
kube_version=$(awk '/^require k8s.io\/kubernetes /{print $3}' "$here/kubernetes/go.mod")
minor=$(echo "$kube_version" | cut -d. -f2)
kube_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kube_version \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$kube_version \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

# build MODULE BINARY PACKAGE [LDFLAGS]: skips the build when the stamp matches the module's go.sum.
build() {
  local module=$1 binary=$2 package=$3 ldflags=${4:--s -w} tags=${5:-}
  local stamp="$out/.$binary.stamp" want
  want=$(cat "$here/$module/go.mod" "$here/$module/go.sum" | sha256sum | cut -c1-16)
  if [[ -x "$out/$binary" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "controlplane: $binary is up to date"
    return
  fi
  echo "controlplane: building $binary from $package ..."
  local start=$SECONDS
  (cd "$here/$module" && go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/$binary" "$package")
  echo "$want" > "$stamp"
  echo "controlplane: built $binary in $((SECONDS - start))s"
}

build etcd etcd go.etcd.io/etcd/server/v3
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
build kubernetes kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
build kubernetes kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"
build kubernetes kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kube_ldflags"
build kubernetes kubectl k8s.io/kubernetes/cmd/kubectl "$kube_ldflags"
build kubernetes kubelet k8s.io/kubernetes/cmd/kubelet "$kube_ldflags"
build kubernetes kube-proxy k8s.io/kubernetes/cmd/kube-proxy "$kube_ldflags"

# containerd for the real node: static (no cgo, no btrfs), without the CLI's doc generator.
containerd_tags="urfave_cli_no_docs osusergo netgo static_build"
build containerd containerd github.com/containerd/containerd/v2/cmd/containerd "-s -w" "$containerd_tags"
build containerd containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  "-s -w" "$containerd_tags no_grpc"
build containerd ctr github.com/containerd/containerd/v2/cmd/ctr "-s -w" "$containerd_tags"
