# allocbridge: the README's two commands are `make dev` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONTROLPLANE_BIN := .cache/controlplane/bin
IMAGE ?= allocbridge:dev
KIND_CLUSTER ?= allocbridge
PYTEST_ARGS ?=
E2E_ARGS ?=
GO_MODULES := benchmarks/goclients tests/goclient

.PHONY: all dev test lint unit bench controlplane image image-docker deploy deploy-overlay e2e e2e-kind clean

all: test

$(BIN)/.installed: pyproject.toml localcluster/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "error: allocbridge needs Python 3.11 or newer as '$(PYTHON)'" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e ./localcluster
	touch $@

venv: $(BIN)/.installed

# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok, and the
# real node's kubelet, kube-proxy and containerd, from the Go wrapper modules in controlplane/
# (reusing what is already built); installs the real node's Debian packages (runc, CNI plugins).
controlplane:
	@controlplane/build.sh $(CONTROLPLANE_BIN)
	@controlplane/node-packages.sh

lint: $(BIN)/.installed
	$(BIN)/ruff check operator localcluster tests benchmarks
	$(BIN)/ruff format --check operator localcluster tests benchmarks
	$(BIN)/mypy
	$(BIN)/mypy benchmarks
	$(BIN)/mypy tests/unit tests/process tests/conftest.py
	$(BIN)/mypy tests/cluster  # apart: its conftest shares a module name with tests/conftest.py
	$(BIN)/mypy tests/e2e  # apart, for the same reason
	$(BIN)/lint-imports
	@unformatted="$$(gofmt -l $(GO_MODULES))"; test -z "$$unformatted" || \
	  { echo "gofmt needed: $$unformatted" >&2; exit 1; }
	for module in $(GO_MODULES); do GOTOOLCHAIN=local GOFLAGS=-mod=readonly go -C $$module vet ./... || exit 1; done

# The suite, then `make e2e` in a run of its own (both need the machine's one real node).
test: $(BIN)/.installed controlplane lint
	ALLOCBRIDGE_CONTROLPLANE_BIN=$(abspath $(CONTROLPLANE_BIN)) $(BIN)/pytest $(PYTEST_ARGS)
	$(MAKE) --no-print-directory e2e

unit: $(BIN)/.installed
	$(BIN)/pytest -m 'not cluster' $(PYTEST_ARGS)

dev: $(BIN)/.installed controlplane
	ALLOCBRIDGE_CONTROLPLANE_BIN=$(abspath $(CONTROLPLANE_BIN)) $(BIN)/allocbridge dev

bench: $(BIN)/.installed controlplane
	ALLOCBRIDGE_CONTROLPLANE_BIN=$(abspath $(CONTROLPLANE_BIN)) $(BIN)/python -m benchmarks $(BENCH_ARGS)

# The container image without Docker: an OCI layout tar under .cache/images/ assembled from
# Debian's python3.11 packages and the pinned wheels (localcluster/allocbridge_localcluster/
# operator_image.py), tagged docker.io/library/$(IMAGE).
image: $(BIN)/.installed
	$(BIN)/python -m allocbridge_localcluster.operator_image --name $(IMAGE)

# The same image with Docker (Dockerfile: a builder stage with the virtual environment, a slim
# non-root final stage; PYTHON_IMAGE is its base).
PYTHON_IMAGE ?= python:3.11-slim-bookworm
image-docker:
	docker build --build-arg PYTHON_IMAGE=$(PYTHON_IMAGE) -t $(IMAGE) .

# The image deployed with `make deploy` on the local cluster's real node and driven through
# its Service: readiness, Pod Security, black-box clients, a rollout under load, failover
# (tests/e2e/). Prints what it measured.
e2e: $(BIN)/.installed controlplane image
	ALLOCBRIDGE_CONTROLPLANE_BIN=$(abspath $(CONTROLPLANE_BIN)) $(BIN)/pytest tests/e2e $(E2E_ARGS)

KUBECTL ?= kubectl
DEPLOY_DIR ?= .cache/deploy
KIND_KUBECONFIG ?= .cache/kind.kubeconfig

# A kustomize overlay of manifests/ that swaps IMAGE (name:tag or name@digest) in for
# allocbridge:0.1.0, written to DEPLOY_DIR so the checked-in base never changes.
deploy-overlay:
	@mkdir -p $(DEPLOY_DIR)
	@image='$(IMAGE)'; \
	case "$$image" in \
	  *@*) name="$${image%@*}"; pin="digest: $${image#*@}" ;; \
	  *) case "$${image##*/}" in \
	       *:*) name="$${image%:*}"; pin="newTag: \"$${image##*:}\"" ;; \
	       *) name="$$image"; pin="newTag: latest" ;; \
	     esac ;; \
	esac; \
	base=$$($(PYTHON) -c 'import os, sys; print(os.path.relpath("manifests", sys.argv[1]))' '$(DEPLOY_DIR)'); \
	printf '%s\n' \
	  '# Written by make deploy: manifests/ with the image to deploy.' \
	  'apiVersion: kustomize.config.k8s.io/v1beta1' \
	  'kind: Kustomization' \
	  'resources:' \
	  "  - $$base" \
	  'images:' \
	  '  - name: allocbridge' \
	  "    newName: $$name" \
	  "    $$pin" > $(DEPLOY_DIR)/kustomization.yaml

# Installs or upgrades allocbridge wherever KUBECTL points. The CRDs go first, so changed CRDs
# are established before the replicas that rely on them roll out. kubectl wait fails at once
# on a CRD whose status has no conditions yet (a fresh API server), hence the retries.
deploy: deploy-overlay
	$(KUBECTL) apply -k crds/
	for attempt in 1 2 3 4 5 6 7 8 9 10; do \
	  $(KUBECTL) wait --for=condition=Established --timeout=60s \
	    crd/allocations.allocbridge.io crd/clusterkopfpeerings.kopf.dev crd/kopfpeerings.kopf.dev \
	    && break; \
	  [ $$attempt -lt 10 ] || exit 1; sleep 1; \
	done
	$(KUBECTL) apply -k $(DEPLOY_DIR)
	$(KUBECTL) -n allocbridge-system rollout status deployment/allocbridge --timeout=180s

# The cluster test suite against a kind cluster that runs the image (needs Docker and kind).
e2e-kind: $(BIN)/.installed image-docker
	@mkdir -p $(dir $(KIND_KUBECONFIG))
	kind get clusters | grep -qx '$(KIND_CLUSTER)' || kind create cluster --name $(KIND_CLUSTER) --wait 120s
	kind get kubeconfig --name $(KIND_CLUSTER) > $(KIND_KUBECONFIG)
	kind load docker-image $(IMAGE) --name $(KIND_CLUSTER)
	$(MAKE) deploy IMAGE=$(IMAGE) KUBECTL="$(KUBECTL) --kubeconfig=$(abspath $(KIND_KUBECONFIG))"
	ALLOCBRIDGE_TEST_KUBECONFIG=$(abspath $(KIND_KUBECONFIG)) $(BIN)/pytest -m cluster $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .dev .mypy_cache .pytest_cache .ruff_cache
