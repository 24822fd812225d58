# syntax=docker/dockerfile:1
# One image for every function (reconcile, gc, status) and the dead-letter sink. It runs
# `python -m functions serve all` (all three functions in one process, as `func deploy` and a
# local run do); each Knative Service in config/serving picks one function with `args`.
#
# Build: docker build -t quay.io/opendatahub/odh-training-functions:0.1.0 .
# The upstream Trainer manifests are fetched at build time at a pinned commit
# (--build-arg TRAINER_REF=<commit> picks another).

# kustomize renders the Trainer manifests at run time (functions/trainer/render.py).
FROM docker.io/library/golang:1.24.4 AS kustomize
ENV CGO_ENABLED=0 GOBIN=/out GOFLAGS=-trimpath GOTOOLCHAIN=auto
RUN go install sigs.k8s.io/kustomize/kustomize/v5@v5.8.1

# The upstream Kubeflow Trainer manifests (opendatahub-io/trainer `manifests/`).
FROM registry.access.redhat.com/ubi9/python-312:9.6-1756995774 AS manifests
ARG TRAINER_REF=d140e85264020f29d1e5a8d959ab2fde4aec6681
COPY hack/get_trainer_manifests.sh /tmp/get_trainer_manifests.sh
RUN TRAINER_REF="${TRAINER_REF}" bash /tmp/get_trainer_manifests.sh /opt/app-root/manifests/trainer

# The Python environment: the pinned dependency closure, then the project without resolving
# anything else, then bytecode for everything (the root filesystem is read-only at run time,
# and compiling at start-up would cost seconds).
FROM registry.access.redhat.com/ubi9/python-312:9.6-1756995774 AS build
WORKDIR /opt/app-root/src
COPY requirements.txt ./
RUN python -m venv /opt/app-root/functions \
    && /opt/app-root/functions/bin/pip install --no-cache-dir --no-deps -r requirements.txt \
    && /opt/app-root/functions/bin/pip install --no-cache-dir setuptools==84.2.1
COPY pyproject.toml README.md* ./
COPY functions/ functions/
RUN /opt/app-root/functions/bin/pip install --no-cache-dir --no-deps --no-build-isolation . \
    && /opt/app-root/functions/bin/pip uninstall --yes setuptools \
    && /opt/app-root/functions/bin/python -m compileall -q -j 0 \
       --invalidation-mode unchecked-hash /opt/app-root/functions/lib

FROM registry.access.redhat.com/ubi9/python-312:9.6-1756995774
LABEL name="odh-training-functions" \
      summary="Kubeflow training controllers as Knative functions" \
      description="Event-driven reconcile, gc and status functions for the Trainer component and the Kubeflow training jobs" \
      io.k8s.display-name="ODH training functions" \
      io.openshift.tags="odh,kubeflow,training,knative"
USER 0
COPY --from=kustomize /out/kustomize /usr/local/bin/kustomize
COPY --from=build /opt/app-root/functions /opt/app-root/functions
COPY --from=manifests /opt/app-root/manifests/trainer /opt/manifests/trainer
COPY manifests/runtimes /opt/manifests/runtimes
COPY manifests/imagestreams /opt/manifests/imagestreams
# OpenShift runs the container as an arbitrary UID in group 0: group 0 may read (not change)
# the templates and the Python environment, and owns the render work directory.
RUN mkdir -p /opt/manifests-work \
    && chown -R 0:0 /opt/manifests /opt/app-root/functions \
    && chmod -R g=u-w /opt/manifests /opt/app-root/functions \
    && chown 1001:0 /opt/manifests-work \
    && chmod g=u /opt/manifests-work
ENV PATH=/opt/app-root/functions/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TRAINER_MANIFESTS_ROOT=/opt/manifests \
    TRAINER_WORK_DIR=/opt/manifests-work \
    KUSTOMIZE_BIN=/usr/local/bin/kustomize \
    PORT=8080
USER 1001
EXPOSE 8080
ENTRYPOINT ["python", "-m", "functions"]
CMD ["serve", "all"]
