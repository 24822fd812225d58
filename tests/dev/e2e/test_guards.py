"""The guards (docs/training-jobs.md, "Guards") end to end, as a user drives them, through
the real Knative Eventing with the resync off (``conftest.py``): every step comes from the
adapters' events and the functions' own timers (the due moments of a pending timeout and a
TTL).

* a PyTorchJob an impossible nodeSelector holds Pending fails by its pending timeout, its
  never-run pods deleted; another is suspended instead (handed back to its queue);
* one failed pod restarts a whole PyTorchJob, its pods made again; a replica type past its
  restart limit fails the job;
* finished TrainJobs go by TTL and by their namespace's history limit, on the events of
  config/components/trainjob-hygiene; the TrainJob CRD is the upstream one, applied
  directly (the Trainer's own controller does not run here: the test writes a TrainJob's
  finish as it would).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devstack import knative
from devstack.cluster import kwok
from devstack.cluster.manifests import apply_objects, load_documents
from devstack.stack import DevStack
from functions.jobs import trainjobs
from functions.jobs.core import guards as g
from functions.jobs.core import hygiene as h
from functions.jobs.core.planning import RESTARTS_ANNOTATION
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.dev.e2e.conftest import events_of
from tests.dev.e2e.test_unsent_changes import JOB_LABEL, running_job
from tests.support import REPO, condition, wait_for

Obj = dict[str, Any]
NS = "default"   # a new namespace would restart the all-namespaces adapters (Namespace churn)
NOWHERE = {"example.com/no-such-node": "true"}


def guarded(name: str, annotations: dict[str, str], *, nowhere: bool = False) -> Obj:
    job = running_job(name)
    job["metadata"]["annotations"] = annotations
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        if nowhere:
            replica["template"]["spec"]["nodeSelector"] = NOWHERE
    return job


def get(kube: KubeClient, name: str) -> Obj:
    return kube.get(resources.PYTORCHJOBS, name, NS) or {}


def pods(kube: KubeClient, name: str) -> list[Obj]:
    return [p for p in kube.list(resources.PODS, NS, label_selector=f"{JOB_LABEL}={name}")
            if not p["metadata"].get("deletionTimestamp")]


def job_events(kube: KubeClient, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in kube.list(resources.EVENTS, NS)
            if e["involvedObject"].get("name") == name
            and e["involvedObject"].get("kind") == "PyTorchJob"]


@pytest.fixture
def job_name(kube: KubeClient) -> Iterator[str]:
    name = f"guard-{uuid.uuid4().hex[:6]}"
    yield name
    kube.delete(resources.PYTORCHJOBS, name, NS)


def test_a_job_held_pending_fails_by_its_pending_timeout(stack: DevStack, kube: KubeClient,
                                                         job_name: str) -> None:
    kube.apply(guarded(job_name, {g.PENDING_TIMEOUT: "5s"}, nowhere=True), "e2e-user")
    wait_for(lambda: len(pods(kube, job_name)) == 2, 60, 0.5, "the job's pods")
    failed = wait_for(lambda: condition(get(kube, job_name), "Failed") or None, 90, 0.5,
                      "the pending timeout to fail the job")
    assert failed["reason"] == "PyTorchJobPendingTimeout"
    assert "waited longer than its pending timeout of 5s" in failed["message"]
    wait_for(lambda: not pods(kube, job_name), 60, 0.5, "its never-run pods deleted")
    assert ("PyTorchJobPendingTimeout", failed["message"]) in job_events(kube, job_name)


def test_a_job_held_pending_is_handed_back_to_its_queue(stack: DevStack, kube: KubeClient,
                                                        job_name: str) -> None:
    kube.apply(guarded(job_name, {g.PENDING_TIMEOUT: "5s", g.PENDING_TIMEOUT_ACTION: "Suspend"},
                       nowhere=True), "e2e-user")
    wait_for(lambda: get(kube, job_name).get("spec", {}).get("runPolicy", {}).get("suspend"),
             90, 0.5, "the pending timeout to suspend the job")
    wait_for(lambda: condition(get(kube, job_name), "Suspended").get("status") == "True"
             and not pods(kube, job_name), 60, 0.5, "Suspended, its pods gone")
    assert condition(get(kube, job_name), "Failed") == {}
    assert any(r == "PendingTimeout" and "handed back to its queue" in m
               for r, m in job_events(kube, job_name))


def _fail(kube: KubeClient, pod: str) -> None:
    kube.patch(resources.PODS, pod, {"metadata": {
        "labels": {kwok.RESULT_LABEL: "fail"},
        "annotations": {kwok.DELAY_ANNOTATION: "100ms", kwok.EXIT_CODE_ANNOTATION: "137"}}}, NS)


def test_one_failed_pod_restarts_the_whole_job(stack: DevStack, kube: KubeClient,
                                               job_name: str) -> None:
    kube.apply(guarded(job_name, {g.RESTART_SCOPE: "Job"}), "e2e-user")

    def running() -> list[Obj] | None:
        found = pods(kube, job_name)
        return found if len(found) == 2 and all(
            p["status"].get("phase") == "Running" for p in found) else None

    before = {p["metadata"]["uid"] for p in wait_for(running, 90, 0.5, "the pods Running")}
    wait_for(lambda: condition(get(kube, job_name), "Running").get("status") == "True", 60,
             0.5, "the job Running")
    _fail(kube, f"{job_name}-worker-0")
    wait_for(lambda: (found := running()) is not None
             and not ({p["metadata"]["uid"] for p in found} & before)
             and condition(get(kube, job_name), "Running").get("status") == "True", 120,
             0.5, "every pod made again and the job Running")
    assert get(kube, job_name)["metadata"]["annotations"][RESTARTS_ANNOTATION] == "1"
    [message] = [m for r, m in job_events(kube, job_name) if r == "WholeJobRestart"]
    assert f"{job_name}-worker-0 failed (exit code 137)" in message


def test_a_replica_type_past_its_restart_limit_fails_the_job(stack: DevStack,
                                                             kube: KubeClient,
                                                             job_name: str) -> None:
    kube.apply(guarded(job_name, {g.RESTART_LIMITS: "Worker=0"}), "e2e-user")
    wait_for(lambda: any(p["status"].get("phase") == "Running"
                         for p in pods(kube, job_name) if "worker" in p["metadata"]["name"]),
             90, 0.5, "the worker Running")
    _fail(kube, f"{job_name}-worker-0")
    failed = wait_for(lambda: condition(get(kube, job_name), "Failed") or None, 90, 0.5,
                      "the restart limit to fail the job")
    assert failed["reason"] == "PyTorchJobRestartLimitExceeded"


# -- TrainJob hygiene ---------------------------------------------------------------------------

HYGIENE = REPO / "config" / "components" / "trainjob-hygiene"
COMPONENT = [HYGIENE / "apiserversource.yaml", HYGIENE / "trigger.yaml",
             *sorted((REPO / "config" / "components" / "trainjobs").glob("*.yaml"))]


@pytest.fixture
def trainjob_events(stack: DevStack, kube: KubeClient,
                    upstream_manifests: Path) -> Iterator[None]:
    """The TrainJob CRD (the upstream one, applied directly) and
    config/components/trainjob-hygiene, applied as a user would; gone again afterwards (the
    other tests count the stack's sources)."""
    crd = load_documents([upstream_manifests / "base" / "crds" /
                          "trainer.kubeflow.org_trainjobs.yaml"])
    component = load_documents(COMPONENT)
    apply_objects(kube, crd)
    apply_objects(kube, component)
    watched = [o for o in component if o["kind"] in ("ApiServerSource", "Trigger")]
    try:
        knative.wait_until(lambda: knative.not_ready(kube, knative.refs_of(watched)), 180,
                           "the TrainJob sources and the gc Trigger not Ready")
        assert stack.knative is not None
        probes = iter(range(1000))

        def probe_sent() -> bool:
            """A TrainJob's addition reached the Broker: the new adapter's watch is up."""
            name = f"probe-{next(probes)}"
            before = len(stack.knative.events()) if stack.knative else 0
            kube.create(trainjob(name), res=resources.TRAINJOBS)
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                recorded = stack.knative.events()[before:] if stack.knative else []
                if events_of(recorded, "TrainJob", name, NS):
                    return True
                time.sleep(0.2)
            return False

        wait_for(probe_sent, 120, 0.1, "the TrainJobs' adapter to send")
        yield
    finally:
        for obj in reversed(component):
            kube.delete(kube.resource_for(obj["apiVersion"], obj["kind"]),
                        obj["metadata"]["name"], obj["metadata"].get("namespace"))
        kube.delete(resources.CRDS, crd[0]["metadata"]["name"])
        kube.patch(resources.NAMESPACES, NS,
                   {"metadata": {"annotations": {h.HISTORY_LIMIT: None}}})


def trainjob(name: str, **annotations: str) -> Obj:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": NS, "annotations": annotations},
            "spec": {"runtimeRef": {"name": "torch-distributed"}}}


def finish(kube: KubeClient, name: str) -> None:
    """What the Trainer's controller writes as the TrainJob's JobSet completes."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.patch(resources.TRAINJOBS, name, {"status": {"conditions": [
        {"type": "Complete", "status": "True", "reason": "JobSetCompleted",
         "message": "done", "lastTransitionTime": now}]}}, NS, subresource="status")


def test_finished_trainjobs_go_by_ttl_and_history(stack: DevStack, kube: KubeClient,
                                                  trainjob_events: None) -> None:
    kube.create(trainjob("short-lived", **{h.TTL: "5s"}), res=resources.TRAINJOBS)
    finish(kube, "short-lived")
    finished = time.monotonic()
    wait_for(lambda: kube.get(resources.TRAINJOBS, "short-lived", NS) is None, 60, 0.5,
             "the TTL to delete the TrainJob")
    assert time.monotonic() - finished >= 3.5, "not before its TTL"

    kube.patch(resources.NAMESPACES, NS, {"metadata": {"annotations": {h.HISTORY_LIMIT: "1"}}})
    time.sleep(trainjobs.CONFIG_SECONDS + 1)   # the gc function reads a namespace this often
    for name in ("older", "newer"):
        kube.create(trainjob(name), res=resources.TRAINJOBS)
        finish(kube, name)
        time.sleep(1.5)      # conditions carry whole seconds: one finish per second
    wait_for(lambda: kube.get(resources.TRAINJOBS, "older", NS) is None, 60, 0.5,
             "the history limit to delete the older TrainJob")
    assert kube.get(resources.TRAINJOBS, "newer", NS) is not None
    reasons = {(e["involvedObject"]["name"], e["reason"])
               for e in kube.list(resources.EVENTS, NS)
               if e["involvedObject"].get("kind") == "TrainJob"}
    assert {("short-lived", "TTLExpired"), ("older", "HistoryLimitExceeded")} <= reasons
