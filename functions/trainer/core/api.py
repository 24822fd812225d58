"""The ``Trainer`` API as pydantic models, and the names every part of the component shares.

The CRD (``config/crd/``) validates what users write; these models are the boundary where the
handlers turn a stored object into typed data, so a field rename or a default lives in one place.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

GROUP = "components.platform.opendatahub.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Trainer"
INSTANCE_NAME = "default-trainer"
DEFAULT_NAMESPACE = "opendatahub"

FINALIZER = "components.platform.opendatahub.io/trainer-cleanup"
PART_OF_LABEL = "platform.opendatahub.io/part-of"
PART_OF_VALUE = "trainer"
PART_OF_SELECTOR = f"{PART_OF_LABEL}={PART_OF_VALUE}"
MANAGED_ANNOTATION = "opendatahub.io/managed"
PLATFORM_CONFIGMAP = "odh-trainer-config"
PLATFORM_VERSION_KEY = "platformVersion"
RUNTIME_FINALIZER = "trainer.kubeflow.org/resource-in-use"

# Server-Side Apply field managers.
FIELD_MANAGER = "trainer-module-controller"
CRD_FIELD_MANAGER = "platform.opendatahub.io"
STATUS_FIELD_MANAGER = "trainer"

# Condition types and the phase strings.
READY = "Ready"
PROVISIONING_SUCCEEDED = "ProvisioningSucceeded"
DEPLOYMENTS_AVAILABLE = "DeploymentsAvailable"
DEGRADED = "Degraded"
PHASE_READY = "Ready"
PHASE_NOT_READY = "Not Ready"


class ManagementState(StrEnum):
    MANAGED = "Managed"
    REMOVED = "Removed"


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class ControllerSpec(_Model):
    """Per-controller tuning. Accepted and stored; the component does not act on it."""

    name: str
    resources: dict[str, Any] | None = None


class FinishedTrainJobs(_Model):
    """What the gc function does with finished TrainJobs in every namespace
    (:mod:`functions.jobs.core.hygiene`; annotations on a TrainJob or its namespace win)."""

    ttl_seconds_after_finished: int | None = Field(default=None, ge=0,
                                                   alias="ttlSecondsAfterFinished")
    history_limit: int | None = Field(default=None, ge=0, alias="historyLimit")


class TrainerSpec(_Model):
    app_namespace: str = Field(default="", alias="appNamespace")
    management_state: ManagementState = Field(default=ManagementState.MANAGED,
                                              alias="managementState")
    finished_train_jobs: FinishedTrainJobs | None = Field(default=None,
                                                          alias="finishedTrainJobs")
    feature_gates: dict[str, bool] = Field(default_factory=dict, alias="featureGates")
    controllers: tuple[ControllerSpec, ...] = ()

    @property
    def namespace(self) -> str:
        """The operand namespace: ``appNamespace``, or ``opendatahub`` when it is empty."""
        return self.app_namespace or DEFAULT_NAMESPACE


class Condition(_Model):
    type: str
    status: str
    reason: str = ""
    message: str = ""
    severity: str = ""
    observed_generation: int | None = Field(default=None, alias="observedGeneration")
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")

    def same_observation(self, other: Condition) -> bool:
        """Equal apart from the transition time (what decides whether anything changed)."""
        return (self.type, self.status, self.reason, self.message, self.severity,
                self.observed_generation) == (other.type, other.status, other.reason,
                                              other.message, other.severity,
                                              other.observed_generation)


class Release(_Model):
    name: str
    version: str = ""
    repo_url: str = Field(default="", alias="repoUrl")


class TrainerStatus(_Model):
    phase: str = ""
    observed_generation: int = Field(default=0, alias="observedGeneration")
    conditions: tuple[Condition, ...] = ()
    releases: tuple[Release, ...] = ()

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def to_object(self) -> dict[str, Any]:
        """The status as the API stores it: camelCase, empty optional fields left out."""
        return {
            "phase": self.phase,
            "observedGeneration": self.observed_generation,
            "conditions": [_compact(c.model_dump(by_alias=True)) for c in self.conditions],
            "releases": [_compact(r.model_dump(by_alias=True)) for r in self.releases],
        }


def _compact(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None and v != ""}


class TrainerMeta(_Model):
    name: str
    uid: str = ""
    generation: int = 0
    resource_version: str = Field(default="", alias="resourceVersion")
    deletion_timestamp: str | None = Field(default=None, alias="deletionTimestamp")
    finalizers: tuple[str, ...] = ()


class Trainer(_Model):
    metadata: TrainerMeta
    spec: TrainerSpec = Field(default_factory=TrainerSpec)
    status: TrainerStatus = Field(default_factory=TrainerStatus)

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> Trainer:
        """Raises ``pydantic.ValidationError`` for an object the CRD would not have admitted."""
        return cls.model_validate({
            "metadata": obj.get("metadata") or {},
            "spec": obj.get("spec") or {},
            "status": obj.get("status") or {},
        })

    @property
    def deleting(self) -> bool:
        return self.metadata.deletion_timestamp is not None

    @property
    def removed(self) -> bool:
        return self.spec.management_state is ManagementState.REMOVED
