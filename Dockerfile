# syntax=docker/dockerfile:1
# One image for every function (reconcile, gc, status) and the dead-letter sink. It runs
# `python -m functions serve all` (all three functions in one process, as `func deploy` and a
# local run do); each Knative Service in config/serving picks one function with `args`.
#
# Build: docker build -t quay.io/opendatahub/odh-training-functions:0.1.0 .
#   --build-arg VERSION=... REVISION=$(git rev-parse HEAD) CREATED=<RFC 3339 time> label it.
# Two ways to get what is not in this repository (SOURCE):
#   network (default): the upstream Trainer manifests are fetched at a pinned commit
#     (--build-arg TRAINER_REF=<commit> picks another), kustomize is built from the Go module
#     proxy (checksums verified by the Go sum database) with the base image's Go toolchain,
#     Python wheels come from the package index;
#   context (hermetic, no network): `bash hack/prepare_hermetic.sh` puts the manifests tree,
#     a kustomize binary and the wheels under hermetic/ of the build context, then
#     `docker build --build-arg SOURCE=context --network=none .`.
# Either way every wheel is checked against the sha256 pinned in requirements.txt
# (pip --require-hashes) and only wheels are installed.
ARG SOURCE=network

# kustomize renders the Trainer manifests at run time (functions/trainer/render.py).
FROM docker.io/library/golang:1.24.4 AS kustomize-network
ENV CGO_ENABLED=0 GOBIN=/out GOFLAGS=-trimpath GOTOOLCHAIN=local
RUN go install sigs.k8s.io/kustomize/kustomize/v5@v5.8.1 && test -x /out/kustomize

FROM registry.access.redhat.com/ubi9/python-312:9.6-1756995774 AS kustomize-context
COPY hermetic/bin/kustomize /out/kustomize

# The upstream Kubeflow Trainer manifests (opendatahub-io/trainer `manifests/`).
FROM registry.access.redhat.com/ubi9/python-312:9.6-1756995774 AS manifests-network
ARG TRAINER_REF=d140e85264020f29d1e5a8d959ab2fde4aec6681
COPY hack/get_trainer_manifests.sh /tmp/get_trainer_manifests.sh
RUN TRAINER_REF="${TRAINER_REF}" bash /tmp/get_trainer_manifests.sh /opt/app-root/manifests/trainer

FROM registry.access.redhat.com/ubi9/python-312:9.6-1756995774 AS manifests-context
COPY hack/get_trainer_manifests.sh /tmp/get_trainer_manifests.sh
COPY hermetic/manifests/trainer /tmp/trainer
RUN bash /tmp/get_trainer_manifests.sh --from /tmp/trainer /opt/app-root/manifests/trainer

# Wheels: none ahead of time (pip downloads them), or the ones in the build context.
FROM registry.access.redhat.com/ubi9/python-312:9.6-1756995774 AS wheels-network
RUN mkdir -p /opt/app-root/wheels

FROM registry.access.redhat.com/ubi9/python-312:9.6-1756995774 AS wheels-context
COPY hermetic/wheels /opt/app-root/wheels

# The stages of the chosen SOURCE (stages of this file, so no tag; BuildKit builds only these).
# hadolint ignore=DL3006
FROM kustomize-${SOURCE} AS kustomize
# hadolint ignore=DL3006
FROM manifests-${SOURCE} AS manifests
# hadolint ignore=DL3006
FROM wheels-${SOURCE} AS wheels

# The Python environment: the hash-pinned dependency closure, then the project without
# resolving anything else, then bytecode for everything (the root filesystem is read-only at
# run time, and compiling at start-up would cost seconds).
FROM registry.access.redhat.com/ubi9/python-312:9.6-1756995774 AS build
ARG SOURCE
WORKDIR /opt/app-root/src
COPY --from=wheels /opt/app-root/wheels /opt/app-root/wheels
COPY requirements.txt requirements-build.txt ./
RUN if [ "${SOURCE}" = context ]; then set -- --no-index --find-links /opt/app-root/wheels; \
    else set --; fi \
    && python -m venv /opt/app-root/functions \
    && /opt/app-root/functions/bin/pip install --no-cache-dir --no-deps --require-hashes \
       --only-binary=:all: "$@" -r requirements.txt -r requirements-build.txt
COPY pyproject.toml README.md* ./
COPY functions/ functions/
RUN /opt/app-root/functions/bin/pip install --no-cache-dir --no-deps --no-build-isolation \
       --no-index . \
    && /opt/app-root/functions/bin/pip uninstall --yes setuptools \
    && /opt/app-root/functions/bin/python -m compileall -q -j 0 \
       --invalidation-mode unchecked-hash /opt/app-root/functions/lib

FROM registry.access.redhat.com/ubi9/python-312:9.6-1756995774
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
# Our own labels, OCI and the OpenShift ones, replacing what the base image's would say about
# this image (its name, version, vendor, source and s2i scripts).
LABEL org.opencontainers.image.title="odh-training-functions" \
      org.opencontainers.image.description="Event-driven reconcile, gc and status functions for the Trainer component and the Kubeflow training jobs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.vendor="Open Data Hub" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.url="https://opendatahub.io" \
      org.opencontainers.image.base.name="registry.access.redhat.com/ubi9/python-312:9.6-1756995774" \
      name="odh-training-functions" \
      version="${VERSION}" \
      release="${REVISION}" \
      vendor="Open Data Hub" \
      url="https://opendatahub.io" \
      vcs-ref="${REVISION}" \
      vcs-type="git" \
      build-date="${CREATED}" \
      com.redhat.component="odh-training-functions" \
      summary="Kubeflow training controllers as Knative functions" \
      description="Event-driven reconcile, gc and status functions for the Trainer component and the Kubeflow training jobs" \
      usage="python -m functions serve reconcile|gc|status|all" \
      io.k8s.display-name="ODH training functions" \
      io.k8s.description="Event-driven reconcile, gc and status functions for the Trainer component and the Kubeflow training jobs" \
      io.openshift.tags="odh,kubeflow,training,knative" \
      io.openshift.s2i.scripts-url="" \
      io.s2i.scripts-url=""
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
