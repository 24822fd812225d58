"""Other controllers of the objects this project manages, and what to do about them.

Open Data Hub / OpenShift AI ship their own trainer component (the Go trainer-operator, which
reconciles the same ``default-trainer`` CR, applies the same upstream manifests under the same
``platform.opendatahub.io/part-of=trainer`` label and field manager) and their own training
operator (which reconciles the same ``kubeflow.org`` job kinds, and serves ``MPIJob`` as ``v1``
only). Two controllers of one object undo each other's writes, and one's garbage collection
deletes what the other installed. So coexistence is decided, not hoped for: when another
controller is active, ours refuses to act (a condition and an Event say what to change) and
deletes nothing.

This module is the pure half: the platform as observed (:class:`Platform`) in, the conflicts
out. ``functions.platform.coexistence`` reads the cluster; ``python -m functions doctor`` reports
the same conflicts before an install.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Obj = Mapping[str, Any]

# How the platform's controllers are recognised: the labels their Deployments carry
# (opendatahub-io/trainer-operator config/manager; kubeflow training-operator manifests/base).
TRAINER_OPERATOR_SELECTOR = "app.kubernetes.io/name=trainer-operator"
TRAINING_OPERATOR_SELECTOR = "control-plane=kubeflow-training-operator"
# DataScienceCluster components (spec.components.<name>.managementState).
DSC_TRAINER = "trainer"
DSC_TRAINING_OPERATOR = "trainingoperator"
DSC_ACTIVE_STATES = frozenset({"Managed"})

# The label our install puts on what it owns (config/crd/kustomization.yaml and every object of
# config/); a CRD labelled for another product, or managed by OLM, belongs to someone else.
OWNER_LABEL = "app.kubernetes.io/part-of"
OWNER_VALUE = "odh-training"
_FOREIGN_LABELS = ("olm.managed", "platform.opendatahub.io/part-of", "olm.owner")
_FOREIGN_PREFIXES = ("operators.coreos.com/",)

TRAINER_CRD = "trainers.components.platform.opendatahub.io"
# Our CRDs and the version each must serve for our controllers and event sources.
REQUIRED_VERSIONS: Mapping[str, str] = {
    TRAINER_CRD: "v1alpha1",
    "pytorchjobs.kubeflow.org": "v1",
    "tfjobs.kubeflow.org": "v1",
    "mxjobs.kubeflow.org": "v1",
    "xgboostjobs.kubeflow.org": "v1",
    "paddlejobs.kubeflow.org": "v1",
    "jaxjobs.kubeflow.org": "v1",
    "mpijobs.kubeflow.org": "v2beta1",
}
# The CRDs of the training-job kinds (Scope.JOBS).
JOB_CRDS = tuple(name for name in REQUIRED_VERSIONS if name != TRAINER_CRD)


class Scope(StrEnum):
    """What a conflict stops: the Trainer component, or the training-job controllers."""

    TRAINER = "trainer"
    JOBS = "jobs"


class Conflict(BaseModel):
    """One reason two controllers would fight; ``fix`` says what the admin changes."""

    model_config = ConfigDict(frozen=True)

    scope: Scope
    reason: str
    message: str
    fix: str


class Workload(BaseModel):
    """A Deployment of another controller: where it runs and whether it is scaled up."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    replicas: int = 1

    @classmethod
    def from_object(cls, obj: Obj) -> Workload:
        meta = obj.get("metadata") or {}
        replicas = (obj.get("spec") or {}).get("replicas")
        return cls(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
                   replicas=1 if replicas is None else int(replicas))

    @property
    def where(self) -> str:
        return f"Deployment {self.namespace}/{self.name}"


class Crd(BaseModel):
    """What ownership and serving of a CRD look like from outside."""

    model_config = ConfigDict(frozen=True)

    name: str
    served: tuple[str, ...] = ()
    labels: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def from_object(cls, obj: Obj) -> Crd:
        meta = obj.get("metadata") or {}
        versions = (obj.get("spec") or {}).get("versions") or []
        return cls(name=str(meta.get("name") or ""),
                   served=tuple(str(v.get("name")) for v in versions if v.get("served")),
                   labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()})

    def foreign_owner(self) -> str | None:
        """Who else manages this CRD, by its labels (``None``: nobody else we know of)."""
        for key, value in sorted(self.labels.items()):
            if key == OWNER_LABEL and value != OWNER_VALUE:
                return f"{key}={value}"
            if key in _FOREIGN_LABELS or key.startswith(_FOREIGN_PREFIXES):
                return f"{key}={value}" if value else key
        return None


def _selector_pair(selector: str) -> tuple[str, str]:
    key, _, value = selector.partition("=")
    return key, value


# Labels that mark an object as another controller's own: its Deployment and what OLM installs.
_OTHER_CONTROLLERS = (_selector_pair(TRAINER_OPERATOR_SELECTOR),
                      _selector_pair(TRAINING_OPERATOR_SELECTOR))


def managed_elsewhere(obj: Obj) -> bool:
    """Whether ``obj`` belongs to another controller or to OLM, whatever labels it shares with
    ours (garbage collection never deletes such an object)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if any(labels.get(key) == value for key, value in _OTHER_CONTROLLERS):
        return True
    return any(key in ("olm.managed", "olm.owner") or key.startswith(_FOREIGN_PREFIXES)
               for key in labels)


class DscComponent(BaseModel):
    """One component of a DataScienceCluster as its spec asks for it."""

    model_config = ConfigDict(frozen=True)

    cluster: str
    component: str
    management_state: str

    @property
    def active(self) -> bool:
        return self.management_state in DSC_ACTIVE_STATES


def dsc_components(dsc: Obj, names: Iterable[str] = (DSC_TRAINER, DSC_TRAINING_OPERATOR)
                   ) -> list[DscComponent]:
    """The named components of one DataScienceCluster (those it does not mention are absent)."""
    cluster = str((dsc.get("metadata") or {}).get("name") or "")
    components = (dsc.get("spec") or {}).get("components") or {}
    found: list[DscComponent] = []
    for name in names:
        state = (components.get(name) or {}).get("managementState")
        if state:
            found.append(DscComponent(cluster=cluster, component=name,
                                      management_state=str(state)))
    return found


class Platform(BaseModel):
    """The other controllers as observed. ``None`` fields were not (or could not be) read."""

    model_config = ConfigDict(frozen=True)

    trainer_operators: tuple[Workload, ...] = ()
    training_operators: tuple[Workload, ...] = ()
    dsc: tuple[DscComponent, ...] = ()
    crds: dict[str, Crd] = Field(default_factory=dict)


def _workload_conflicts(workloads: Iterable[Workload], scope: Scope, reason: str, what: str,
                        fix: str) -> list[Conflict]:
    return [Conflict(scope=scope, reason=reason,
                     message=f"{what} runs as {w.where}", fix=fix)
            for w in workloads if w.replicas > 0]


def _dsc_conflicts(components: Iterable[DscComponent]) -> list[Conflict]:
    found: list[Conflict] = []
    for c in components:
        if not c.active:
            continue
        scope = Scope.TRAINER if c.component == DSC_TRAINER else Scope.JOBS
        found.append(Conflict(
            scope=scope, reason="PlatformComponentManaged",
            message=(f"DataScienceCluster {c.cluster} manages its own {c.component} component "
                     f"(managementState {c.management_state})"),
            fix=(f"set spec.components.{c.component}.managementState to Removed in "
                 f"DataScienceCluster {c.cluster}")))
    return found


def _crd_conflicts(crds: Mapping[str, Crd]) -> list[Conflict]:
    found: list[Conflict] = []
    for name, required in REQUIRED_VERSIONS.items():
        crd = crds.get(name)
        if crd is None:
            continue
        scope = Scope.TRAINER if name == TRAINER_CRD else Scope.JOBS
        owner = crd.foreign_owner()
        if owner is not None:
            found.append(Conflict(
                scope=scope, reason="CRDOwnedElsewhere",
                message=f"CRD {name} is managed by another installer ({owner})",
                fix=(f"remove the other product that installs {name} (or its component), "
                     "then apply config/crd again")))
        elif crd.served and required not in crd.served:
            found.append(Conflict(
                scope=scope, reason="CRDVersionNotServed",
                message=(f"CRD {name} serves {', '.join(crd.served)}, not {required} "
                         "(another operator's definition)"),
                fix=(f"remove the operator that installed {name} (e.g. the training "
                     "operator), delete the CRD, and apply config/crd again")))
    return found


def conflicts(platform: Platform) -> list[Conflict]:
    """Every conflict, Trainer ones first."""
    found = [
        *_workload_conflicts(
            platform.trainer_operators, Scope.TRAINER, "PlatformTrainerOperator",
            "the platform's trainer-operator",
            "set the platform's trainer component to Removed (DataScienceCluster "
            "spec.components.trainer.managementState: Removed), or scale that Deployment to 0"),
        *_workload_conflicts(
            platform.training_operators, Scope.JOBS, "TrainingOperator",
            "the Kubeflow training operator",
            "set the platform's trainingoperator component to Removed (DataScienceCluster "
            "spec.components.trainingoperator.managementState: Removed), or scale that "
            "Deployment to 0"),
        *_dsc_conflicts(platform.dsc),
        *_crd_conflicts(platform.crds),
    ]
    return sorted(found, key=lambda c: c.scope != Scope.TRAINER)


def blocking(platform: Platform, scope: Scope) -> list[Conflict]:
    return [c for c in conflicts(platform) if c.scope is scope]


def summary(found: Iterable[Conflict]) -> str:
    """One message naming every conflict and its fix (a condition's message)."""
    return "; ".join(f"{c.message}: {c.fix}" for c in found)
