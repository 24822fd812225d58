"""A healthy cluster as the doctor would read it, and ways to break one part of it."""

from __future__ import annotations

from typing import Any

from functions.doctor.core import access, knative
from functions.doctor.core.model import AccessReview, Component, Snapshot, Workload

Obj = dict[str, Any]
NAMESPACE = "opendatahub"
SERVED = frozenset({
    "serving.knative.dev/v1/services", "eventing.knative.dev/v1/brokers",
    "eventing.knative.dev/v1/triggers", "sources.knative.dev/v1/apiserversources",
    "sources.knative.dev/v1/pingsources", "jobset.x-k8s.io/v1alpha2/jobsets",
    "kubeflow.org/v1/pytorchjobs", "kubeflow.org/v2beta1/mpijobs", "v1/pods",
    "components.platform.opendatahub.io/v1alpha1/trainers",
})
SERVERLESS = {"knative.openshift.io/part-of": "openshift-serverless"}


def workload(namespace: str, name: str, version: str = "1.16.1", ready: bool = True) -> Workload:
    return Workload(namespace=namespace, name=name,
                    labels={"app.kubernetes.io/version": version}, ready=ready)


def ready(kind: str, name: str, status: str = "True", **extra: Any) -> Obj:
    return {"kind": kind, "metadata": {"name": name, "namespace": NAMESPACE, **extra},
            "status": {"conditions": [{"type": "Ready", "status": status,
                                       "message": "waiting" if status != "True" else ""}]}}


def allow_knative() -> Obj:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "odh-training-allow-knative", "namespace": NAMESPACE},
            "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "odh-training"}},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"namespaceSelector": {"matchLabels": SERVERLESS}}]}]}}


def deny_all() -> Obj:
    return {"metadata": {"name": "platform", "namespace": NAMESPACE},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [
                {"from": [{"namespaceSelector": {"matchLabels": {
                    "opendatahub.io/generated-namespace": "true"}}}]}]}}


def trigger(function: str = "reconcile", audience: str | None = None,
            account: str | None = "oidc-sa") -> Obj:
    """One of our Triggers as Knative makes it Ready with authentication-oidc on."""
    name = f"odh-training-{function}"
    found = ready("Trigger", name, labels={"functions.opendatahub.io/function": function})
    found["spec"] = {"broker": "odh-training", "subscriber": {
        "ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": name},
        "audience": audience or f"serving.knative.dev/service/{NAMESPACE}/{name}"}}
    if account:
        found["status"]["auth"] = {"serviceAccountName": account}
    return found


def reviews() -> tuple[AccessReview, ...]:
    identities = ("reconcile", "gc", "status", "events", "dead-letters", access.FUNC_IDENTITY)
    return tuple(AccessReview(function=i, verb=e.verb, group=e.group, resource=e.resource,
                              subresource=e.subresource, name=e.name,
                              namespace=e.namespace(NAMESPACE), expected=e.allowed,
                              allowed=e.allowed)
                 for i in identities for e in access.expectations_for(i))


def healthy() -> Snapshot:
    return Snapshot(
        namespace=NAMESPACE,
        served=SERVED,
        serving=Component(deployments=(workload("knative-serving", "controller"),
                                       workload("knative-serving", "activator")),
                          features={}),
        eventing=Component(deployments=tuple(
            workload("knative-eventing", name) for name in (
                "eventing-controller", *knative.KAFKA_BROKER_DEPLOYMENTS)),
            features={"delivery-timeout": "enabled", "authentication-oidc": "enabled"}),
        broker_defaults={},
        configmaps=frozenset({"knative-eventing/kafka-broker-config"}),
        namespaces=dict.fromkeys(("knative-serving", "knative-serving-ingress",
                                  "knative-eventing"), SERVERLESS),
        network_policies=(deny_all(), allow_knative()),
        service_accounts=frozenset(access.service_account(i) for i in (
            "reconcile", "gc", "status", "events", "dead-letters", "functions")),
        access=reviews(),
        installed={
            "Broker": ({**ready("Broker", "odh-training", annotations={
                "eventing.knative.dev/broker.class": "Kafka"}),
                "spec": {"config": {"name": "kafka-broker-config",
                                    "namespace": "knative-eventing"}}},),
            "Trigger": (trigger(),),
            "ApiServerSource": ({**ready("ApiServerSource", "odh-training-objects"),
                                 "spec": {"resources": [
                                     {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"},
                                     {"apiVersion": "v1", "kind": "Pod"}]}},),
            "PingSource": (ready("PingSource", "odh-training-resync"),),
            "Service": ({**ready("Service", "odh-training-reconcile"),
                         "spec": {"template": {"metadata": {"labels": {
                             "app.kubernetes.io/part-of": "odh-training"}}}}},),
            "Trainer": (ready("Trainer", "default-trainer"),),
        },
    )


def with_(snapshot: Snapshot, **changes: Any) -> Snapshot:
    return snapshot.model_copy(update=changes)
