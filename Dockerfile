# The qosched image: the Kubernetes scheduler (`qosched k8s run`) and the training program of
# the built-in workloads (`qosched k8s train`), with CPU PyTorch. `make image` builds it under
# the name the manifests use (`qosched k8s manifests --image` for another one).
ARG PYTHON=3.11-slim-bookworm

FROM python:${PYTHON} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/qosched
ENV PATH=/opt/qosched/bin:$PATH
# CPU PyTorch first, from its own index: PyPI's default wheel brings CUDA libraries (GBs) that
# neither the scheduler nor the CPU trainer uses. The pin is pyproject's.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# This repository itself, with the Kubernetes client; versions are pyproject's bounds.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[kubernetes]"

FROM python:${PYTHON}
COPY --from=build /opt/qosched /opt/qosched
# HOME and MPLCONFIGDIR on /tmp: the scheduler's root filesystem is read-only.
ENV PATH=/opt/qosched/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp
# The uid the manifests run as (runAsNonRoot); no shell account, no home.
USER 65532:65532
WORKDIR /tmp
# /metrics, /healthz, /readyz
EXPOSE 8080
CMD ["qosched", "k8s", "run"]
