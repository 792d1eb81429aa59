# The kinetic runner image: what every Kubernetes/GKE job runs (`python -m kinetic_core.runner`).
# Build:  docker build -t REGISTRY/kinetic-runner:0.1.0 .
# Use:    Target(backend="gke", image="REGISTRY/kinetic-runner:0.1.0")  (or KINETIC_IMAGE)
# Match the submitter's Python minor version and cloudpickle version (the runner explains skew).
# Add your own dependencies in an image FROM this one, or ship your modules by value
# with Target(pickle_by_value=["mypkg"]).
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/kinetic
COPY pyproject.toml README.md ./
COPY kinetic_core ./kinetic_core
COPY providers ./providers
RUN pip install ".[gcs,kubernetes]" && useradd --create-home --uid 1000 kinetic

USER kinetic
WORKDIR /home/kinetic
ENTRYPOINT ["python", "-m", "kinetic_core.runner"]
