# allocbridge: the README's two commands are `make dev` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONTROLPLANE_BIN := .cache/controlplane/bin
IMAGE ?= allocbridge:dev
KIND_CLUSTER ?= allocbridge
PYTEST_ARGS ?=

.PHONY: all dev test lint unit bench controlplane image deploy e2e-kind clean check-go

all: test

$(BIN)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "error: allocbridge needs Python 3.11 or newer as '$(PYTHON)'" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

venv: $(BIN)/.installed

# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok from the Go
# wrapper modules in controlplane/; reuses what is already built.
controlplane:
	@controlplane/build.sh $(CONTROLPLANE_BIN)

lint: $(BIN)/.installed
	$(BIN)/ruff check operator tests
	$(BIN)/ruff format --check operator tests
	$(BIN)/mypy
	$(BIN)/lint-imports

test: $(BIN)/.installed controlplane lint
	ALLOCBRIDGE_CONTROLPLANE_BIN=$(abspath $(CONTROLPLANE_BIN)) $(BIN)/pytest $(PYTEST_ARGS)

unit: $(BIN)/.installed
	$(BIN)/pytest -m 'not cluster' $(PYTEST_ARGS)

dev: $(BIN)/.installed controlplane
	ALLOCBRIDGE_CONTROLPLANE_BIN=$(abspath $(CONTROLPLANE_BIN)) $(BIN)/allocbridge dev

bench: $(BIN)/.installed controlplane
	ALLOCBRIDGE_CONTROLPLANE_BIN=$(abspath $(CONTROLPLANE_BIN)) $(BIN)/python -m benchmarks $(BENCH_ARGS)

image:
	docker build -t $(IMAGE) .

deploy:
	cd manifests && kustomize edit set image allocbridge=$(IMAGE) 2>/dev/null || true
	kubectl apply -k manifests/

e2e-kind: image
	kind create cluster --name $(KIND_CLUSTER) || true
	kind load docker-image $(IMAGE) --name $(KIND_CLUSTER)
	$(MAKE) deploy IMAGE=$(IMAGE)
	kind get kubeconfig --name $(KIND_CLUSTER) > .cache/kind.kubeconfig
	ALLOCBRIDGE_TEST_KUBECONFIG=$(abspath .cache/kind.kubeconfig) $(BIN)/pytest -m cluster $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .dev .mypy_cache .pytest_cache .ruff_cache
