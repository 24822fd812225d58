"""Operator-wide knobs of the job controllers (upstream's command-line flags): a module of
their own so that what reads them (the pod builder, the framework environment, gang
scheduling, the MPI plan) depends on none of the others for them."""

from __future__ import annotations

from dataclasses import dataclass

VOLCANO = "volcano"
KUBECTL_DELIVERY_IMAGE = "ghcr.io/kubeflow/training-v1/kubectl-delivery:latest"
SCHEDULER_PLUGINS = "scheduler-plugins"


@dataclass(frozen=True, slots=True)
class Settings:
    """Read once by the adapter (:mod:`functions.jobs.reads`)."""

    gang_scheduler: str = ""                 # "", "volcano" or "scheduler-plugins"
    gang_scheduler_name: str = "scheduler-plugins-scheduler"
    cluster_domain: str = ""                 # CUSTOM_CLUSTER_DOMAIN for TF_CONFIG
    init_container_image: str = "alpine:3.10"
    init_container_max_tries: int = 100
    # MPIJob v1's launcher init container, which puts kubectl where kubexec.sh runs it
    # (upstream's --mpi-kubectl-delivery-image).
    kubectl_delivery_image: str = KUBECTL_DELIVERY_IMAGE
