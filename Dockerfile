# syntax=docker/dockerfile:1
# The mlops-platform operator image: `docker build -t mlops-platform:0.1.0 .`
# Stage 1 builds the wheels (ours, and every dependency at the versions pinned in
# src/mlops_platform/devcluster/realnode/requirements/operator.txt, the pins the local cluster's image
# installs too) and installs exactly those into a venv; stage 2 is the same slim base with that venv
# only: no compiler, no pip, no source tree, non-root.
# The local cluster builds the same image without a Docker engine or registry
# (mlops_platform.devcluster.realnode.images.OPERATOR: `mlops-platform dev import-image mlops-platform`);
# tests/unit/test_realnode.py checks the two agree on user, entrypoint, ports and environment.

FROM python:3.11-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
ARG PINS=src/mlops_platform/devcluster/realnode/requirements/operator.txt
RUN python -m pip wheel --no-deps --wheel-dir /wheels/own . \
 && python -m pip wheel --no-deps --wheel-dir /wheels -r "$PINS" \
 && python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --no-deps --find-links /wheels -r "$PINS" /wheels/own/*.whl \
 && /opt/venv/bin/pip uninstall --yes pip

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="mlops-platform" \
      org.opencontainers.image.description="Kubernetes operator for InferenceService (mlops.platform)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
COPY --from=build /opt/venv /opt/venv
# A numeric uid/gid (no passwd entry needed) so `runAsNonRoot` can be verified by the kubelet.
USER 65532:65532
# 8080: /metrics, 8081: /healthz and /readyz (bind them to 0.0.0.0 with the run flags).
EXPOSE 8080 8081
ENTRYPOINT ["mlops-platform", "run"]
