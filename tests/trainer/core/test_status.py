"""Conditions, phase and observedGeneration computed from what was observed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions.trainer.core import dependencies as deps
from functions.trainer.core.api import Condition, Release, TrainerStatus
from functions.trainer.core.status import (
    Mode,
    StatusInputs,
    compute_status,
    deployments_condition,
    provisioned,
    provisioning_failed,
    removed,
    status_changed,
)

T0 = datetime(2026, 8, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)
RELEASES = (Release(name="Kubeflow Trainer", version="2.3.0"),)
OK = deps.degraded_condition(None)


def deployment(replicas: int, ready: int, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "d"}
    if deleting:
        meta["deletionTimestamp"] = "2026-08-01T12:00:00Z"
    return {"metadata": meta, "status": {"replicas": replicas, "readyReplicas": ready}}


READY_1 = [deployment(1, 1)]
NOT_READY = [deployment(1, 0)]


def inputs(previous: TrainerStatus | None = None, *, generation: int = 1,
           mode: Mode = Mode.MANAGED, deployments: list[dict[str, Any]] | None = None,
           provisioning: Condition | None = None, degraded: Condition | None = None,
           now: datetime = T0) -> StatusInputs:
    return StatusInputs(mode=mode, generation=generation, previous=previous or TrainerStatus(),
                        deployments=READY_1 if deployments is None else deployments,
                        releases=RELEASES, now=now, provisioning=provisioning,
                        degraded=degraded)


def summary(status: TrainerStatus) -> list[tuple[str, str, str]]:
    return [(c.type, c.status, c.reason) for c in status.conditions]


@pytest.mark.parametrize(("deployments", "status", "reason", "message"), [
    pytest.param([], "False", "DeploymentsNotReady", "0/0 deployments ready", id="none"),
    pytest.param(NOT_READY, "False", "DeploymentsNotReady", "0/1 deployments ready",
                 id="not-ready"),
    pytest.param([deployment(0, 0)], "False", "DeploymentsNotReady", "0/1 deployments ready",
                 id="scaled-to-zero"),
    pytest.param([deployment(2, 1), deployment(1, 1)], "False", "DeploymentsNotReady",
                 "1/2 deployments ready", id="partly"),
    pytest.param(READY_1, "True", "", "", id="ready"),
    pytest.param([deployment(1, 1), deployment(1, 1, deleting=True)], "True", "", "",
                 id="terminating-not-counted"),
])
def test_deployments_condition(deployments: list[dict[str, Any]], status: str, reason: str,
                               message: str) -> None:
    condition = deployments_condition(deployments, 4)
    assert (condition.status, condition.reason, condition.message,
            condition.observed_generation) == (status, reason, message, 4)


def test_healthy_status_matches_the_spec_shape() -> None:
    status = compute_status(inputs(provisioning=provisioned(1), degraded=OK))
    assert status.phase == "Ready"
    assert status.observed_generation == 1
    assert status.to_object()["conditions"] == [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-08-01T12:00:00Z"},
        {"type": "ProvisioningSucceeded", "status": "True", "observedGeneration": 1,
         "lastTransitionTime": "2026-08-01T12:00:00Z"},
        {"type": "DeploymentsAvailable", "status": "True", "observedGeneration": 0,
         "lastTransitionTime": "2026-08-01T12:00:00Z"},
        {"type": "Degraded", "status": "False", "reason": "DependenciesAvailable",
         "message": "All required dependencies are available",
         "lastTransitionTime": "2026-08-01T12:00:00Z"}]
    assert status.releases == RELEASES


@pytest.mark.parametrize(("case", "expected_summary", "phase", "observed_generation"), [
    pytest.param(inputs(TrainerStatus(observedGeneration=1), generation=2,
                        provisioning=provisioned(2), degraded=OK, deployments=NOT_READY),
                 [("Ready", "False", "DeploymentsNotReady"),
                  ("ProvisioningSucceeded", "True", ""),
                  ("DeploymentsAvailable", "False", "DeploymentsNotReady"),
                  ("Degraded", "False", "DependenciesAvailable")],
                 "Not Ready", 1, id="deployment-not-ready-keeps-observed-generation"),
    pytest.param(inputs(provisioning=provisioning_failed(1, "dependency not met: x"),
                        degraded=deps.degraded_condition(deps.crd_failure(False)),
                        deployments=[]),
                 [("Ready", "False", "Error"), ("ProvisioningSucceeded", "False", "Error"),
                  ("DeploymentsAvailable", "False", "DeploymentsNotReady"),
                  ("Degraded", "True", "JobSetCRDNotFound")],
                 "Not Ready", 0, id="jobset-crd-missing"),
    pytest.param(inputs(TrainerStatus(observedGeneration=1, conditions=(provisioned(1), OK)),
                        generation=2, mode=Mode.REMOVED),
                 [("Ready", "False", "Removed"), ("ProvisioningSucceeded", "False", "Removed"),
                  ("DeploymentsAvailable", "True", "")],
                 "Not Ready", 2, id="removed-overrides-outcome-of-older-generation"),
    pytest.param(inputs(TrainerStatus(conditions=(removed(3),)), generation=3,
                        mode=Mode.REMOVED, deployments=[]),
                 [("Ready", "False", "Removed"), ("ProvisioningSucceeded", "False", "Removed"),
                  ("DeploymentsAvailable", "False", "DeploymentsNotReady")],
                 "Not Ready", 3, id="removed-status-handler"),
    pytest.param(inputs(TrainerStatus(conditions=(provisioning_failed(2, "cleanup: boom"),)),
                        generation=2, mode=Mode.REMOVED, deployments=[]),
                 [("Ready", "False", "Error"), ("ProvisioningSucceeded", "False", "Error"),
                  ("DeploymentsAvailable", "False", "DeploymentsNotReady")],
                 "Not Ready", 2, id="removed-cleanup-failed"),
    pytest.param(inputs(deployments=READY_1),
                 [("Ready", "Unknown", ""), ("ProvisioningSucceeded", "Unknown", ""),
                  ("DeploymentsAvailable", "True", "")],
                 "Not Ready", 0, id="never-provisioned"),
    pytest.param(inputs(TrainerStatus(conditions=(
        Condition(type="Custom", status="True"), provisioned(1), OK)), deployments=READY_1),
                 [("Ready", "True", ""), ("ProvisioningSucceeded", "True", ""),
                  ("DeploymentsAvailable", "True", ""),
                  ("Degraded", "False", "DependenciesAvailable")],
                 "Ready", 1, id="status-handler-keeps-outcome-drops-unknown-types"),
])
def test_compute_status(case: StatusInputs, expected_summary: list[tuple[str, str, str]],
                        phase: str, observed_generation: int) -> None:
    status = compute_status(case)
    assert summary(status) == expected_summary
    assert (status.phase, status.observed_generation) == (phase, observed_generation)


def test_ready_copies_the_most_recently_changed_unhappy_dependent() -> None:
    failed_before = compute_status(inputs(provisioning=provisioning_failed(1, "boom"),
                                          degraded=OK, deployments=READY_1))
    later = compute_status(inputs(failed_before, deployments=NOT_READY, now=T1))
    ready = later.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == (
        "False", "DeploymentsNotReady", "0/1 deployments ready")


def test_steady_state_is_a_fixed_point() -> None:
    first = compute_status(inputs(provisioning=provisioned(1), degraded=OK))
    second = compute_status(inputs(first, now=T1))
    # DeploymentsAvailable now reports the observedGeneration the first pass advanced to.
    assert status_changed(first, second)
    third = compute_status(inputs(second, now=T1 + timedelta(minutes=1)))
    assert not status_changed(second, third)
    assert third == second


@pytest.mark.parametrize(("later", "keeps_time"), [
    pytest.param(provisioning_failed(1, "other message"), True, id="message-change-keeps"),
    pytest.param(provisioned(1), False, id="status-flip-moves"),
])
def test_last_transition_time(later: Condition, keeps_time: bool) -> None:
    first = compute_status(inputs(provisioning=provisioning_failed(1, "boom"), degraded=OK))
    second = compute_status(inputs(first, provisioning=later, now=T1))
    before = first.condition("ProvisioningSucceeded")
    after = second.condition("ProvisioningSucceeded")
    assert before is not None and after is not None
    assert (after.last_transition_time == before.last_transition_time) is keeps_time
    assert after.message == later.message
