"""JobSet dependency rules: what counts as installed and healthy, and the words for each miss.

Kubeflow Trainer v2 runs TrainJobs as JobSets but does not ship JobSet. On Kubernetes only the
JobSet CRD is required; on OpenShift the JobSet operator (installed through OLM), its
``JobSetOperator`` CR, the CR's health and the CRD are checked in that order. The first miss
becomes the ``Degraded`` condition and stops provisioning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from functions.trainer.core.api import DEGRADED, Condition

JOBSET_OPERATOR_PACKAGE = "jobset-operator"
JOBSET_GROUP_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_PLURAL = "jobsets"
JOBSET_CRD = f"{JOBSET_PLURAL}.{JOBSET_GROUP_VERSION.partition('/')[0]}"

OPERATOR_NOT_INSTALLED = "JobSetOperatorNotInstalled"
OPERATOR_CR_NOT_FOUND = "JobSetOperatorCRNotFound"
OPERATOR_DEGRADED = "JobSetOperatorDegraded"
CRD_NOT_FOUND = "JobSetCRDNotFound"
DETECTION_FAILED = "ClusterDetectionFailed"
AVAILABLE = "DependenciesAvailable"

MESSAGES = {
    OPERATOR_NOT_INSTALLED: "JobSet Operator is not installed. Please install the JobSet "
                            "Operator via OLM (OperatorHub) before deploying Trainer.",
    OPERATOR_CR_NOT_FOUND: "JobSetOperator CR with name 'cluster' not found. Please create the "
                           "JobSetOperator CR to enable the JobSet controller.",
    AVAILABLE: "All required dependencies are available",
}
CRD_MESSAGE_OPENSHIFT = (
    "JobSet CRD (jobsets.jobset.x-k8s.io version v1alpha2) is required but not found. This CRD "
    "should be created by the JobSet Operator. Please check the JobSet Operator status or logs "
    "for more details.")
CRD_MESSAGE_KUBERNETES = (
    "JobSet CRD (jobsets.jobset.x-k8s.io version v1alpha2) is required but not found. Please "
    "install JobSet CRD before deploying Trainer.")

# JobSetOperator condition types whose True status means trouble; Available=False is too.
_BAD_WHEN_TRUE = frozenset({"Degraded", "TargetConfigControllerDegraded",
                            "JobSetOperatorStaticResourcesDegraded"})


@dataclass(frozen=True, slots=True)
class DependencyFailure:
    reason: str
    message: str


def operator_installed(operator_condition_names: Iterable[str]) -> bool:
    """OLM names OperatorConditions ``<package>.<version>``."""
    prefix = JOBSET_OPERATOR_PACKAGE + "."
    return any(name.startswith(prefix) for name in operator_condition_names)


def operator_health(cr: Mapping[str, Any]) -> str | None:
    """Why the JobSetOperator CR is unhealthy, or ``None`` when it is healthy."""
    name = str((cr.get("metadata") or {}).get("name", ""))
    conditions = (cr.get("status") or {}).get("conditions") or []
    if not conditions:
        return (f"JobSetOperator CR {name} has no status conditions, operator may not have "
                "reconciled yet")
    problems: list[str] = []
    for condition in conditions:
        type_, status = condition.get("type"), condition.get("status")
        if not type_ or not status:
            problems.append("malformed condition (missing type or status)")
            continue
        if (type_ in _BAD_WHEN_TRUE and status == "True") or \
                (type_ == "Available" and status == "False"):
            text = f"{type_}={status}"
            if condition.get("reason"):
                text += f" ({condition['reason']})"
            if condition.get("message"):
                text += f": {condition['message']}"
            problems.append(text)
    return f"JobSetOperator {name}: " + "; ".join(problems) if problems else None


def operator_cr_failure(crs: Sequence[Mapping[str, Any]]) -> DependencyFailure | None:
    """The singleton check (exactly one CR) and then its health."""
    if len(crs) != 1:
        return DependencyFailure(OPERATOR_CR_NOT_FOUND, MESSAGES[OPERATOR_CR_NOT_FOUND])
    unhealthy = operator_health(crs[0])
    return DependencyFailure(OPERATOR_DEGRADED, unhealthy) if unhealthy else None


def crd_failure(openshift: bool) -> DependencyFailure:
    return DependencyFailure(CRD_NOT_FOUND,
                             CRD_MESSAGE_OPENSHIFT if openshift else CRD_MESSAGE_KUBERNETES)


def operator_missing() -> DependencyFailure:
    return DependencyFailure(OPERATOR_NOT_INSTALLED, MESSAGES[OPERATOR_NOT_INSTALLED])


def detection_failure(error: str) -> DependencyFailure:
    return DependencyFailure(DETECTION_FAILED, f"Failed to detect cluster type: {error}")


def degraded_condition(failure: DependencyFailure | None) -> Condition:
    if failure is None:
        return Condition(type=DEGRADED, status="False", reason=AVAILABLE,
                         message=MESSAGES[AVAILABLE])
    return Condition(type=DEGRADED, status="True", reason=failure.reason,
                     message=failure.message)


def provisioning_error(failure: DependencyFailure) -> str:
    """The error text provisioning fails with (and ``ProvisioningSucceeded`` carries)."""
    if failure.reason == DETECTION_FAILED:
        return "failed to detect cluster type: " + failure.message.partition(": ")[2]
    return f"dependency not met: {failure.message}"
