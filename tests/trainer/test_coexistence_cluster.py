"""With the platform's own trainer-operator running (a Deployment that looks like it), our
Trainer handlers refuse to act: the Trainer reports the conflict with what to change, and
nothing is applied, deleted or finalized. The simulated operator is a Deployment only (kwok
runs its pod); nothing reconciles on its behalf."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from functions.kube import resources
from functions.kube.client import KubeClient
from functions.trainer import controller, kinds
from tests.support import condition
from tests.trainer import harness
from tests.trainer.harness import Obj, recording_client

pytestmark = pytest.mark.cluster

OPERATOR = "trainer-operator-controller-manager"
DEPLOYMENT = "kubeflow-trainer-controller-manager"
PART_OF = {"platform.opendatahub.io/part-of": "trainer"}


def operator_deployment(namespace: str) -> Obj:
    """The platform's trainer-operator as its manifests label it; also carrying the label
    and stamp of what the Trainer deploys, as a platform-installed object might."""
    labels = {"app.kubernetes.io/name": "trainer-operator", "control-plane": "controller-manager"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": OPERATOR, "namespace": namespace,
                         "labels": {**labels, **PART_OF},
                         "annotations": {"platform.opendatahub.io/version": "0.0.1"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{
                                      "name": "manager",
                                      "image": "quay.io/opendatahub/odh-trainer-operator:x"}]}}}}


@pytest.fixture
def platform_operator(kube: KubeClient, namespace: str) -> Iterator[Callable[[], Obj]]:
    """Starts the simulated operator when called; always removes it (and waits)."""
    def start() -> Obj:
        return kube.create(operator_deployment(namespace), res=resources.DEPLOYMENTS)

    yield start
    kube.delete(resources.DEPLOYMENTS, OPERATOR, namespace, propagation="Foreground")
    harness.wait_until(lambda: kube.get(resources.DEPLOYMENTS, OPERATOR, namespace) is None,
                       60, "the simulated operator to go")


def events_of(kube: KubeClient, reason: str) -> list[Obj]:
    return [e for e in kube.list(resources.EVENTS, "default")
            if e.get("reason") == reason
            and (e.get("involvedObject") or {}).get("kind") == "Trainer"]


def conflict_reported(kube: KubeClient) -> Obj:
    trainer = harness.trainer(kube)
    provisioning = condition(trainer, "ProvisioningSucceeded")
    assert (provisioning["status"], provisioning["reason"]) == ("False", "ConflictingController")
    assert OPERATOR in provisioning["message"]
    assert "managementState: Removed" in provisioning["message"]
    assert condition(trainer, "Ready")["reason"] == "ConflictingController"
    return trainer or {}


def test_reconcile_refuses_and_changes_nothing(
        kube: KubeClient, managed: Callable[..., Obj], namespace: str,
        platform_operator: Callable[[], Obj]) -> None:
    managed()
    platform_operator()
    client, transport = recording_client(kube)
    harness.reconcile(client)
    writes = {path.split("?")[0] for _, path in transport.writes()}
    assert writes <= {"/apis/components.platform.opendatahub.io/v1alpha1/trainers/"
                      "default-trainer/status", "/api/v1/namespaces/default/events"}, writes
    trainer = conflict_reported(kube)
    assert trainer["metadata"].get("finalizers") in (None, [])
    assert kube.get(resources.DEPLOYMENTS, DEPLOYMENT, namespace) is None
    assert kube.get(kinds.CLUSTERROLES, "training-view") is None
    assert events_of(kube, "ConflictingController")

    transport.seen.clear()
    harness.status(client)  # leaves the conflict as reported
    assert transport.writes() == []


def test_gc_deletes_nothing_another_controller_may_own(
        kube: KubeClient, managed: Callable[..., Obj], namespace: str,
        platform_operator: Callable[[], Obj]) -> None:
    managed()
    harness.reconcile(kube)  # installed while alone
    assert kube.get(resources.DEPLOYMENTS, DEPLOYMENT, namespace) is not None
    platform_operator()

    kube.patch(resources.TRAINERS, "default-trainer", {"spec": {"managementState": "Removed"}})
    harness.gc(kube)
    conflict_reported(kube)
    assert kube.get(resources.DEPLOYMENTS, DEPLOYMENT, namespace) is not None
    assert kube.get(kinds.CLUSTERROLES, "training-view") is not None

    kube.delete(resources.TRAINERS, "default-trainer")
    harness.gc(kube)  # drops our finalizer without a cleanup
    harness.wait_until(lambda: harness.trainer(kube) is None, 30, "the Trainer to go")
    assert kube.get(resources.DEPLOYMENTS, DEPLOYMENT, namespace) is not None
    assert kube.get(kinds.CLUSTERROLES, "training-view") is not None
    assert any("nothing was deleted" in e.get("message", "")
               for e in events_of(kube, "ConflictingController"))

    # An explicit cleanup takes what is ours and still never the other controller's.
    controller.cleanup(harness.context(kube, "gc"), namespace)
    assert kube.get(resources.DEPLOYMENTS, OPERATOR, namespace) is not None
    harness.wait_until(lambda: kube.get(resources.DEPLOYMENTS, DEPLOYMENT, namespace) is None,
                       60, "our Deployment to go")
