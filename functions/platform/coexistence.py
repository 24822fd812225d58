"""Reading the platform's own controllers from the cluster (see
:mod:`functions.platform.core.coexistence` for the rules).

A read this identity may not make (403) or of an API the cluster does not serve (404, 405)
reads as "nothing there": the checks then pass on what could be seen, never fail a reconcile
on their own. Any other answer is raised.
"""

from __future__ import annotations

from typing import Any

from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from functions.platform.core.coexistence import (
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
# Answers that mean "nothing there for this identity".
NOTHING_THERE = frozenset({403, 404, 405})


def _list(kube: KubeClient, res: Resource, label_selector: str | None = None
          ) -> list[dict[str, Any]] | None:
    """Objects of a type in every namespace; ``None`` when not served or not allowed."""
    try:
        return kube.list(res, None, label_selector=label_selector)
    except ApiError as exc:
        if exc.status in NOTHING_THERE:
            return None
        raise


def workloads(kube: KubeClient, selector: str) -> tuple[Workload, ...]:
    """Deployments in any namespace matching a label selector."""
    return tuple(Workload.from_object(o)
                 for o in _list(kube, resources.DEPLOYMENTS, selector) or ())


def data_science_clusters(kube: KubeClient) -> tuple[DscComponent, ...]:
    """The trainer and trainingoperator components of every DataScienceCluster."""
    for res in DSC_RESOURCES:
        items = _list(kube, res)
        if items is not None:
            return tuple(c for dsc in items for c in dsc_components(dsc))
    return ()


def crd(kube: KubeClient, name: str) -> Crd | None:
    try:
        obj = kube.get(resources.CRDS, name)
    except ApiError as exc:
        if exc.status in NOTHING_THERE:
            return None
        raise
    return None if obj is None else Crd.from_object(obj)


def observe(kube: KubeClient, *, trainer: bool = True, jobs: bool = False,
            crd_names: tuple[str, ...] = (TRAINER_CRD,)) -> Platform:
    """What the handlers of a scope need: ``trainer`` reads the platform's trainer-operator,
    ``jobs`` its training operator; both read the DataScienceClusters and ``crd_names``."""
    found = {name: c for name in crd_names if (c := crd(kube, name)) is not None}
    return Platform(
        trainer_operators=workloads(kube, TRAINER_OPERATOR_SELECTOR) if trainer else (),
        training_operators=workloads(kube, TRAINING_OPERATOR_SELECTOR) if jobs else (),
        dsc=data_science_clusters(kube),
        crds=found)
