"""JobSet dependency rules and their wording."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from functions.trainer.core import dependencies as deps

DATA = Path(__file__).resolve().parents[1] / "data"
HEALTHY = yaml.safe_load((DATA / "jobsetoperator-healthy.yaml").read_text())


def with_conditions(conditions: list[dict[str, Any]] | None) -> dict[str, Any]:
    cr: dict[str, Any] = copy.deepcopy(HEALTHY)
    if conditions is None:
        del cr["status"]
    else:
        cr["status"]["conditions"] = conditions
    return cr


@pytest.mark.parametrize(("names", "expected"), [
    pytest.param([], False, id="none"),
    pytest.param(["jobset-operator.v1.0.0"], True, id="installed"),
    pytest.param(["other.v1", "jobset-operator.v0.1.2"], True, id="among-others"),
    pytest.param(["jobset-operator"], False, id="no-version-suffix"),
    pytest.param(["my-jobset-operator.v1"], False, id="prefix-only"),
])
def test_operator_installed(names: list[str], expected: bool) -> None:
    assert deps.operator_installed(names) is expected


@pytest.mark.parametrize(("cr", "expected"), [
    pytest.param(HEALTHY, None, id="healthy"),
    pytest.param(with_conditions(None), "JobSetOperator CR cluster has no status conditions, "
                 "operator may not have reconciled yet", id="no-status"),
    pytest.param(with_conditions([]), "JobSetOperator CR cluster has no status conditions, "
                 "operator may not have reconciled yet", id="empty-conditions"),
    pytest.param(with_conditions([{"type": "Degraded", "status": "True", "reason": "Crash",
                                   "message": "pods crash"}]),
                 "JobSetOperator cluster: Degraded=True (Crash): pods crash", id="degraded"),
    pytest.param(with_conditions([{"type": "Available", "status": "False"},
                                  {"type": "TargetConfigControllerDegraded", "status": "True",
                                   "reason": "SyncError"}]),
                 "JobSetOperator cluster: Available=False; "
                 "TargetConfigControllerDegraded=True (SyncError)", id="several"),
    pytest.param(with_conditions([{"type": "Progressing", "status": "True"},
                                  {"type": "Available", "status": "True"}]), None,
                 id="other-types-ignored"),
    pytest.param(with_conditions([{"type": "Available"}]),
                 "JobSetOperator cluster: malformed condition (missing type or status)",
                 id="malformed"),
])
def test_operator_health(cr: dict[str, Any], expected: str | None) -> None:
    assert deps.operator_health(cr) == expected


@pytest.mark.parametrize(("crs", "reason"), [
    pytest.param([], deps.OPERATOR_CR_NOT_FOUND, id="missing"),
    pytest.param([HEALTHY, HEALTHY], deps.OPERATOR_CR_NOT_FOUND, id="two"),
    pytest.param([with_conditions([])], deps.OPERATOR_DEGRADED, id="unhealthy"),
    pytest.param([HEALTHY], None, id="healthy"),
])
def test_operator_cr_failure(crs: list[dict[str, Any]], reason: str | None) -> None:
    failure = deps.operator_cr_failure(crs)
    assert (failure.reason if failure else None) == reason


@pytest.mark.parametrize(("failure", "status", "reason", "message"), [
    pytest.param(None, "False", "DependenciesAvailable", "All required dependencies are available",
                 id="ok"),
    pytest.param(deps.crd_failure(openshift=False), "True", "JobSetCRDNotFound",
                 "JobSet CRD (jobsets.jobset.x-k8s.io version v1alpha2) is required but not "
                 "found. Please install JobSet CRD before deploying Trainer.", id="crd-kubernetes"),
    pytest.param(deps.crd_failure(openshift=True), "True", "JobSetCRDNotFound",
                 "JobSet CRD (jobsets.jobset.x-k8s.io version v1alpha2) is required but not "
                 "found. This CRD should be created by the JobSet Operator. Please check the "
                 "JobSet Operator status or logs for more details.", id="crd-openshift"),
    pytest.param(deps.operator_missing(), "True", "JobSetOperatorNotInstalled",
                 "JobSet Operator is not installed. Please install the JobSet Operator via OLM "
                 "(OperatorHub) before deploying Trainer.", id="operator-missing"),
    pytest.param(deps.detection_failure("boom"), "True", "ClusterDetectionFailed",
                 "Failed to detect cluster type: boom", id="detection"),
])
def test_degraded_condition(failure: deps.DependencyFailure | None, status: str, reason: str,
                            message: str) -> None:
    condition = deps.degraded_condition(failure)
    assert (condition.type, condition.status, condition.reason, condition.message) == (
        "Degraded", status, reason, message)


@pytest.mark.parametrize(("failure", "expected"), [
    pytest.param(deps.operator_missing(), "dependency not met: JobSet Operator is not installed. "
                 "Please install the JobSet Operator via OLM (OperatorHub) before deploying "
                 "Trainer.", id="dependency"),
    pytest.param(deps.detection_failure("403 Forbidden"),
                 "failed to detect cluster type: 403 Forbidden", id="detection"),
])
def test_provisioning_error(failure: deps.DependencyFailure, expected: str) -> None:
    assert deps.provisioning_error(failure) == expected
