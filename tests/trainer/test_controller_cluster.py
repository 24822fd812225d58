"""The Trainer handlers against a real local cluster, with the upstream manifests.

Handlers are called directly (as the function runtime would on an event) with a client whose
transport records every request, so the tests can count writes and reads per type.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.trainer import kinds, provision
from functions.trainer.render import Sources
from tests.support import condition
from tests.trainer import harness
from tests.trainer.harness import Obj, recording_client

pytestmark = pytest.mark.cluster

DEPLOYMENT = "kubeflow-trainer-controller-manager"
LABEL = "platform.opendatahub.io/part-of"
STAMP_KEYS = {"platform.opendatahub.io/instance.generation",
              "platform.opendatahub.io/instance.name", "platform.opendatahub.io/instance.uid",
              "platform.opendatahub.io/type", "platform.opendatahub.io/version"}
CLUSTER_SCOPED_RENDERED = [
    (kinds.CLUSTERROLES, "kubeflow-trainer-controller-manager"),
    (kinds.CLUSTERROLES, "training-admin"), (kinds.CLUSTERROLES, "training-edit"),
    (kinds.CLUSTERROLES, "training-view"),
    (kinds.CLUSTERROLEBINDINGS, "kubeflow-trainer-controller-manager"),
    (kinds.MUTATING_WEBHOOKS, "defaulter.trainer.kubeflow.org"),
    (kinds.VALIDATING_WEBHOOKS, "validator.trainer.kubeflow.org"),
    (kinds.CLUSTER_TRAINING_RUNTIMES, "torch-distributed"),
    (kinds.CLUSTER_TRAINING_RUNTIMES, "training-hub-cpu"),
]
NAMESPACED_RENDERED = [
    (resources.SERVICEACCOUNTS, DEPLOYMENT), (kinds.ROLES, "kubeflow-trainer-public"),
    (kinds.ROLEBINDINGS, "kubeflow-trainer-public"),
    (resources.CONFIGMAPS, "kubeflow-trainer-config"),
    (resources.SECRETS, "kubeflow-trainer-webhook-cert"), (resources.SERVICES, DEPLOYMENT),
    (resources.DEPLOYMENTS, DEPLOYMENT),
    (kinds.PODMONITORS, "kubeflow-trainer-controller-manager-metrics-monitor"),
]
TRAINER_CRDS = ["clustertrainingruntimes.trainer.kubeflow.org",
                "trainingruntimes.trainer.kubeflow.org", "trainjobs.trainer.kubeflow.org"]


def managers(obj: Obj) -> set[str]:
    return {m["manager"] for m in obj["metadata"].get("managedFields") or []
            if m.get("operation") == "Apply"}


def deployment(kube: KubeClient, namespace: str) -> Obj:
    found = kube.get(resources.DEPLOYMENTS, DEPLOYMENT, namespace)
    assert found is not None
    return found


def image_of(obj: Obj) -> str:
    return str(obj["spec"]["template"]["spec"]["containers"][0]["image"])


def runtime_image(kube: KubeClient, name: str) -> str:
    ctr = kube.get(kinds.CLUSTER_TRAINING_RUNTIMES, name)
    assert ctr is not None
    job = ctr["spec"]["template"]["spec"]["replicatedJobs"][0]
    return str(job["template"]["spec"]["template"]["spec"]["containers"][0]["image"])


def wait_available(kube: KubeClient, namespace: str) -> None:
    def available() -> bool:
        status = deployment(kube, namespace).get("status") or {}
        return bool(status.get("replicas")) and status.get("readyReplicas") == status["replicas"]
    try:
        harness.wait_until(available, 90, "the trainer Deployment to become available")
    except AssertionError:
        events = [(e["involvedObject"]["kind"], e["reason"], e["message"])
                  for e in kube.list(resources.EVENTS, namespace)]
        pods = [(p["metadata"]["name"], p.get("status")) for p in kube.list(resources.PODS,
                                                                           namespace)]
        raise AssertionError(f"Deployment {deployment(kube, namespace).get('status')}, "
                             f"pods {pods}, events {events}") from None


def provision_ready(kube: KubeClient, managed: Callable[..., Obj], namespace: str,
              **spec: Any) -> None:
    managed(**spec)
    harness.reconcile(kube)
    wait_available(kube, namespace)
    harness.status(kube)


def test_sample_trainer_is_provisioned_and_ready(kube: KubeClient, managed: Callable[..., Obj],
                                                namespace: str) -> None:
    managed()
    client, transport = recording_client(kube)
    started = time.perf_counter()
    harness.reconcile(client)
    elapsed = time.perf_counter() - started
    print(f"\nfirst reconcile: {elapsed * 1000:.0f} ms, {len(transport.seen)} requests "
          f"({len(transport.writes())} writes)")

    trainer = harness.trainer(kube)
    assert trainer is not None
    assert "components.platform.opendatahub.io/trainer-cleanup" in trainer["metadata"]["finalizers"]
    provisioning = condition(trainer, "ProvisioningSucceeded")
    assert provisioning["status"] == "True", provisioning
    uid = trainer["metadata"]["uid"]
    rendered = provision.render_all(Sources.from_env(), namespace, False, {})
    assert len(rendered) == 19 + 14
    for obj in rendered:
        meta = obj["metadata"]
        res = kinds.resource_of(kube, obj["apiVersion"], obj["kind"])
        live_obj = kube.get(res, meta["name"], meta.get("namespace"))
        what = f"{obj['kind']} {meta['name']}"
        assert live_obj is not None, f"{what} missing"
        assert live_obj["metadata"]["labels"][LABEL] == "trainer", what
        annotations = live_obj["metadata"].get("annotations") or {}
        if obj["kind"] == "CustomResourceDefinition":
            assert managers(live_obj) == {"platform.opendatahub.io"}, what
            assert not STAMP_KEYS & set(annotations), what
            continue
        assert managers(live_obj) == {"trainer-module-controller"}, what
        assert set(annotations) >= STAMP_KEYS, f"{what} not stamped"
        assert annotations["platform.opendatahub.io/instance.uid"] == uid
        assert annotations["platform.opendatahub.io/instance.generation"] == "1"
        assert annotations["platform.opendatahub.io/version"] == "2.3.0"
        assert annotations["platform.opendatahub.io/type"] == "Kubeflow Trainer"
    live = deployment(kube, namespace)
    assert live["spec"]["selector"]["matchLabels"][LABEL] == "trainer"
    assert not sweep_imagestreams(kube, namespace)
    namespace_obj = kube.get(resources.NAMESPACES, namespace)
    assert namespace_obj is not None and LABEL not in (namespace_obj["metadata"].get("labels")
                                                       or {})

    wait_available(kube, namespace)
    harness.status(kube)
    trainer = harness.trainer(kube)
    assert trainer is not None
    assert condition(trainer, "Ready")["status"] == "True"
    assert condition(trainer, "ProvisioningSucceeded")["status"] == "True"
    assert condition(trainer, "DeploymentsAvailable")["status"] == "True"
    assert condition(trainer, "Degraded")["reason"] == "DependenciesAvailable"
    assert trainer["status"]["phase"] == "Ready"
    assert trainer["status"]["observedGeneration"] == trainer["metadata"]["generation"]
    assert trainer["status"]["releases"][0] == {
        "name": "Kubeflow Trainer", "version": "2.3.0",
        "repoUrl": "https://github.com/kubeflow/trainer"}

    # Converge (DeploymentsAvailable reports the observedGeneration just reached), then a
    # reconcile and a status pass with nothing new must not write at all.
    harness.reconcile(kube)
    transport.seen.clear()
    started = time.perf_counter()
    harness.reconcile(client)
    steady = time.perf_counter() - started
    harness.status(client)
    print(f"steady reconcile: {steady * 1000:.0f} ms, reads per type "
          f"{dict(transport.reads_per_type())}")
    assert transport.writes() == []
    reconcile_reads = harness_reads_without_status(transport)
    assert max(reconcile_reads.values()) == 1, reconcile_reads


def harness_reads_without_status(transport: harness.RecordingTransport) -> dict[str, int]:
    """Reads of the reconcile pass only (the status pass re-reads the Trainer on purpose),
    without the coexistence check's (another controller's Deployment across namespaces, the
    Trainer CRD's owner, each DataScienceCluster version)."""
    counts = dict(transport.reads_per_type())
    # The status handler's reads: the Trainer, the Deployments and the handshake ConfigMap.
    for key in ("components.platform.opendatahub.io/trainers", "apps/deployments",
                "core/configmaps"):
        counts[key] -= 1
    for key in ("apps/deployments", "apiextensions.k8s.io/customresourcedefinitions"):
        counts[key] -= 1
    counts.pop("datasciencecluster.opendatahub.io/datascienceclusters", None)
    return {k: v for k, v in counts.items() if v}


def sweep_imagestreams(kube: KubeClient, namespace: str) -> list[Obj]:
    if not kube.discover(kinds.IMAGESTREAMS.api_version):
        return []
    return kube.list(kinds.IMAGESTREAMS, namespace)


def test_related_images_reach_deployment_and_runtimes(
        kube: KubeClient, managed: Callable[..., Obj], namespace: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELATED_IMAGE_ODH_TRAINER_IMAGE", "registry.test/trainer:v1")
    monkeypatch.setenv("RELATED_IMAGE_ODH_TH_TORCH_CUDA_PY312_IMAGE", "registry.test/cuda:v1")
    managed()
    harness.reconcile(kube)
    assert image_of(deployment(kube, namespace)) == "registry.test/trainer:v1"
    assert runtime_image(kube, "torch-distributed") == "registry.test/cuda:v1"
    assert runtime_image(kube, "training-hub-th09-cuda130-torch211-py312") == \
        "registry.test/cuda:v1"
    assert runtime_image(kube, "torch-distributed-cpu") == \
        "quay.io/opendatahub/odh-th-torch-cpu-py312:odh-3.5"
    old_configs = labelled_configmaps(kube, namespace)

    monkeypatch.setenv("RELATED_IMAGE_ODH_TRAINER_IMAGE", "registry.test/trainer:v2")
    harness.reconcile(kube)
    assert image_of(deployment(kube, namespace)) == "registry.test/trainer:v2"
    new_configs = labelled_configmaps(kube, namespace)
    assert len(new_configs) == len(old_configs) == 2
    assert new_configs != old_configs, "the superseded rhoai-config ConfigMap is collected"


def labelled_configmaps(kube: KubeClient, namespace: str) -> list[str]:
    return sorted(o["metadata"]["name"] for o in kube.list(
        resources.CONFIGMAPS, namespace, label_selector=f"{LABEL}=trainer")
        if not o["metadata"].get("deletionTimestamp"))


def test_drift_is_corrected_and_user_choices_survive(
        kube: KubeClient, managed: Callable[..., Obj], namespace: str) -> None:
    provision_ready(kube, managed, namespace)

    kube.delete(kinds.CLUSTERROLES, "training-view")
    kube.patch(resources.DEPLOYMENTS, DEPLOYMENT,
               {"spec": {"replicas": 3, "template": {"spec": {"containers": [
                   {"name": "manager", "image": "drifted:1"}]}}}}, namespace,
               content_type="application/strategic-merge-patch+json")
    harness.reconcile(kube)
    assert kube.get(kinds.CLUSTERROLES, "training-view") is not None
    live = deployment(kube, namespace)
    assert image_of(live) == "quay.io/opendatahub/trainer:odh-stable"
    assert live["spec"]["replicas"] == 3

    kube.patch(resources.DEPLOYMENTS, DEPLOYMENT,
               {"metadata": {"annotations": {"opendatahub.io/managed": "false"}},
                "spec": {"template": {"spec": {"containers": [
                    {"name": "manager", "image": "mine:1"}]}}}}, namespace,
               content_type="application/strategic-merge-patch+json")
    harness.reconcile(kube)
    assert image_of(deployment(kube, namespace)) == "mine:1"


def test_missing_jobset_crd_degrades_and_recovers(
        kube: KubeClient, managed: Callable[..., Obj], namespace: str, bin_dir: Any) -> None:
    from tests.trainer.conftest import install_jobset_crd

    kube.delete(resources.CRDS, "jobsets.jobset.x-k8s.io")
    harness.wait_until(lambda: not kube.discover("jobset.x-k8s.io/v1alpha2"), 30,
                       "the JobSet API to go away")
    try:
        managed()
        harness.reconcile(kube)
        trainer = harness.trainer(kube)
        degraded = condition(trainer, "Degraded")
        assert (degraded["status"], degraded["reason"]) == ("True", "JobSetCRDNotFound")
        assert condition(trainer, "Ready")["status"] == "False"
        provisioning = condition(trainer, "ProvisioningSucceeded")
        assert provisioning["status"] == "False"
        assert provisioning["message"].startswith("dependency not met: JobSet CRD")
        assert (trainer or {})["status"]["phase"] == "Not Ready"
        assert kube.get(resources.DEPLOYMENTS, DEPLOYMENT, namespace) is None
        events = [e for e in kube.list(resources.EVENTS, "default")
                  if e["involvedObject"].get("name") == "default-trainer"
                  and e["reason"] == "ProvisioningError"]
        assert events and events[0]["type"] == "Warning"
    finally:
        install_jobset_crd(kube, bin_dir)
    harness.wait_until(lambda: kube.discover("jobset.x-k8s.io/v1alpha2"), 30,
                       "the JobSet API to be served again")
    harness.reconcile(kube)
    wait_available(kube, namespace)
    harness.status(kube)
    trainer = harness.trainer(kube)
    assert condition(trainer, "Degraded")["status"] == "False"
    assert condition(trainer, "Ready")["status"] == "True"


def test_removed_then_managed_then_deleted(kube: KubeClient, managed: Callable[..., Obj],
                                           namespace: str) -> None:
    provision_ready(kube, managed, namespace)
    kube.patch(resources.TRAINERS, "default-trainer", {"spec": {"managementState": "Removed"}})
    harness.reconcile(kube)  # not its business: nothing happens
    assert kube.get(resources.DEPLOYMENTS, DEPLOYMENT, namespace) is not None
    harness.gc(kube)
    for res, name in CLUSTER_SCOPED_RENDERED + NAMESPACED_RENDERED:
        obj = kube.get(res, name, namespace if res.namespaced else None)
        assert obj is None or obj["metadata"].get("deletionTimestamp"), f"{res.kind} {name}"
    assert kube.get(resources.NAMESPACES, namespace) is not None
    assert all(kube.get(resources.CRDS, name) is not None for name in TRAINER_CRDS)
    trainer = harness.trainer(kube)
    assert condition(trainer, "ProvisioningSucceeded")["reason"] == "Removed"
    assert condition(trainer, "Ready")["status"] == "False"
    assert condition(trainer, "Ready")["reason"] == "Removed"
    assert (trainer or {})["status"]["phase"] == "Not Ready"

    kube.patch(resources.TRAINERS, "default-trainer", {"spec": {"managementState": "Managed"}})
    harness.wait_until(lambda: kube.get(resources.DEPLOYMENTS, DEPLOYMENT, namespace) is None,
                       60, "the old Deployment to be gone")
    harness.reconcile(kube)
    wait_available(kube, namespace)
    harness.status(kube)
    assert condition(harness.trainer(kube), "Ready")["status"] == "True"

    kube.delete(resources.TRAINERS, "default-trainer")
    harness.gc(kube)
    assert harness.trainer(kube) is None
    assert kube.get(kinds.CLUSTERROLES, "training-view") is None
    assert kube.get(kinds.CLUSTER_TRAINING_RUNTIMES, "torch-distributed") is None


def test_other_names_are_rejected(kube: KubeClient, trainer_prerequisites: None) -> None:
    other = {"apiVersion": "components.platform.opendatahub.io/v1alpha1", "kind": "Trainer",
             "metadata": {"name": "my-trainer"}, "spec": {}}
    with pytest.raises(ApiError) as raised:
        kube.create(other, res=resources.TRAINERS)
    assert raised.value.status == 422
    assert "Trainer must be named 'default-trainer'" in raised.value.message


def test_trainer_defaults_are_filled_by_the_api(kube: KubeClient, managed: Callable[..., Obj],
                                                trainer_env: Sources) -> None:
    created = managed()
    assert created["spec"]["managementState"] == "Managed"
    assert trainer_env.trainer.is_dir()
