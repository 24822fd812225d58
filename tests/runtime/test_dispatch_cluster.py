"""Dispatch against a real API server: Reference-mode reads, resync listing, API metrics."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any

import pytest

from devstack.cluster.runner import LocalCluster
from functions.core.errors import TemporaryError
from functions.core.keys import ObjectKey, labelled_parent
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.runtime.app import create_app
from functions.runtime.registry import ChildMapping, Context, Controller
from tests.runtime.controllers import Calls, recording_controller

pytestmark = pytest.mark.cluster

CONFIG_LABEL = "example.com/config"


def config_controller(calls: Calls, behaviour: Any = None) -> Controller:
    """Parents are ConfigMaps; Pods labelled with a ConfigMap's name are its children."""
    return recording_controller(
        calls, behaviour, parent=resources.CONFIGMAPS,
        children=(ChildMapping("v1", "Pod",
                               lambda obj: labelled_parent(obj, CONFIG_LABEL, "v1", "ConfigMap")),))


def pod(namespace: str, name: str, config: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {CONFIG_LABEL: config}},
            "spec": {"containers": [{"name": "main", "image": "registry.invalid/x:1"}]}}


def reference_event(verb: str, namespace: str, name: str) -> tuple[dict[str, str], bytes]:
    headers = {"Ce-Specversion": "1.0", "Ce-Type": f"dev.knative.apiserver.ref.{verb}",
               "Ce-Source": "https://10.96.0.1:443", "Ce-Id": f"{verb}-{name}",
               "Ce-Kind": "Pod", "Ce-Name": name, "Ce-Namespace": namespace,
               "Ce-Apiversion": "v1", "Content-Type": "application/json"}
    body = {"kind": "Pod", "namespace": namespace, "name": name, "apiVersion": "v1"}
    return headers, json.dumps(body, separators=(",", ":")).encode()


PING = {"Ce-Specversion": "1.0", "Ce-Type": "dev.knative.sources.ping",
        "Ce-Source": "/apis/v1/namespaces/opendatahub/pingsources/odh-training-resync",
        "Ce-Id": "tick", "Content-Type": "application/json"}


def test_reference_mode_child_is_read_to_find_its_parent(cluster: LocalCluster, kube: KubeClient,
                                                         namespace: str) -> None:
    kube.create(pod(namespace, "worker", "settings"))
    calls = Calls()
    clients: list[KubeClient] = []

    def factory(hook: Any) -> KubeClient:
        clients.append(cluster.client(on_request=hook))
        return clients[-1]

    app = create_app("reconcile", controllers=[config_controller(calls)], kube_factory=factory,
                     warm_up="now")
    client = app.test_client()
    headers, body = reference_event("add", namespace, "worker")
    response = client.post("/", headers=headers, data=body)
    assert response.status_code == 202, response.get_data(as_text=True)
    assert calls.keys() == [ObjectKey("v1", "ConfigMap", namespace, "settings")]
    assert clients[0].request_count("get") == 1

    kube.delete(resources.PODS, "worker", namespace, grace_period_seconds=0)
    headers, body = reference_event("delete", namespace, "worker")
    assert client.post("/", headers=headers, data=body).status_code == 202
    assert len(calls.keys()) == 1  # the child is gone: left to the next resync

    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'odh_training_kube_api_requests_total{code="200",verb="get"} 1.0' in metrics
    assert 'odh_training_kube_api_requests_total{code="404",verb="get"} 1.0' in metrics


def test_resync_runs_every_parent_with_bounded_concurrency(cluster: LocalCluster,
                                                           kube: KubeClient,
                                                           namespace: str) -> None:
    names = [f"cfg-{i}" for i in range(6)]
    for name in names:
        kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": name, "namespace": namespace}})
    calls = Calls()
    active = [0]
    peak = [0]
    guard = threading.Lock()

    def slow(ctx: Context, key: ObjectKey) -> None:
        with guard:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with guard:
            active[0] -= 1
        if key.name == "cfg-3":
            raise TemporaryError("API server answered 429", retry_after=4)

    app = create_app("gc", controllers=[config_controller(calls, slow)],
                     kube_factory=lambda hook: cluster.client(on_request=hook),
                     resync_workers=3, warm_up="now")
    response = app.test_client().post("/", headers=PING, data=b'{"reason":"resync"}')
    ours = {key.name for key in calls.keys("gc") if key.namespace == namespace}
    assert ours == set(names) | {"kube-root-ca.crt"}
    assert {key.namespace for key in calls.keys("gc")} > {namespace}  # every namespace
    assert 1 < peak[0] <= 3
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "4"
    assert "cfg-3" in response.get_json()["detail"]


def resource_event(verb: str, obj: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    meta = obj["metadata"]
    headers = {"Ce-Specversion": "1.0", "Ce-Type": f"dev.knative.apiserver.resource.{verb}",
               "Ce-Source": "https://10.96.0.1:443",
               "Ce-Id": f"{verb}-{meta['name']}-{meta['resourceVersion']}",
               "Ce-Kind": obj["kind"], "Ce-Name": meta["name"],
               "Ce-Namespace": meta["namespace"], "Ce-Apiversion": obj["apiVersion"],
               "Content-Type": "application/json"}
    return headers, json.dumps(obj, separators=(",", ":")).encode()


def test_an_update_of_a_job_status_alone_reaches_only_handlers_that_read_it(
        cluster: LocalCluster, kube: KubeClient, crds: None, namespace: str) -> None:
    """The watch cache tells a status-only change from the others; reconcile leaves out the
    event of one it does not read (here: any but Succeeded) without reading anything."""
    from functions.kube.cache import CacheSpec
    from functions.kube.gaps import true_conditions
    from functions.runtime.app import runtime_of
    from tests.jobs.driver import for_test, sample
    from tests.runtime.controllers import JOB_LABEL

    calls = Calls()
    controller = dataclasses.replace(
        recording_controller(calls),
        cached={"reconcile": (CacheSpec(resources.PYTORCHJOBS),
                              CacheSpec(resources.PODS, JOB_LABEL, JOB_LABEL))},
        status_inputs={"reconcile": lambda ref: "Succeeded" in true_conditions(ref)})
    clients: list[KubeClient] = []

    def factory(hook: Any) -> KubeClient:
        clients.append(cluster.client(on_request=hook))
        return clients[-1]

    app = create_app("reconcile", controllers=[controller], kube_factory=factory,
                     warm_up="now")
    cache = runtime_of(app)._cache
    assert cache is not None
    assert cache.wait_synced([resources.PYTORCHJOBS, resources.PODS], 30)
    client = app.test_client()
    job = kube.create(for_test(sample("PyTorchJob"), "alone", namespace),
                      res=resources.PYTORCHJOBS)
    key = ObjectKey("kubeflow.org/v1", "PyTorchJob", namespace, "alone")

    def status(*conditions: str) -> dict[str, Any]:
        written = kube.apply_status(
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
             "metadata": {"name": "alone", "namespace": namespace},
             "status": {"conditions": [
                 {"type": t, "status": "True", "reason": t, "message": t,
                  "lastUpdateTime": "2026-12-01T00:00:00Z",
                  "lastTransitionTime": "2026-12-01T00:00:00Z"} for t in conditions]}},
            "test-status", res=resources.PYTORCHJOBS)
        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", **written}

    def deliver(verb: str, obj: dict[str, Any]) -> list[ObjectKey]:
        before = len(calls.keys())
        response = client.post("/", headers=resource_event(verb, obj)[0],
                               data=resource_event(verb, obj)[1])
        assert response.status_code == 202, response.get_data(as_text=True)
        return calls.keys()[before:]

    assert deliver("add", {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", **job}) \
        == [key]
    reads = clients[0].request_count("get", "list")
    running = status("Created", "Running")
    assert deliver("update", running) == []
    assert clients[0].request_count("get", "list") == reads
    # an event of an earlier version than the watch's latest change is not known: it runs
    labelled = kube.patch(resources.PYTORCHJOBS, "alone", {"metadata": {"labels": {"x": "y"}}},
                          namespace)
    labelled = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", **labelled}
    assert cache.caught_up(resources.PYTORCHJOBS, labelled, 10)
    assert deliver("update", running) == [key]
    assert deliver("update", labelled) == [key]
    assert deliver("update", status("Created", "Succeeded")) == [key]
