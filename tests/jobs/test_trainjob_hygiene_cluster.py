"""The gc function's TrainJob hygiene on the local cluster, against TrainJobs of the upstream
TrainJob CRD applied directly (no Trainer controller: the test writes their status as it
would), the pass driven as events or the resync would drive it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.manifests import apply_objects, load_documents
from functions.core.keys import ObjectKey
from functions.jobs import trainjobs
from functions.jobs.core import hygiene as h
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context
from functions.trainer.core.api import CRD_FIELD_MANAGER

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def trainjob_crd(kube: KubeClient, crds: None, upstream_manifests: Path) -> None:
    """The upstream TrainJob CRD under the field manager the Trainer applies it with: the
    session cluster is shared, and the Trainer's tests check who manages its CRDs."""
    apply_objects(kube, load_documents(
        [upstream_manifests / "base" / "crds" / "trainer.kubeflow.org_trainjobs.yaml"]),
        CRD_FIELD_MANAGER)


@pytest.fixture(autouse=True)
def _fresh_reads() -> Iterator[None]:
    trainjobs.RECENT.clear()
    yield
    trainjobs.RECENT.clear()


def create(kube: KubeClient, name: str, namespace: str, **annotations: str) -> Obj:
    return kube.create({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                        "metadata": {"name": name, "namespace": namespace,
                                     "annotations": annotations},
                        "spec": {"runtimeRef": {"name": "torch-distributed"}}},
                       res=resources.TRAINJOBS)


def finish(kube: KubeClient, name: str, namespace: str, condition: str = "Complete") -> None:
    """What the Trainer controller writes when the TrainJob's JobSet ends."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.patch(resources.TRAINJOBS, name, {"status": {"conditions": [
        {"type": condition, "status": "True", "reason": "JobSetFinished",
         "message": "done", "lastTransitionTime": now}]}}, namespace, subresource="status")


def run(kube: KubeClient, name: str, namespace: str) -> Any:
    ctx = Context(kube, EventRecorder(kube, "training-trainjobs"), "gc")
    return trainjobs.hygiene_pass(ctx, ObjectKey("trainer.kubeflow.org/v1alpha1", "TrainJob",
                                                  namespace, name))


def names(kube: KubeClient, namespace: str) -> list[str]:
    return sorted(t["metadata"]["name"] for t in kube.list(resources.TRAINJOBS, namespace))


def events(kube: KubeClient, namespace: str) -> list[tuple[str, str, str]]:
    return sorted((e["involvedObject"]["name"], e["reason"], e["message"])
                  for e in kube.list(resources.EVENTS, namespace))


def test_a_finished_trainjob_goes_after_its_ttl(kube: KubeClient, trainjob_crd: None,
                                                namespace: str) -> None:
    create(kube, "short", namespace, **{h.TTL: "3s"})
    assert run(kube, "short", namespace) is None, "a running TrainJob has no TTL yet"
    finish(kube, "short", namespace)
    result = run(kube, "short", namespace)
    assert result is not None and 0.5 <= result.requeue_after <= 3.0
    recorded = (kube.get(resources.TRAINJOBS, "short", namespace) or {})["metadata"][
        "annotations"][h.TTL_DEADLINE]
    assert names(kube, namespace) == ["short"]
    time.sleep(result.requeue_after)
    while datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") < recorded:
        time.sleep(0.2)
    assert run(kube, "short", namespace) is None
    assert names(kube, namespace) == []
    [(name, reason, message)] = events(kube, namespace)
    assert (name, reason) == ("short", "TTLExpired")
    assert message.endswith("(training.opendatahub.io/ttl-after-finished 3s, the TrainJob's "
                            "annotation)")


def test_a_namespace_keeps_its_newest_finished_trainjobs(kube: KubeClient, trainjob_crd: None,
                                                         namespace: str) -> None:
    kube.patch(resources.NAMESPACES, namespace,
               {"metadata": {"annotations": {h.HISTORY_LIMIT: "2"}}})
    for name in ("first", "second", "third"):
        create(kube, name, namespace)
        finish(kube, name, namespace, "Failed" if name == "second" else "Complete")
        time.sleep(1.1)      # conditions carry whole seconds: one finish per second
    create(kube, "running", namespace)
    assert run(kube, "third", namespace) is None
    assert names(kube, namespace) == ["running", "second", "third"]
    assert [(n, r) for n, r, _ in events(kube, namespace)] == [
        ("first", "HistoryLimitExceeded")]
    # the namespace's limit is lowered: the next finish keeps only the newest
    kube.patch(resources.NAMESPACES, namespace,
               {"metadata": {"annotations": {h.HISTORY_LIMIT: "1"}}})
    trainjobs.RECENT.clear()
    finish(kube, "running", namespace)
    time.sleep(LISTING_PAUSE)
    run(kube, "running", namespace)
    assert names(kube, namespace) == ["running"]


LISTING_PAUSE = trainjobs.LISTING_MARGIN_SECONDS + 0.1


def test_the_trainers_default_applies_to_every_namespace(kube: KubeClient, trainjob_crd: None,
                                                          namespace: str) -> None:
    trainer = {"apiVersion": "components.platform.opendatahub.io/v1alpha1", "kind": "Trainer",
               "metadata": {"name": "default-trainer"},
               "spec": {"managementState": "Removed",
                        "finishedTrainJobs": {"ttlSecondsAfterFinished": 0}}}
    kube.create(trainer, res=resources.TRAINERS)
    try:
        create(kube, "done", namespace)
        create(kube, "kept", namespace, **{h.TTL: "1h"})
        for name in ("done", "kept"):
            finish(kube, name, namespace)
            run(kube, name, namespace)
        assert names(kube, namespace) == ["kept"]
    finally:
        kube.delete(resources.TRAINERS, "default-trainer")
