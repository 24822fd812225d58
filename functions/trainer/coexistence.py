"""Reading the platform's own controllers from the cluster (see
:mod:`functions.trainer.core.coexistence` for the rules).

A read this identity may not make (403) or of an API the cluster does not serve (404) reads as
"nothing there": the checks then pass on what could be seen, never fail a reconcile on their
own.
"""

from __future__ import annotations

from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from functions.trainer import sweep
from functions.trainer.core.coexistence import (
    TRAINER_CRD,
    TRAINER_OPERATOR_SELECTOR,
    TRAINING_OPERATOR_SELECTOR,
    Crd,
    DscComponent,
    Platform,
    Workload,
    dsc_components,
)

_DSC_GROUP = "datasciencecluster.opendatahub.io"
# Newest first: Open Data Hub 3 serves v2; earlier releases v1 only.
DSC_RESOURCES = tuple(Resource(_DSC_GROUP, version, "datascienceclusters", "DataScienceCluster",
                               namespaced=False) for version in ("v2", "v1"))


def workloads(kube: KubeClient, selector: str) -> tuple[Workload, ...]:
    """Deployments in any namespace matching a label selector."""
    return tuple(Workload.from_object(o)
                 for o in sweep.list_all(kube, resources.DEPLOYMENTS, None, selector))


def data_science_clusters(kube: KubeClient) -> tuple[DscComponent, ...]:
    """The trainer and trainingoperator components of every DataScienceCluster."""
    for res in DSC_RESOURCES:
        try:
            items = kube.list(res)
        except ApiError as exc:
            if exc.status in (403, 404, 405):
                continue
            raise
        return tuple(c for dsc in items for c in dsc_components(dsc))
    return ()


def crd(kube: KubeClient, name: str) -> Crd | None:
    try:
        obj = kube.get(resources.CRDS, name)
    except ApiError as exc:
        if exc.status == 403:
            return None
        raise
    return None if obj is None else Crd.from_object(obj)


def observe(kube: KubeClient, *, jobs: bool = False,
            crd_names: tuple[str, ...] = (TRAINER_CRD,)) -> Platform:
    """What a Trainer handler needs (``jobs`` adds the training operator)."""
    found = {name: c for name in crd_names if (c := crd(kube, name)) is not None}
    return Platform(
        trainer_operators=workloads(kube, TRAINER_OPERATOR_SELECTOR),
        training_operators=workloads(kube, TRAINING_OPERATOR_SELECTOR) if jobs else (),
        dsc=data_science_clusters(kube),
        crds=found)
