"""Invalid training jobs are rejected by the API server (CRD CEL rules, no webhook)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from functions.jobs.controller import RESOURCES
from functions.jobs.core.frameworks import FRAMEWORKS
from functions.kube.client import ApiError, KubeClient
from tests.jobs.driver import for_test, sample, specs_of

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]


def _rename(job: Obj) -> None:
    job["metadata"]["name"] = "1-starts-with-digit"


def _no_default_container(job: Obj) -> None:
    specs_of(job)["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"


def _empty_image(job: Obj) -> None:
    specs_of(job)["Master"]["template"]["spec"]["containers"][0]["image"] = ""


def _two_masters(job: Obj) -> None:
    specs_of(job)["Master"]["replicas"] = 2


def _unset_master_replicas(job: Obj) -> None:
    del specs_of(job)["Master"]["replicas"]


def _elastic_without_worker(job: Obj) -> None:
    del specs_of(job)["Worker"]
    job["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2}


def _bad_manager(job: Obj) -> None:
    job["spec"]["runPolicy"]["managedBy"] = "example.com/other"


def _chief_and_master(job: Obj) -> None:
    specs = specs_of(job)
    specs["Chief"] = copy.deepcopy(specs["PS"])
    specs["Master"] = copy.deepcopy(specs["PS"])


def _no_containers(job: Obj) -> None:
    specs_of(job)["Worker"]["template"]["spec"]["containers"] = []


def _no_launcher(job: Obj) -> None:
    del specs_of(job)["Launcher"]


def _no_master(job: Obj) -> None:
    del specs_of(job)["Master"]


def _empty_worker_image(job: Obj) -> None:
    specs_of(job)["Worker"]["template"]["spec"]["containers"][0]["image"] = ""


def _master_type(job: Obj) -> None:
    specs = specs_of(job)
    specs["Master"] = copy.deepcopy(specs["Worker"])


def _unknown_type(job: Obj) -> None:
    specs = specs_of(job)
    specs["Coordinator"] = copy.deepcopy(specs["Worker"])


@pytest.mark.parametrize(("kind", "mutate", "message"), [
    pytest.param("PyTorchJob", _rename, "metadata.name must be a DNS-1035 label", id="name"),
    pytest.param("PyTorchJob", _no_default_container,
                 'one container in template.spec.containers must be named "pytorch"',
                 id="pytorch-container-name"),
    pytest.param("PyTorchJob", _empty_image, "needs a non-empty image", id="empty-image"),
    pytest.param("PyTorchJob", _two_masters, "Master replicas must be set to 1",
                 id="two-masters"),
    pytest.param("PyTorchJob", _unset_master_replicas, "Master replicas must be set to 1",
                 id="master-replicas-unset"),
    pytest.param("PyTorchJob", _elastic_without_worker,
                 "spec.elasticPolicy needs a Worker replica spec", id="elastic-needs-worker"),
    pytest.param("PyTorchJob", _bad_manager,
                 "spec.runPolicy.managedBy must be one of: kubeflow.org/training-operator or "
                 "kueue.x-k8s.io/multikueue", id="managed-by-value"),
    pytest.param("PyTorchJob", _unknown_type, "PyTorchJob replica types must be among",
                 id="pytorch-replica-type"),
    pytest.param("TFJob", _chief_and_master, "must not have more than 1 Chief or Master role",
                 id="tf-chief-and-master"),
    pytest.param("TFJob", _no_default_container,
                 'one container in template.spec.containers must be named "tensorflow"',
                 id="tf-container-name"),
    pytest.param("MXJob", _no_containers, "must list at least one container",
                 id="mx-no-containers"),
    pytest.param("MPIJob", _no_launcher, "an MPIJob needs a Launcher replica spec",
                 id="mpi-launcher"),
    pytest.param("MPIJob", _bad_manager,
                 "spec.runPolicy.managedBy must be one of: kubeflow.org/mpi-operator",
                 id="mpi-managed-by"),
    pytest.param("XGBoostJob", _no_master, "an XGBoostJob needs a Master replica spec",
                 id="xgboost-needs-master"),
    pytest.param("XGBoostJob", _two_masters, "Master replicas must be set to 1",
                 id="xgboost-two-masters"),
    pytest.param("XGBoostJob", _unset_master_replicas, "Master replicas must be set to 1",
                 id="xgboost-master-replicas-unset"),
    pytest.param("XGBoostJob", _no_default_container,
                 'one container in template.spec.containers must be named "xgboost"',
                 id="xgboost-container-name"),
    pytest.param("XGBoostJob", _unknown_type, "XGBoostJob replica types must be among",
                 id="xgboost-replica-type"),
    pytest.param("PaddleJob", _no_default_container,
                 'one container in template.spec.containers must be named "paddle"',
                 id="paddle-container-name"),
    pytest.param("PaddleJob", _unknown_type, "PaddleJob replica types must be among",
                 id="paddle-replica-type"),
    pytest.param("PaddleJob", _empty_worker_image, "needs a non-empty image",
                 id="paddle-empty-image"),
    pytest.param("PaddleJob", _bad_manager,
                 "spec.runPolicy.managedBy must be one of: kubeflow.org/training-operator",
                 id="paddle-managed-by"),
    pytest.param("JAXJob", _master_type, "JAXJob replica types must be among: Worker",
                 id="jax-worker-only"),
    pytest.param("JAXJob", _no_default_container,
                 'one container in template.spec.containers must be named "jax"',
                 id="jax-container-name"),
    pytest.param("JAXJob", _no_containers, "must list at least one container",
                 id="jax-no-containers"),
    pytest.param("JAXJob", _rename, "metadata.name must be a DNS-1035 label", id="jax-name"),
])
def test_invalid_job_is_rejected(kube: KubeClient, crds: None, namespace: str, kind: str,
                                 mutate: Callable[[Obj], None], message: str) -> None:
    job = for_test(sample(kind), "bad", namespace)
    job["spec"].setdefault("runPolicy", {})
    mutate(job)
    with pytest.raises(ApiError) as caught:
        kube.create(job, res=RESOURCES[kind])
    assert caught.value.status == 422
    assert message in caught.value.message


def test_valid_samples_are_accepted(kube: KubeClient, crds: None, namespace: str) -> None:
    for fw in FRAMEWORKS:
        kind = fw.kind
        job = for_test(sample(kind), "ok", namespace)
        created = kube.create(job, res=RESOURCES[kind])
        created["spec"]["runPolicy"].pop("suspend")
        assert created["spec"] == job["spec"], "the stored spec is what the user wrote"


@pytest.mark.parametrize(("field", "before", "after", "message"), [
    pytest.param("managedBy", None, "kueue.x-k8s.io/multikueue",
                 "spec.runPolicy.managedBy is immutable", id="managed-by-added"),
    pytest.param("managedBy", "kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue",
                 "spec.runPolicy.managedBy is immutable", id="managed-by-changed"),
    pytest.param("queue", "team-a", "team-b",
                 "spec.runPolicy.schedulingPolicy.queue is immutable", id="queue"),
])
def test_immutable_fields(kube: KubeClient, crds: None, namespace: str, field: str,
                          before: str | None, after: str, message: str) -> None:
    job = for_test(sample("TFJob"), "imm", namespace)
    policy = job["spec"]["runPolicy"]
    if field == "queue":
        policy["schedulingPolicy"] = {"queue": before}
        patch: Obj = {"spec": {"runPolicy": {"schedulingPolicy": {"queue": after}}}}
    else:
        if before:
            policy["managedBy"] = before
        patch = {"spec": {"runPolicy": {"managedBy": after}}}
    kube.create(job, res=RESOURCES["TFJob"])
    with pytest.raises(ApiError) as caught:
        kube.patch(RESOURCES["TFJob"], "imm", patch, namespace)
    assert caught.value.status == 422
    assert message in caught.value.message
    kube.patch(RESOURCES["TFJob"], "imm", {"spec": {"runPolicy": {"suspend": True}}}, namespace)


@pytest.mark.parametrize(("field", "text"), [
    pytest.param("pytorchjobs.spec.runPolicy.cleanPodPolicy", "Which pods to delete when the "
                 "job finishes", id="clean-pod-policy"),
    pytest.param("tfjobs.spec.tfReplicaSpecs", "Replica specs by replica type", id="tf-specs"),
    pytest.param("mpijobs.spec.slotsPerWorker", "Slots per worker in the hostfile",
                 id="mpi-slots"),
    pytest.param("xgboostjobs.spec.xgbReplicaSpecs", "Replica specs by replica type",
                 id="xgboost-specs"),
    pytest.param("paddlejobs.spec.elasticPolicy.maxRestarts", "How often pods may restart",
                 id="paddle-elastic"),
    pytest.param("jaxjobs.spec.jaxReplicaSpecs", "Worker; keys are matched case-insensitively",
                 id="jax-specs"),
    pytest.param("pytorchjob.spec.pytorchReplicaSpecs.template.spec.containers",
                 "List of containers belonging to the pod.", id="pytorch-template-containers"),
    pytest.param("mpijobs.spec.mpiReplicaSpecs.template.spec.containers.resources.limits",
                 "Limits describes the maximum amount of compute resources allowed.",
                 id="mpi-template-resources"),
    pytest.param("paddlejobs.spec.paddleReplicaSpecs.template.spec.tolerations.effect",
                 "Effect indicates the taint effect to match.", id="paddle-template-tolerations"),
])
def test_kubectl_explain_shows_field_docs(cluster: Any, crds: None, field: str,
                                          text: str) -> None:
    command = [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cluster.kubeconfig}",
               "explain", field]
    deadline = time.monotonic() + 30
    while True:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode == 0 and text in " ".join(done.stdout.split()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"kubectl explain {field}: {done.stdout} {done.stderr}")
        time.sleep(1)


def _typos(job: Obj) -> None:
    template = specs_of(job)["Worker"]["template"]
    template["spec"]["nodeSelectr"] = {"disk": "ssd"}
    template["spec"]["nodeSelector"] = {"disk": "ssd"}
    container = template["spec"]["containers"][0]
    container["imagePullPolic"] = "Always"
    container["imagePullPolicy"] = "Always"
    container["resources"]["limitz"] = {"cpu": "1"}


@pytest.mark.parametrize("kind", [fw.kind for fw in FRAMEWORKS])
def test_unknown_pod_template_fields_are_pruned_or_rejected(
        cluster: Any, kube: KubeClient, crds: None, namespace: str, kind: str) -> None:
    """Like upstream's CRDs: a typo in a pod template is refused by a strict client and
    dropped otherwise; the fields it meant are kept."""
    job = for_test(sample(kind), "typos", namespace)
    _typos(job)
    strict = subprocess.run(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cluster.kubeconfig}", "create",
         "--validate=strict", "-f", "-"], input=json.dumps(job), capture_output=True,
        text=True, check=False)
    assert strict.returncode != 0
    for typo in ("nodeSelectr", "imagePullPolic", "limitz"):
        assert re.search(rf'unknown field "spec\.[^"]*\.{typo}"', strict.stderr), typo

    created = kube.create(job, res=RESOURCES[kind])
    template = specs_of(created)["Worker"]["template"]
    container = template["spec"]["containers"][0]
    assert "nodeSelectr" not in template["spec"] and "imagePullPolic" not in container
    assert "limitz" not in container["resources"]
    assert (template["spec"]["nodeSelector"], container["imagePullPolicy"]) == (
        {"disk": "ssd"}, "Always")
