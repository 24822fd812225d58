"""A kind the cluster does not serve stops only its own ApiServerSource: with the real receive
adapter, the sources of eventing/ run side by side, the MPIJob one pointed at a version no CRD
serves (as on a cluster whose mpijobs.kubeflow.org is the training operator's v1-only
definition), and a PyTorchJob's events still arrive from the other source. The same kinds in
one source, as before the split, deliver nothing: the adapter stops before it watches anything,
in Knative's default (resilient) mode as in fail-fast mode."""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.ports import free_port
from devstack.cluster.runner import Component, LocalCluster, stop_process_group
from devstack.recording import RecordedRequest, RecordSink
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.runtime.eventing import adapter_environment, load_manifests
from tests.support import REPO, wait_for

Obj = dict[str, Any]
UNSERVED = "kubeflow.org/v9alpha1"


class Received:
    """What the record sink got, by CloudEvent kind."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> None:
        kind = {k.lower(): v for k, v in request.headers.items()}.get("ce-kind", "")
        with self._lock:
            self.kinds.append(kind)


def sources() -> dict[str, Obj]:
    return {s["metadata"]["name"]: s for s in load_manifests(REPO / "eventing").apiserver_sources}


def unserved_mpijobs(source: Obj) -> Obj:
    changed = copy.deepcopy(source)
    for item in changed["spec"]["resources"]:
        if item["kind"] == "MPIJob":
            item["apiVersion"] = UNSERVED
    return changed


@pytest.fixture
def sink() -> Iterator[tuple[RecordSink, Received]]:
    received = Received()
    server = RecordSink(received).start()
    yield server, received
    server.stop()


def start_adapter(cluster: LocalCluster, bin_dir: Path, source: Obj, url: str,
                  logs: Path, fail_fast: bool) -> Component:
    """The real receive adapter for ``source``; ``fail_fast`` is the mode Knative gives a
    source annotated features.knative.dev/apiserversource-skip-permissions-check."""
    env = adapter_environment(source, url)
    config = json.loads(env["K_SOURCE_CONFIG"])
    config["failFast"] = fail_fast
    env = {**env, "K_SOURCE_CONFIG": json.dumps(config), "KUBECONFIG": str(cluster.kubeconfig),
           "SYSTEM_NAMESPACE": "knative-eventing", "METRICS_DOMAIN": "knative.dev/eventing",
           "PROFILING_PORT": str(free_port()), "PATH": "/usr/bin:/bin"}
    name = f"adapter-{source['metadata']['name']}"
    component = Component(name, [str(bin_dir / "apiserver_receive_adapter"),
                                 f"--kubeconfig={cluster.kubeconfig}"], logs / f"{name}.log",
                          env=env)
    component.start()
    return component


def pytorchjob(namespace: str) -> Obj:
    container = {"name": "pytorch", "image": "x:1"}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": f"probe-{uuid.uuid4().hex[:6]}", "namespace": namespace},
            "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {"Master": {
                "replicas": 1, "template": {"spec": {"containers": [container]}}}}}}


def combined(known: dict[str, Obj]) -> Obj:
    """One source for the job kinds of both sources, as before they were split."""
    merged = copy.deepcopy(known["odh-training-objects"])
    merged["metadata"]["name"] = "odh-training-combined"
    merged["spec"]["resources"] += copy.deepcopy(
        known["odh-training-mpijobs"]["spec"]["resources"])
    return merged


def source_failed(adapter: Component) -> bool:
    """The adapter stopped because a group/version of its source is not served."""
    return adapter.exited() is not None and "failed to collect resource matches" in (
        adapter.log.read_text(errors="replace"))


@pytest.mark.parametrize(("layout", "fail_fast"), [
    pytest.param("split", False, id="split-resilient"),
    pytest.param("split", True, id="split-fail-fast"),
    pytest.param("combined", False, id="combined-resilient"),
    pytest.param("combined", True, id="combined-fail-fast"),
])
def test_an_unserved_kind_stops_only_its_source(
        cluster: LocalCluster, kube: KubeClient, crds: None, bin_dir: Path, namespace: str,
        tmp_path: Path, sink: tuple[RecordSink, Received], layout: str,
        fail_fast: bool) -> None:
    server, received = sink
    known = sources()
    chosen = ([known["odh-training-objects"], known["odh-training-mpijobs"]]
              if layout == "split" else [combined(known)])
    adapters = [start_adapter(cluster, bin_dir, unserved_mpijobs(source), server.url, tmp_path,
                              fail_fast) for source in chosen]
    watching_mpijobs = adapters[-1]
    try:
        # In either mode the adapter asks discovery for every group/version of its source
        # before it watches anything, and stops on the first one not served.
        wait_for(lambda: source_failed(watching_mpijobs), 60, 0.2,
                 "the adapter watching MPIJobs to stop on the unserved version")

        # The adapter sends nothing for objects that exist before its watch starts: create
        # jobs until one arrives (bounded), as a user would keep working.
        def arrived() -> bool:
            kube.create(pytorchjob(namespace), res=resources.PYTORCHJOBS)
            return "PyTorchJob" in received.kinds
        if layout == "split":
            wait_for(arrived, 60, 2.0, "a PyTorchJob event through the other source")
            assert adapters[0].exited() is None, adapters[0].tail()
        else:
            assert not arrived()
            time.sleep(2.0)
            assert received.kinds == [], "an event came through the source that stopped"
    finally:
        for adapter in adapters:
            if adapter.process is not None:
                stop_process_group(adapter.process.pid)
    assert "MPIJob" not in received.kinds
