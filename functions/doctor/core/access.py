"""What each identity of the install does, and representative things it must not do.

One table serves two readers: ``doctor`` asks the cluster (SubjectAccessReview as each
ServiceAccount) whether the installed RBAC allows what the functions call, and the deploy
tests apply the rendered RBAC to a local API server and ask the same questions, so the table,
the RBAC and the handlers cannot drift apart unnoticed.

A scope names where a request goes: ``cluster`` (cluster-scoped, or all namespaces), ``install``
(the namespace of the install, which is also the Trainer's ``appNamespace``) or ``user`` (any
other namespace: where training jobs live).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from functions.doctor.core.model import AccessReview, Finding, Status

Scope = Literal["cluster", "install", "user"]
USER_NAMESPACE = "odh-doctor-probe"

TRAINERS = "components.platform.opendatahub.io"
KUBEFLOW = "kubeflow.org"
RBAC = "rbac.authorization.k8s.io"
ADMISSION = "admissionregistration.k8s.io"
CRDS = "apiextensions.k8s.io"
DSC = "datasciencecluster.opendatahub.io"
LEASES = "coordination.k8s.io"
TRAINER_API = "trainer.kubeflow.org"
AUTHN = "authentication.k8s.io"
AUTHZ = "authorization.k8s.io"
EVENTING = "eventing.knative.dev"
SOURCES = "sources.knative.dev"


@dataclass(frozen=True)
class Expectation:
    """``identity`` may (``allowed``) or may not ``verb`` the resource in ``scope``."""

    identity: str
    verb: str
    group: str
    resource: str
    scope: Scope
    name: str = ""
    subresource: str = ""
    allowed: bool = True

    def namespace(self, install: str) -> str:
        return {"cluster": "", "install": install, "user": USER_NAMESPACE}[self.scope]

    def case_id(self) -> str:
        target = self.resource + (f"/{self.subresource}" if self.subresource else "")
        named = f"-{self.name}" if self.name else ""
        kind = "may" if self.allowed else "not"
        return f"{self.identity}-{kind}-{self.verb}-{self.group or 'core'}-{target}{named}" \
               f"-{self.scope}"


def _may(identity: str, verb: str, group: str, resource: str, scope: Scope, name: str = "",
         subresource: str = "") -> Expectation:
    return Expectation(identity, verb, group, resource, scope, name, subresource, True)


def _not(identity: str, verb: str, group: str, resource: str, scope: Scope, name: str = "",
         subresource: str = "") -> Expectation:
    return Expectation(identity, verb, group, resource, scope, name, subresource, False)




def _delivery_check(identity: str) -> list[Expectation]:
    """What the check of who delivers needs (functions/runtime/delivery_auth.py: a
    TokenReview of each new token, its namespace's Triggers), and nothing beyond: no other
    namespace's Triggers, no writing them, no other review, no tokens of its own making."""
    return [
        _may(identity, "create", AUTHN, "tokenreviews", "cluster"),
        _may(identity, "list", EVENTING, "triggers", "install"),
        _may(identity, "watch", EVENTING, "triggers", "install"),
        _may(identity, "get", EVENTING, "triggers", "install", "odh-training-reconcile"),
        _not(identity, "list", EVENTING, "triggers", "user"),
        _not(identity, "create", EVENTING, "triggers", "install"),
        _not(identity, "patch", EVENTING, "triggers", "install", "odh-training-reconcile"),
        _not(identity, "create", AUTHZ, "subjectaccessreviews", "cluster"),
        _not(identity, "create", "", "serviceaccounts", "install",
             "odh-training-reconcile-oidc-eventing.knative.dev-trigger", "token"),
    ]


def service_account(identity: str) -> str:
    return f"odh-training-{identity}"


def _lifecycle(identity: str) -> list[Expectation]:
    """What sending the training lifecycle needs (functions/jobs/lifecycle.py): a job's
    namespace and its Broker, read by name, and tokens of the function's own ServiceAccount
    (a Broker's OIDC audience); nothing of other Brokers or other accounts."""
    return [
        _may(identity, "get", "", "namespaces", "cluster", "team-a"),  # (gc's TrainJobs too)
        _may(identity, "get", EVENTING, "brokers", "user", "default"),
        _may(identity, "create", "", "serviceaccounts", "install", service_account(identity),
             "token"),
        _not(identity, "create", "", "serviceaccounts", "install", "odh-training-reconcile",
             "token"),
        _not(identity, "create", "", "serviceaccounts", "user", "default", "token"),
        _not(identity, "list", EVENTING, "brokers", "cluster"),
        _not(identity, "patch", EVENTING, "brokers", "user", "default"),
        _not(identity, "create", EVENTING, "brokers", "user"),
    ]


def _wakes(identity: str) -> list[Expectation]:
    """What wakes need (functions/runtime/wakes.py): PingSources of the install's namespace,
    listed, made and deleted; none elsewhere, and no other source."""
    return [
        _may(identity, "create", SOURCES, "pingsources", "install"),
        _may(identity, "list", SOURCES, "pingsources", "install"),
        _may(identity, "delete", SOURCES, "pingsources", "install", "odh-training-wake-x"),
        _not(identity, "create", SOURCES, "pingsources", "user"),
        _not(identity, "patch", SOURCES, "pingsources", "install", "odh-training-resync"),
        _not(identity, "create", SOURCES, "apiserversources", "install"),
        _not(identity, "delete", SOURCES, "apiserversources", "install",
             "odh-training-objects"),
    ]


RECONCILE = [
    _may("reconcile", "patch", TRAINERS, "trainers", "cluster", "default-trainer"),
    _may("reconcile", "patch", TRAINERS, "trainers", "cluster", "default-trainer", "status"),
    _may("reconcile", "get", "config.openshift.io", "clusterversions", "cluster", "version"),
    _may("reconcile", "list", CRDS, "customresourcedefinitions", "cluster"),
    _may("reconcile", "patch", CRDS, "customresourcedefinitions", "cluster",
         "trainjobs.trainer.kubeflow.org"),
    _may("reconcile", "patch", RBAC, "clusterroles", "cluster",
         "kubeflow-trainer-controller-manager"),
    _may("reconcile", "patch", RBAC, "clusterrolebindings", "cluster",
         "kubeflow-trainer-controller-manager"),
    _may("reconcile", "patch", ADMISSION, "validatingwebhookconfigurations", "cluster",
         "validator.trainer.kubeflow.org"),
    _may("reconcile", "patch", "apps", "deployments", "install",
         "kubeflow-trainer-controller-manager"),
    _may("reconcile", "list", "apps", "deployments", "cluster"),
    _may("reconcile", "list", DSC, "datascienceclusters", "cluster"),
    _may("reconcile", "get", CRDS, "customresourcedefinitions", "cluster",
         "mpijobs.kubeflow.org"),
    _may("reconcile", "create", "", "pods", "user"),
    _may("reconcile", "watch", "", "services", "user"),
    _may("reconcile", "update", KUBEFLOW, "pytorchjobs", "user", "mnist", "finalizers"),
    _may("reconcile", "patch", KUBEFLOW, "pytorchjobs", "user", "mnist"),
    _may("reconcile", "watch", KUBEFLOW, "mpijobs", "cluster"),
    _may("reconcile", "create", "", "secrets", "user"),
    _may("reconcile", "patch", "batch", "jobs", "user", "mnist-launcher"),
    # MPIJob v1: the launcher's identity, its Role and RoleBinding, and what that Role grants
    _may("reconcile", "create", "", "serviceaccounts", "user"),
    _may("reconcile", "patch", RBAC, "roles", "user", "pi-launcher"),
    _may("reconcile", "create", RBAC, "rolebindings", "user"),
    _may("reconcile", "get", "", "pods", "user", "pi-worker-0"),
    _may("reconcile", "create", "", "pods", "user", "pi-worker-0", "exec"),
    _may("reconcile", "create", "", "events", "user"),
    _may("reconcile", "get", "", "configmaps", "install", "odh-training-queue-policy"),
    _may("reconcile", "patch", LEASES, "leases", "install", "odh-training-queue"),
    # the queue admits TrainJobs submitted through the training API by clearing spec.suspend
    _may("reconcile", "list", TRAINER_API, "trainjobs", "user"),
    _may("reconcile", "patch", TRAINER_API, "trainjobs", "user", "llm"),
    # a PodGroup's minResources orders replica types by their PriorityClass
    _may("reconcile", "list", "scheduling.k8s.io", "priorityclasses", "cluster"),
    _not("reconcile", "create", "scheduling.k8s.io", "priorityclasses", "cluster"),
    _not("reconcile", "delete", KUBEFLOW, "pytorchjobs", "user", "mnist"),
    _not("reconcile", "patch", KUBEFLOW, "pytorchjobs", "user", "mnist", "status"),
    _not("reconcile", "delete", "", "namespaces", "cluster", "kube-system"),
    _not("reconcile", "escalate", RBAC, "clusterroles", "cluster", "x"),
    _not("reconcile", "bind", RBAC, "clusterroles", "cluster", "cluster-admin"),
    _not("reconcile", "patch", RBAC, "clusterroles", "cluster", "cluster-admin"),
    _not("reconcile", "delete", CRDS, "customresourcedefinitions", "cluster",
         "trainjobs.trainer.kubeflow.org"),
    _not("reconcile", "patch", CRDS, "customresourcedefinitions", "cluster",
         "pytorchjobs.kubeflow.org"),
    _not("reconcile", "patch", ADMISSION, "validatingwebhookconfigurations", "cluster",
         "some-other-webhook"),
    _not("reconcile", "delete", "apps", "deployments", "user", "web"),
    _not("reconcile", "delete", "", "secrets", "user", "credentials"),
    _not("reconcile", "delete", "", "serviceaccounts", "user", "default"),
    _not("reconcile", "delete", RBAC, "roles", "user", "pi-launcher"),
    _not("reconcile", "delete", RBAC, "rolebindings", "user", "pi-launcher"),
    _not("reconcile", "escalate", RBAC, "roles", "user", "pi-launcher"),
    _not("reconcile", "bind", RBAC, "roles", "user", "admin"),
    _not("reconcile", "patch", "", "serviceaccounts", "user", "default"),
    *_delivery_check("reconcile"),
    *_wakes("reconcile"),
]
GC = [
    _may("gc", "delete", RBAC, "clusterroles", "cluster", "training-view"),
    _may("gc", "delete", KUBEFLOW, "tfjobs", "user", "mnist"),
    _may("gc", "delete", "", "pods", "user", "mnist-worker-0"),
    _may("gc", "delete", "", "services", "user", "mnist-worker-0"),
    _may("gc", "patch", TRAINERS, "trainers", "cluster", "default-trainer"),
    _may("gc", "patch", "trainer.kubeflow.org", "clustertrainingruntimes", "cluster",
         "torch-distributed"),
    _may("gc", "delete", "apps", "deployments", "install", "kubeflow-trainer-controller-manager"),
    _may("gc", "delete", "", "secrets", "install", "kubeflow-trainer-webhook-cert"),
    _may("gc", "list", DSC, "datascienceclusters", "cluster"),
    _may("gc", "get", CRDS, "customresourcedefinitions", "cluster",
         "trainers.components.platform.opendatahub.io"),
    _may("gc", "list", "apps", "deployments", "cluster"),
    _may("gc", "get", CRDS, "customresourcedefinitions", "cluster", "pytorchjobs.kubeflow.org"),
    _may("gc", "get", CRDS, "customresourcedefinitions", "cluster", "mpijobs.kubeflow.org"),
    _not("gc", "get", CRDS, "customresourcedefinitions", "cluster", "widgets.example.com"),
    _not("gc", "create", "", "pods", "user"),
    _not("gc", "create", "", "pods", "user", "pi-worker-0", "exec"),
    _not("gc", "create", RBAC, "roles", "user"),
    _not("gc", "create", RBAC, "clusterroles", "cluster"),
    _not("gc", "delete", RBAC, "clusterroles", "cluster", "cluster-admin"),
    _not("gc", "patch", KUBEFLOW, "pytorchjobs", "user", "mnist", "status"),
    _not("gc", "create", "", "secrets", "user"),
    _not("gc", "delete", "", "secrets", "user", "credentials"),
    _not("gc", "delete", "", "configmaps", "user", "settings"),
    _not("gc", "delete", "", "serviceaccounts", "user", "default"),
    _not("gc", "delete", "apps", "deployments", "user", "web"),
    _not("gc", "delete", CRDS, "customresourcedefinitions", "cluster",
         "trainjobs.trainer.kubeflow.org"),
    # TrainJob hygiene: finished TrainJobs past their TTL or history limit
    _may("gc", "delete", TRAINER_API, "trainjobs", "user", "llm"),
    _may("gc", "list", TRAINER_API, "trainjobs", "user"),
    _may("gc", "patch", TRAINER_API, "trainjobs", "user", "llm"),
    _not("gc", "create", TRAINER_API, "trainjobs", "user"),
    _not("gc", "patch", "", "namespaces", "cluster", "team-a"),
    *_delivery_check("gc"),
    *_lifecycle("gc"),
    *_wakes("gc"),
]
STATUS = [
    _may("status", "patch", KUBEFLOW, "mpijobs", "user", "mnist", "status"),
    _may("status", "patch", TRAINERS, "trainers", "cluster", "default-trainer", "status"),
    _may("status", "get", "", "configmaps", "install", "odh-trainer-config"),
    _may("status", "list", "", "pods", "user"),
    _may("status", "list", "apps", "deployments", "install"),
    _may("status", "list", "apps", "deployments", "cluster"),
    _may("status", "list", DSC, "datascienceclusters", "cluster"),
    _may("status", "get", CRDS, "customresourcedefinitions", "cluster", "tfjobs.kubeflow.org"),
    _may("status", "get", CRDS, "customresourcedefinitions", "cluster", "mxjobs.kubeflow.org"),
    _not("status", "create", "", "pods", "user"),
    _not("status", "create", "", "pods", "user", "pi-worker-0", "exec"),
    _not("status", "delete", "", "pods", "user", "mnist-worker-0"),
    # the Trainer's lifecycle outbox: one annotation (functions/trainer/controller.py)
    _may("status", "patch", TRAINERS, "trainers", "cluster", "default-trainer"),
    _not("status", "delete", TRAINERS, "trainers", "cluster", "default-trainer"),
    # the lifecycle outbox: one annotation of the job (functions/jobs/lifecycle.py)
    _may("status", "patch", KUBEFLOW, "pytorchjobs", "user", "mnist"),
    _not("status", "delete", KUBEFLOW, "pytorchjobs", "user", "mnist"),
    _not("status", "get", "", "configmaps", "install", "kube-root-ca.crt"),
    _not("status", "get", "", "secrets", "user", "credentials"),
    _not("status", "watch", "apps", "deployments", "cluster"),
    _not("status", "get", "apps", "deployments", "user", "web"),
    _not("status", "get", CRDS, "customresourcedefinitions", "cluster",
         "trainers.components.platform.opendatahub.io"),
    _not("status", "list", CRDS, "customresourcedefinitions", "cluster"),
    _not("status", "patch", TRAINER_API, "trainjobs", "user", "llm"),
    # the gauges' Lease (functions/jobs/gauges.py), not the queue's
    _may("status", "patch", LEASES, "leases", "install", "odh-training-metrics"),
    _may("status", "list", TRAINER_API, "trainjobs", "cluster"),
    _not("status", "patch", LEASES, "leases", "install", "odh-training-queue"),
    *_delivery_check("status"),
    *_lifecycle("status"),
    *_wakes("status"),
]
EVENTS = [
    _may("events", "watch", TRAINERS, "trainers", "cluster"),
    _may("events", "watch", KUBEFLOW, "pytorchjobs", "cluster"),
    _may("events", "watch", "", "pods", "cluster"),
    _may("events", "watch", "", "configmaps", "install"),
    _may("events", "watch", "apps", "deployments", "install"),
    _not("events", "patch", KUBEFLOW, "pytorchjobs", "user", "mnist"),
    _not("events", "get", "", "secrets", "user", "credentials"),
    _not("events", "watch", "", "configmaps", "user"),
    _not("events", "watch", "apps", "deployments", "user"),
]
# The dead-letter sink: the delivery check and nothing else.
DEAD_LETTERS = [
    *_delivery_check("dead-letters"),
    _not("dead-letters", "get", "", "secrets", "install", "odh-training-queue-policy"),
    _not("dead-letters", "list", "", "pods", "user"),
    _not("dead-letters", "get", "", "configmaps", "install", "odh-trainer-config"),
    _not("dead-letters", "list", KUBEFLOW, "pytorchjobs", "cluster"),
]
EXPECTATIONS: tuple[Expectation, ...] = (*RECONCILE, *GC, *STATUS, *EVENTS, *DEAD_LETTERS)
# The all-in-one Service of `func deploy` (config/func) does what the three functions do.
FUNC_IDENTITY = "functions"
FUNCTION_IDENTITIES = ("reconcile", "gc", "status")


def expectations_for(identity: str) -> list[Expectation]:
    """``functions`` holds what reconcile, gc and status may do (nothing forbidden is checked:
    one function's need is another's excess)."""
    if identity == FUNC_IDENTITY:
        own = service_account(FUNC_IDENTITY)
        return list(dict.fromkeys(
            replace(e, name=own) if e.subresource == "token" and e.name == service_account(
                e.identity) else e
            for e in EXPECTATIONS if e.identity in FUNCTION_IDENTITIES and e.allowed))
    return [e for e in EXPECTATIONS if e.identity == identity]


def permissions(identity: str, reviews: Iterable[AccessReview]) -> Finding:
    """The SubjectAccessReview answers of one identity against its expectations."""
    check = f"permissions-{identity}"
    answers = [r for r in reviews if r.function == identity]
    if not answers:
        return Finding(check=check, status=Status.SKIP,
                       summary=f"ServiceAccount {service_account(identity)} not installed")
    missing = [r.describe() for r in answers if r.expected and not r.allowed]
    excess = [r.describe() for r in answers if not r.expected and r.allowed]
    if missing:
        return Finding(check=check, status=Status.FAIL,
                       summary=f"{service_account(identity)} may not do what its function "
                               f"does ({len(missing)} denied)",
                       fix="apply the install's RBAC again (config/rbac), in this namespace",
                       details=tuple(missing + [f"allowed but not needed: {e}" for e in excess]))
    if excess:
        return Finding(check=check, status=Status.WARN,
                       summary=f"{service_account(identity)} holds more than it needs",
                       fix="remove the extra bindings of this ServiceAccount",
                       details=tuple(f"allowed but not needed: {e}" for e in excess))
    return Finding(check=check, status=Status.PASS,
                   summary=f"{service_account(identity)}: {len(answers)} requests judged as "
                           "expected")
