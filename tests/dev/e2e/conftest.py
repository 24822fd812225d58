"""The stack every end-to-end test shares: ``python -m devstack dev``'s, with the real Knative
Eventing (controllers, webhook, Broker ingress and filter, in-memory channel, the
ApiServerSource adapters the controller deploys) in front of the functions, which run under
gunicorn with their own ServiceAccount tokens. The resync is off (no PingSource), so every
step is driven by the adapter's events through the Broker.

A recording Trigger (no filter) on the Broker keeps every event the Broker accepted, which is
how each test proves where the events that drove it came from. Set ``UPDATE_RECORDINGS=1`` to
keep that stream under ``tests/data/recordings/``.
"""

from __future__ import annotations

import copy
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack import knative
from devstack.recording import RecordedRequest
from devstack.stack import DevStack
from functions.core.event_sources import SOURCE_NAME_LABEL
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.runtime.lifecycle import PLATFORM_BROKER_ENV
from tests.support import REPO, wait_for

RECORDINGS = REPO / "tests" / "data" / "recordings"
NAMESPACE = "opendatahub"
# The lifecycle goes to the platform's Broker too (docs/lifecycle.md), the Trainer's with it.
PLATFORM_BROKER = f"{NAMESPACE}/odh-training"
# the pods of the adapter that watches every namespace
OBJECTS_ADAPTER_PODS = f"{SOURCE_NAME_LABEL}=odh-training-objects"


def attributes(event: RecordedRequest) -> dict[str, str]:
    """The CloudEvent attributes of a binary-mode request (``ce-`` headers, lower-cased)."""
    return {k.lower().removeprefix("ce-"): v for k, v in event.headers.items()
            if k.lower().startswith("ce-")}


def events_of(events: list[RecordedRequest], kind: str, name: str,
              namespace: str) -> list[dict[str, str]]:
    """The attributes of the recorded events about one object."""
    return [e for e in map(attributes, events)
            if e.get("kind") == kind and e.get("name") == name and e.get("namespace") == namespace]


@pytest.fixture(scope="package")
def stack(bin_dir: Path, upstream_manifests: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    recording = tmp_path_factory.mktemp("recording") / "e2e-samples.jsonl"
    dev = DevStack(bin_dir, trainer_manifests=upstream_manifests, resync_interval=0,
                   record=recording, recording=True, source_filters=True,
                   function_env={PLATFORM_BROKER_ENV: PLATFORM_BROKER})
    started = time.monotonic()
    dev.start()
    print(f"dev stack ready in {time.monotonic() - started:.1f}s: {dev.timings}")
    try:
        yield dev
    except BaseException:
        assert dev.cluster is not None
        print(dev.cluster.logs_summary(60))
        raise
    finally:
        if dev.cluster is not None:
            for component in dev.processes:
                print(f"--- {component.name} ---\n{component.tail(40)}")
        dev.stop()
        if os.environ.get("UPDATE_RECORDINGS") and recording.exists():
            RECORDINGS.mkdir(parents=True, exist_ok=True)
            shutil.copy(recording, RECORDINGS / recording.name)


@pytest.fixture(scope="package")
def kube(stack: DevStack) -> KubeClient:
    assert stack.cluster is not None
    return stack.cluster.client()


def objects_adapter(kube: KubeClient) -> dict[str, Any]:
    """The receive adapter Deployment of the ApiServerSource that watches every namespace."""
    [found] = [d for d in kube.list(resources.DEPLOYMENTS, NAMESPACE)
               if any(o.get("kind") == "ApiServerSource" and o.get("name") == "odh-training-objects"
                      for o in d["metadata"].get("ownerReferences") or [])]
    return found


def create_namespaces(stack: DevStack, kube: KubeClient, names: list[str]) -> None:
    """Create ``names`` together and return once the event path delivers from them. Each
    namespace created makes the ApiServerSource controller rewrite the all-namespaces
    adapter's Deployment, and the restarted adapter misses what changes before its watches
    start (a gap the functions close with a resync,
    ``test_a_change_while_an_adapter_restarts_...``): tests that count events start once that
    rollout has settled and the new adapter delivers (a probe Service in the last of
    ``names``, made and deleted until its event is recorded)."""
    assert stack.knative is not None
    generation = objects_adapter(kube)["metadata"]["generation"]
    started = time.monotonic()
    for name in names:
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                   "e2e-user")
    wait_for(lambda: objects_adapter(kube)["metadata"]["generation"] > generation, 30, 0.2,
             "the ApiServerSource controller to rewrite the adapter's Deployment")
    print(f"adapter Deployment rewritten {time.monotonic() - started:.1f}s after the namespaces")
    wait_for(lambda: not [m for name in names
                          for m in knative.sources_not_watching(kube, name, NAMESPACE)],
             60, 0.5, "the sources to track every new namespace and their adapters' rollout")
    probe_namespace = names[-1]
    probe = {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "e2e-probe", "namespace": probe_namespace,
                          "labels": {"training.kubeflow.org/job-name": "e2e-probe"}},
             "spec": {"clusterIP": "None", "selector": {"probe": "none"}}}
    eventing = stack.knative

    def probe_delivered() -> bool:
        kube.apply(copy.deepcopy(probe), "e2e-user")
        kube.delete(resources.SERVICES, "e2e-probe", probe_namespace)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if any(e.get("name") == "e2e-probe" and e.get("namespace") == probe_namespace
                   for e in map(attributes, eventing.events())):
                return True
            time.sleep(0.1)
        return False

    wait_for(probe_delivered, 60, 0.1, "the restarted adapter to deliver")
    print(f"adapter delivering again {time.monotonic() - started:.1f}s after the namespaces")
