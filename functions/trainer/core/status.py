"""The Trainer's status as a function of what was observed.

Three functions write the status (reconcile after provisioning, gc after removal, status on
Deployment and ConfigMap events); all of them call :func:`compute_status`, so given the same
cluster they write the same status and never undo each other. The last provisioning outcome is
not recomputed here: it is the ``ProvisioningSucceeded`` (and ``Degraded``) condition the
provisioning function wrote, read back from the stored status.

Rules: ``Ready`` is True when ``ProvisioningSucceeded`` and ``DeploymentsAvailable`` are;
otherwise it copies the most recently changed unhappy one (False before Unknown). ``Degraded``
is informational. ``phase`` is ``Ready``/``Not Ready``; ``status.observedGeneration`` advances
only when Ready (always, when Removed). ``lastTransitionTime`` changes only when a condition's
status flips.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from functions.trainer.core.api import (
    DEGRADED,
    DEPLOYMENTS_AVAILABLE,
    PHASE_NOT_READY,
    PHASE_READY,
    PROVISIONING_SUCCEEDED,
    READY,
    Condition,
    Release,
    TrainerStatus,
)

DEPENDENTS = (PROVISIONING_SUCCEEDED, DEPLOYMENTS_AVAILABLE)
ERROR_REASON = "Error"
REMOVED_REASON = "Removed"
REMOVED_MESSAGE = "Trainer has been removed"
NOT_READY_REASON = "DeploymentsNotReady"
# Another controller manages the Trainer (functions/platform/core/coexistence.py).
CONFLICT_REASON = "ConflictingController"


class Mode(StrEnum):
    MANAGED = "Managed"
    REMOVED = "Removed"


def timestamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def provisioned(generation: int) -> Condition:
    return Condition(type=PROVISIONING_SUCCEEDED, status="True", observedGeneration=generation)


def provisioning_failed(generation: int, error: str) -> Condition:
    return Condition(type=PROVISIONING_SUCCEEDED, status="False", reason=ERROR_REASON,
                     message=error, observedGeneration=generation)


def conflicting(generation: int, message: str) -> Condition:
    """Provisioning refused: another controller manages the same objects."""
    return Condition(type=PROVISIONING_SUCCEEDED, status="False", reason=CONFLICT_REASON,
                     message=message, observedGeneration=generation)


def removed(generation: int) -> Condition:
    return Condition(type=PROVISIONING_SUCCEEDED, status="False", reason=REMOVED_REASON,
                     message=REMOVED_MESSAGE, observedGeneration=generation)


def deployment_ready(deployment: Mapping[str, Any]) -> bool:
    status = deployment.get("status") or {}
    replicas = int(status.get("replicas") or 0)
    return replicas != 0 and int(status.get("readyReplicas") or 0) == replicas


def deployments_condition(deployments: Sequence[Mapping[str, Any]],
                          previous_observed_generation: int) -> Condition:
    """Counted over labelled Deployments not being deleted (none at all is not available)."""
    deployments = [d for d in deployments
                   if not (d.get("metadata") or {}).get("deletionTimestamp")]
    ready = sum(1 for d in deployments if deployment_ready(d))
    if deployments and ready == len(deployments):
        return Condition(type=DEPLOYMENTS_AVAILABLE, status="True",
                         observedGeneration=previous_observed_generation)
    return Condition(type=DEPLOYMENTS_AVAILABLE, status="False", reason=NOT_READY_REASON,
                     message=f"{ready}/{len(deployments)} deployments ready",
                     observedGeneration=previous_observed_generation)


def _transition(new: Condition, old: Condition | None, now: str) -> Condition:
    """``new`` with the transition time kept from ``old`` unless the status flipped."""
    if old is not None and old.status == new.status and old.last_transition_time:
        return new.model_copy(update={"last_transition_time": old.last_transition_time})
    return new.model_copy(update={"last_transition_time": now})


def _ready(dependents: Iterable[Condition]) -> Condition:
    """The happy condition from the dependents (registration order breaks time ties)."""
    unhappy = [c for c in dependents if not c.severity and c.status != "True"]
    # Newest first; sorted() is stable, so equal times keep registration order.
    unhappy.sort(key=lambda c: c.last_transition_time or "", reverse=True)
    for wanted in ("False", "Unknown"):
        for condition in unhappy:
            if condition.status == wanted:
                return Condition(type=READY, status=wanted, reason=condition.reason,
                                 message=condition.message)
    return Condition(type=READY, status="True")


@dataclass(frozen=True, slots=True)
class StatusInputs:
    mode: Mode
    generation: int
    previous: TrainerStatus
    deployments: Sequence[Mapping[str, Any]]
    releases: tuple[Release, ...]
    now: datetime
    # A fresh provisioning outcome; None keeps the stored one.
    provisioning: Condition | None = None
    # A fresh dependency verdict; None keeps the stored one.
    degraded: Condition | None = None


def compute_status(inputs: StatusInputs) -> TrainerStatus:
    previous = inputs.previous
    now = timestamp(inputs.now)
    old = {c.type: c for c in previous.conditions}

    provisioning = inputs.provisioning or old.get(PROVISIONING_SUCCEEDED)
    if inputs.mode is Mode.REMOVED and (
            provisioning is None or provisioning.observed_generation != inputs.generation):
        provisioning = removed(inputs.generation)
    if provisioning is None:
        provisioning = Condition(type=PROVISIONING_SUCCEEDED, status="Unknown")
    provisioning = _transition(provisioning, old.get(PROVISIONING_SUCCEEDED), now)

    available = _transition(
        deployments_condition(inputs.deployments, previous.observed_generation),
        old.get(DEPLOYMENTS_AVAILABLE), now)

    conditions = [provisioning, available]
    degraded = inputs.degraded or old.get(DEGRADED)
    if inputs.mode is Mode.MANAGED and degraded is not None:
        degraded_now = _transition(degraded, old.get(DEGRADED), now)
    else:
        degraded_now = None

    if inputs.mode is Mode.REMOVED:
        ready = Condition(type=READY, status=provisioning.status, reason=provisioning.reason,
                          message=provisioning.message)
    else:
        ready = _ready(conditions)
    ready = _transition(ready, old.get(READY), now)

    ordered = [ready, *conditions] + ([degraded_now] if degraded_now else [])
    is_ready = ready.status == "True"
    if inputs.mode is Mode.REMOVED or is_ready:
        observed_generation = inputs.generation
    else:
        observed_generation = previous.observed_generation
    return TrainerStatus(
        phase=PHASE_READY if is_ready else PHASE_NOT_READY,
        observedGeneration=observed_generation,
        conditions=tuple(_keep_equal(ordered, old)),
        releases=inputs.releases,
    )


def _keep_equal(conditions: Iterable[Condition], old: Mapping[str, Condition]) -> list[Condition]:
    """Reuse the stored condition when nothing about it changed (times included)."""
    out: list[Condition] = []
    for condition in conditions:
        stored = old.get(condition.type)
        if stored is not None and stored.same_observation(condition) and \
                stored.last_transition_time == condition.last_transition_time:
            out.append(stored)
        else:
            out.append(condition)
    return out


def status_changed(previous: TrainerStatus, new: TrainerStatus) -> bool:
    return previous.to_object() != new.to_object()
