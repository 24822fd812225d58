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

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.recording import RecordedRequest
from devstack.stack import DevStack
from functions.core.event_sources import SOURCE_NAME_LABEL
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.support import REPO

RECORDINGS = REPO / "tests" / "data" / "recordings"
NAMESPACE = "opendatahub"
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
                   record=recording, recording=True, source_filters=True)
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
