"""The local cluster really does what the product relies on the API server and its
controllers for: SSA ownership, status subresources, finalizers, garbage collection,
Deployments on kwok nodes, pods that succeed or fail on demand, and CEL validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devstack.cluster import kwok
from devstack.cluster.manifests import apply_objects, load_documents
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from tests.support import wait_for

DATA = Path(__file__).parent / "data"
WIDGETS = Resource("test.example.com", "v1", "widgets", "Widget")
GADGETS = Resource("test.example.com", "v1", "gadgets", "Gadget")


@pytest.fixture(scope="module")
def widget_crds(kube: KubeClient) -> None:
    apply_objects(kube, load_documents([DATA / "widgets-crd.yaml"]))


def widget(namespace: str, name: str = "w", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "test.example.com/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def test_two_field_managers_conflict_without_force_and_transfer_with_force(
        kube: KubeClient, namespace: str, widget_crds: None) -> None:
    kube.apply(widget(namespace, size=1, color="red"), "alice", force=False)
    with pytest.raises(ApiError) as conflict:
        kube.apply(widget(namespace, size=2), "bob", force=False)
    assert conflict.value.status == 409
    assert "size" in conflict.value.message

    kube.apply(widget(namespace, size=2, replicas=3), "bob", force=True)
    current = kube.get(WIDGETS, "w", namespace)
    assert current is not None
    assert current["spec"] == {"size": 2, "color": "red", "replicas": 3}
    owners = {entry["manager"]: entry["fieldsV1"]["f:spec"]
              for entry in current["metadata"]["managedFields"]}
    assert set(owners) == {"alice", "bob"}
    assert "f:size" not in owners["alice"] and "f:color" in owners["alice"]
    assert {"f:size", "f:replicas"} <= set(owners["bob"])


def test_status_subresource_does_not_bump_generation_but_spec_does(
        kube: KubeClient, namespace: str, widget_crds: None) -> None:
    created = kube.apply(widget(namespace, size=1), "tester")
    assert created["metadata"]["generation"] == 1
    status = kube.apply_status(
        {"apiVersion": "test.example.com/v1", "kind": "Widget",
         "metadata": {"name": "w", "namespace": namespace}, "status": {"phase": "Ready"}},
        "status-writer", res=WIDGETS)
    assert status["status"] == {"phase": "Ready"}
    assert status["metadata"]["generation"] == 1
    changed = kube.apply(widget(namespace, size=5), "tester")
    assert changed["metadata"]["generation"] == 2
    assert changed["status"] == {"phase": "Ready"}


def test_finalizer_holds_object_until_removed(
        kube: KubeClient, namespace: str, widget_crds: None) -> None:
    obj = widget(namespace, size=1)
    obj["metadata"]["finalizers"] = ["test.example.com/hold"]
    kube.apply(obj, "tester")
    kube.delete(WIDGETS, "w", namespace)
    held = kube.get(WIDGETS, "w", namespace)
    assert held is not None and held["metadata"]["deletionTimestamp"]
    kube.patch(WIDGETS, "w", {"metadata": {"finalizers": None}}, namespace)
    wait_for(lambda: kube.get(WIDGETS, "w", namespace) is None, 10, message="widget gone")


@pytest.mark.parametrize("propagation", [
    pytest.param("Background", id="background"),
    pytest.param("Foreground", id="foreground"),
])
def test_children_are_garbage_collected_with_their_owner(
        kube: KubeClient, namespace: str, propagation: str) -> None:
    owner = kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "owner", "namespace": namespace}},
                        res=resources.CONFIGMAPS)
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
           "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "child", "namespace": namespace,
                              "ownerReferences": [ref]}}, res=resources.CONFIGMAPS)
    kube.delete(resources.CONFIGMAPS, "owner", namespace, propagation=propagation)
    wait_for(lambda: kube.get(resources.CONFIGMAPS, "child", namespace) is None, 45,
             message="child collected")
    wait_for(lambda: kube.get(resources.CONFIGMAPS, "owner", namespace) is None, 45,
             message="owner gone")


def test_deployment_runs_on_kwok_nodes(kube: KubeClient, namespace: str) -> None:
    labels = {"app": "web"}
    kube.create({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
    }, res=resources.DEPLOYMENTS)
    wait_for(lambda: ((kube.get(resources.DEPLOYMENTS, "web", namespace) or {})
                      .get("status", {}).get("availableReplicas") == 2), 60,
             message="2 available replicas")
    pods = kube.list(resources.PODS, namespace, label_selector="app=web")
    assert len(pods) == 2
    assert all(p["spec"]["nodeName"].startswith("kwok-") for p in pods)
    assert all(p["status"]["phase"] == "Running" for p in pods)


@pytest.mark.parametrize(("result", "exit_code", "phase"), [
    pytest.param("succeed", None, "Succeeded", id="succeed"),
    pytest.param("fail", "137", "Failed", id="fail-137"),
    pytest.param("fail", "3", "Failed", id="fail-3"),
])
def test_pod_finishes_as_labelled(kube: KubeClient, namespace: str, result: str,
                                  exit_code: str | None, phase: str) -> None:
    annotations = {kwok.DELAY_ANNOTATION: "200ms"}
    if exit_code:
        annotations[kwok.EXIT_CODE_ANNOTATION] = exit_code
    kube.create({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace, "annotations": annotations,
                     "labels": {kwok.RESULT_LABEL: result}},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "busybox"}]},
    }, res=resources.PODS)
    def finished() -> dict[str, Any] | None:
        pod = kube.get(resources.PODS, "p", namespace)
        return pod if pod and pod.get("status", {}).get("phase") == phase else None

    pod: dict[str, Any] = wait_for(finished, 30, message=f"pod {phase}")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == int(exit_code or 0)


def test_gpu_nodes_advertise_gpus(kube: KubeClient, cluster: Any) -> None:
    gpus = [n["status"]["allocatable"].get("nvidia.com/gpu") for n in kube.list(resources.NODES)]
    assert "8" in gpus


def test_cel_rule_rejects_bad_object_with_its_message(
        kube: KubeClient, namespace: str, widget_crds: None) -> None:
    with pytest.raises(ApiError) as rejected:
        kube.apply(widget(namespace, size=11), "tester")
    assert rejected.value.status == 422
    assert "size must be at most 10" in rejected.value.message


def test_kwok_starts_a_pod_that_already_has_an_ip(kube: KubeClient, namespace: str) -> None:
    """kwok's pod-ready stage keeps an IP a pod already has (``kwok._keep_pod_ip``). kwok
    v0.8.0 as released adds a second one (what two racing plays of one pod do in a burst): the
    API server refuses a pod with two IPs of one family and the pod never runs."""
    kube.create({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ip", "namespace": namespace},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "main", "image": "busybox"}]},
    }, res=resources.PODS)
    kube.patch(resources.PODS, "ip", {"status": {"podIP": "10.77.0.7",
                                                 "podIPs": [{"ip": "10.77.0.7"}]}},
               namespace, subresource="status")
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "ip"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "kwok-cpu-0"}}
    response = kube.call("create", "POST", resources.PODS.path(namespace, "ip", "binding"),
                         body=binding)
    assert response.status == 201

    def running() -> dict[str, Any] | None:
        pod = kube.get(resources.PODS, "ip", namespace)
        return pod if pod and pod.get("status", {}).get("phase") == "Running" else None

    pod: dict[str, Any] = wait_for(running, 20, message="pod Running")
    assert pod["status"]["podIPs"] == [{"ip": "10.77.0.7"}]
