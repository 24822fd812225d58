"""Trainer handlers on a real cluster: OpenShift extras, recovery paths, the platform handshake.

OpenShift is simulated by installing its APIs as CRDs (ClusterVersion, ImageStream, OLM
OperatorCondition, JobSetOperator) and creating the ClusterVersion ``version``; the test
removes those objects again so later tests see a plain cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devstack.cluster.manifests import apply_objects
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.trainer import kinds
from functions.trainer.core.api import FINALIZER
from tests.support import condition
from tests.trainer import harness
from tests.trainer.harness import Obj, load

pytestmark = pytest.mark.cluster

DEPLOYMENT = "kubeflow-trainer-controller-manager"
LABEL = "platform.opendatahub.io/part-of"
OPERATOR_NAMESPACE = "openshift-jobset-operator"
TRAINER_CRDS = ["clustertrainingruntimes.trainer.kubeflow.org",
                "trainingruntimes.trainer.kubeflow.org", "trainjobs.trainer.kubeflow.org"]


@pytest.fixture
def openshift(kube: KubeClient, trainer_prerequisites: None) -> Iterator[None]:
    apply_objects(kube, load("openshift-crds.yaml"))
    kube.apply(load("clusterversion.yaml")[0], "tests")
    try:
        yield
    finally:
        clusterversions = resources.CLUSTERVERSIONS
        kube.delete(clusterversions, "version")
        kube.delete(kinds.JOBSET_OPERATORS, "cluster")
        kube.delete(kinds.OPERATOR_CONDITIONS, "jobset-operator.v1.0.0", OPERATOR_NAMESPACE)


def degraded_reason(kube: KubeClient) -> str:
    harness.reconcile(kube)
    found = condition(harness.trainer(kube), "Degraded")
    return str(found.get("reason", ""))


def jobset_operator(conditions: list[dict[str, Any]]) -> Obj:
    cr: Obj = load("jobsetoperator-healthy.yaml")[0]
    cr["status"]["conditions"] = conditions
    return cr


def test_openshift_dependencies_and_imagestreams(
        kube: KubeClient, openshift: None, managed: Callable[..., Obj], namespace: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELATED_IMAGE_ODH_TH_TORCH_CPU_PY312_IMAGE", "registry.test/cpu:7")
    managed()
    assert degraded_reason(kube) == "JobSetOperatorNotInstalled"

    if kube.get(resources.NAMESPACES, OPERATOR_NAMESPACE) is None:
        kube.create({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": OPERATOR_NAMESPACE}}, res=resources.NAMESPACES)
    kube.apply(load("operatorcondition-jobset.yaml")[0], "tests")
    assert degraded_reason(kube) == "JobSetOperatorCRNotFound"

    kube.apply(jobset_operator([{"type": "Available", "status": "False",
                                 "reason": "Deploying"}]), "tests")
    assert degraded_reason(kube) == "JobSetOperatorDegraded"
    message = condition(harness.trainer(kube), "Degraded")["message"]
    assert message == "JobSetOperator cluster: Available=False (Deploying)"
    assert kube.get(resources.DEPLOYMENTS, DEPLOYMENT, namespace) is None

    kube.apply(load("jobsetoperator-healthy.yaml")[0], "tests")
    assert degraded_reason(kube) == "DependenciesAvailable"
    assert condition(harness.trainer(kube), "ProvisioningSucceeded")["status"] == "True"
    streams = {o["metadata"]["name"]: o for o in kube.list(kinds.IMAGESTREAMS, namespace)}
    assert sorted(streams) == ["training-hub-universal-cpu", "training-hub-universal-cuda",
                               "training-hub-universal-rocm"]
    cpu = streams["training-hub-universal-cpu"]
    assert cpu["metadata"]["labels"][LABEL] == "trainer"
    assert cpu["metadata"]["annotations"]["platform.opendatahub.io/instance.name"] == \
        "default-trainer"
    assert [t["from"]["name"] for t in cpu["spec"]["tags"]] == [
        "quay.io/opendatahub/odh-th06-cpu-torch210-py312:odh-3.4", "registry.test/cpu:7"]


def test_deletion_does_not_hang_without_trainer_crds(kube: KubeClient,
                                                    trainer_prerequisites: None,
                                                    namespace: str) -> None:
    for name in TRAINER_CRDS:
        kube.delete(resources.CRDS, name)
    harness.wait_until(lambda: all(kube.get(resources.CRDS, n) is None for n in TRAINER_CRDS),
                       60, "the trainer CRDs to go away")
    kube.create({"apiVersion": "components.platform.opendatahub.io/v1alpha1", "kind": "Trainer",
                 "metadata": {"name": "default-trainer", "finalizers": [FINALIZER]},
                 "spec": {"appNamespace": namespace}}, res=resources.TRAINERS)
    kube.delete(resources.TRAINERS, "default-trainer")
    harness.gc(kube)
    assert harness.trainer(kube) is None


def test_immutable_selector_is_recovered(kube: KubeClient, managed: Callable[..., Obj],
                                         namespace: str) -> None:
    old_labels = {"app": "legacy-trainer"}
    old = kube.create({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": namespace},
        "spec": {"selector": {"matchLabels": old_labels},
                 "template": {"metadata": {"labels": old_labels},
                              "spec": {"containers": [{"name": "manager", "image": "old:1"}]}}}},
        res=resources.DEPLOYMENTS)
    managed()
    harness.reconcile(kube)
    trainer = harness.trainer(kube)
    assert condition(trainer, "ProvisioningSucceeded")["status"] == "True", trainer
    new = kube.get(resources.DEPLOYMENTS, DEPLOYMENT, namespace)
    assert new is not None
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["spec"]["selector"]["matchLabels"][LABEL] == "trainer"


def test_foreign_owner_references_are_stripped(kube: KubeClient, managed: Callable[..., Obj],
                                               namespace: str) -> None:
    owner = kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "legacy-owner", "namespace": namespace}},
                        res=resources.CONFIGMAPS)
    kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "kubeflow-trainer-config", "namespace": namespace,
                              "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                   "name": "legacy-owner",
                                                   "uid": owner["metadata"]["uid"]}]},
                 "data": {"old": "1"}}, res=resources.CONFIGMAPS)
    managed()
    harness.reconcile(kube)
    config = kube.get(resources.CONFIGMAPS, "kubeflow-trainer-config", namespace)
    assert config is not None
    assert not config["metadata"].get("ownerReferences")
    assert "controller_manager_config.yaml" in config["data"]


def test_legacy_runtime_finalizer_is_stripped(kube: KubeClient, managed: Callable[..., Obj],
                                              namespace: str) -> None:
    managed()
    harness.reconcile(kube)
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "legacy", "namespace": namespace,
                     "finalizers": ["trainer.kubeflow.org/resource-in-use", "example.com/keep"],
                     # Keeps the (unserved, on kwok) validating webhook out of the way.
                     "labels": {LABEL: "trainer",
                                "trainer.kubeflow.org/webhook-validation": "disabled"}},
        "spec": {"mlPolicy": {"numNodes": 1},
                 "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                     "spec": {"template": {"spec": {"containers": [
                         {"name": "node", "image": "x:1"}]}}}}}]}}},
    }
    kube.create(runtime, res=kinds.TRAINING_RUNTIMES)
    harness.reconcile(kube)
    stripped = kube.get(kinds.TRAINING_RUNTIMES, "legacy", namespace)
    assert stripped is not None
    assert stripped["metadata"]["finalizers"] == ["example.com/keep"]
    kube.patch(kinds.TRAINING_RUNTIMES, "legacy", {"metadata": {"finalizers": None}}, namespace)


def test_platform_handshake(kube: KubeClient, managed: Callable[..., Obj],
                            namespace: str) -> None:
    handshake = kube.create({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "odh-trainer-config", "namespace": namespace,
                     "labels": {LABEL: "trainer"}, "annotations": {"set-by": "platform"}},
        "data": {"platformVersion": "v3.4"}}, res=resources.CONFIGMAPS)
    managed()
    harness.reconcile(kube)
    live = kube.get(resources.DEPLOYMENTS, DEPLOYMENT, namespace)
    assert live is not None
    annotations = live["metadata"]["annotations"]
    assert (annotations["platform.opendatahub.io/type"],
            annotations["platform.opendatahub.io/version"]) == ("platform", "3.4.0")
    trainer = harness.trainer(kube)
    assert {"name": "platform", "version": "v3.4"} in (trainer or {})["status"]["releases"]
    assert kube.get(resources.CONFIGMAPS, "odh-trainer-config", namespace) is not None

    kube.patch(resources.CONFIGMAPS, "odh-trainer-config", {"data": {"platformVersion": "3.5.1"}},
               namespace)
    harness.status(kube)
    releases = (harness.trainer(kube) or {})["status"]["releases"]
    assert {"name": "platform", "version": "3.5.1"} in releases
    assert handshake["metadata"]["uid"] == (kube.get(
        resources.CONFIGMAPS, "odh-trainer-config", namespace) or {})["metadata"]["uid"]
