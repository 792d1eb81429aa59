# The kinetic runner image: what every Kubernetes/GKE job runs (`python -m kinetic_core.runtime.runner`).
# Its Python minor, cloudpickle and kinetic-workflows versions must be the submitter's: a runner
# that differs ends the job with reason ImageMismatch before unpickling anything. Print yours:
#   python -c "import sys, cloudpickle, kinetic_core as k; print(sys.version_info[:2], cloudpickle.__version__, k.__version__)"
# Build and push (from the repository root, so that this kinetic-workflows is installed):
#   docker build --build-arg PYTHON_VERSION=3.11 --build-arg CLOUDPICKLE_VERSION=3.1.2 \
#     -t REGISTRY/kinetic-runner:0.1.0 .
#   docker push REGISTRY/kinetic-runner:0.1.0
# Use:    Target(backend="gke", image="REGISTRY/kinetic-runner:0.1.0")  (or KINETIC_IMAGE)
# A local cluster (kind, minikube) may use the default tag instead, without pushing:
#   docker build -t kinetic-workflows-runner:0.1.0 . && kind load docker-image kinetic-workflows-runner:0.1.0
# Add your own dependencies in an image FROM this one, install them at pod start with
# Target(requirements=[...]) (uv, included here), or ship your modules by value with
# Target(pickle_by_value=["mypkg"]).
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim

# empty: the newest cloudpickle the project allows
ARG CLOUDPICKLE_VERSION=

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/kinetic
COPY pyproject.toml README.md ./
COPY kinetic_core ./kinetic_core
COPY providers ./providers
RUN pip install ".[gcs,kubernetes,fast]" uv ${CLOUDPICKLE_VERSION:+"cloudpickle==${CLOUDPICKLE_VERSION}"} \
    && useradd --create-home --uid 1000 kinetic \
    && mkdir -p /var/cache/kinetic && chown kinetic /var/cache/kinetic

USER kinetic
WORKDIR /home/kinetic
ENTRYPOINT ["python", "-m", "kinetic_core.runtime.runner"]
