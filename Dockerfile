# allocbridge's container image with Docker: `make image-docker` (docker build -t allocbridge:dev .;
# the base is the PYTHON_IMAGE build argument). `make image` builds the same image without
# Docker, from Debian's python3.11 packages (localcluster/allocbridge_localcluster/operator_image.py).
#
# The builder stage installs the package and its pinned dependencies (wheels only) into a
# virtual environment (the test control plane, `localcluster/`, is a package of its own and is
# not copied); the final
# stage gets only that environment on the same slim base, so it holds no pip caches, sources
# or build tools, and runs as an unprivileged numeric user (which `runAsNonRoot` can verify).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/allocbridge
WORKDIR /src
# Every dependency ships wheels for CPython 3.11 on amd64 and arm64, so no compiler is needed.
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN /opt/allocbridge/bin/pip install --only-binary=:all: --no-deps -r operator/requirements.txt \
 && /opt/allocbridge/bin/pip install --no-deps .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="allocbridge" \
      org.opencontainers.image.description="Nomad's allocations API over Kubernetes Allocation resources"
RUN groupadd --system --gid 10001 allocbridge \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin allocbridge
COPY --from=builder /opt/allocbridge /opt/allocbridge
# Byte code was compiled at build time: the root filesystem is read-only at run time.
ENV PATH=/opt/allocbridge/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 4646 9203
ENTRYPOINT ["allocbridge", "run", "--config", "/etc/allocbridge/allocbridge.hcl"]
