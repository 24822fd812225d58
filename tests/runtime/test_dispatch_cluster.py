"""Dispatch against a real API server: Reference-mode reads, resync listing, API metrics."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from functions.cluster.runner import LocalCluster
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
    assert 'functions_kube_api_requests_total{code="200",verb="get"} 1.0' in metrics
    assert 'functions_kube_api_requests_total{code="404",verb="get"} 1.0' in metrics


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
