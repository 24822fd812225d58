"""Changes whose events never reach a function: the ApiServerSource adapter's watch can end
alone (the API server closes a watcher too slow to take its events, and its reflector lists
again, sending nothing for the gap), so no watch reset tells the functions. Their informers'
sweep (:mod:`functions.kube.gaps`) takes a change no event brought, long enough ago, as lost.

Here the loss is made through the real data plane: the status function's Trigger is deleted
while a job is created and its pods start, so the Broker delivers none of those events to it
(the recording Trigger shows the adapter sent them). Once the Trigger is back nothing is sent
again, and with no resync only the sweep can give the job its Running condition."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from devstack import knative
from devstack.cluster import kwok
from devstack.stack import DevStack
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.gaps import SWEEP_HOLD_SECONDS, SWEEP_SECONDS
from tests.chaos.scenario import succeeding_job
from tests.dev.e2e.conftest import NAMESPACE, events_of
from tests.support import condition, wait_for

STATUS_TRIGGER = "odh-training-status"
JOB_LABEL = "training.kubeflow.org/job-name"


def running_job(name: str) -> dict[str, Any]:
    """A PyTorchJob whose pods kwok starts and leaves Running."""
    job = succeeding_job("PyTorchJob", "default")
    job["metadata"]["name"] = name
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        meta = replica["template"]["metadata"]
        meta["labels"].pop(kwok.RESULT_LABEL, None)
        meta.get("annotations", {}).pop(kwok.DELAY_ANNOTATION, None)
    return job


def appended(path: Path, since: int) -> str:
    with path.open("rb") as log:
        log.seek(since)
        return log.read().decode(errors="replace")


def test_a_job_whose_pod_changes_never_reached_the_status_function_gets_running(
        stack: DevStack, kube: KubeClient) -> None:
    knative_stack, cluster = stack.knative, stack.cluster
    assert knative_stack is not None and cluster is not None
    triggers = kube.resource_for("eventing.knative.dev/v1", "Trigger")
    subscriptions = kube.resource_for("messaging.knative.dev/v1", "Subscription")
    current = kube.get(triggers, STATUS_TRIGGER, NAMESPACE)
    assert current is not None
    trigger = {"apiVersion": current["apiVersion"], "kind": "Trigger",
               "metadata": {"name": STATUS_TRIGGER, "namespace": NAMESPACE,
                            "labels": current["metadata"].get("labels") or {}},
               "spec": copy.deepcopy(current["spec"])}
    log = cluster.logs / "function-status.log"
    size = log.stat().st_size
    name = "unsent-changes"   # a name no other test of the stack uses
    assert kube.get(resources.PYTORCHJOBS, name, "default") is None
    recorded = len(knative_stack.events())

    def trigger_subscriptions() -> list[Any]:
        return [s for s in kube.list(subscriptions, NAMESPACE)
                if any(o.get("name") == STATUS_TRIGGER
                       for o in s["metadata"].get("ownerReferences") or [])]

    kube.delete(triggers, STATUS_TRIGGER, NAMESPACE)
    try:
        wait_for(lambda: not trigger_subscriptions(), 60, 0.2,
                 "the status Trigger's Subscription to be gone")
        time.sleep(2)   # the channel's dispatcher drops the subscriber
        job = running_job(name)
        replicas = sum(r.get("replicas", 1) for r in job["spec"]["pytorchReplicaSpecs"].values())
        kube.apply(job, "e2e-user")
        created = time.monotonic()

        def pods_running() -> bool:
            pods = kube.list(resources.PODS, "default", label_selector=f"{JOB_LABEL}={name}")
            return len(pods) == replicas and all(
                (p.get("status") or {}).get("phase") == "Running" for p in pods)

        wait_for(pods_running, 120, 0.5, "the job's pods to be Running")
        time.sleep(2)   # the adapter sends the last pod changes
    finally:
        kube.apply(trigger, "e2e-user")
        knative.wait_until(lambda: knative.not_ready(kube, knative.refs_of([trigger])), 120,
                           "the status Trigger is not Ready again")
    try:
        sent = events_of(knative_stack.events()[recorded:], "PyTorchJob", name, "default")
        assert sent, "the adapter sent the job's events to the Broker"
        now = kube.get(resources.PYTORCHJOBS, name, "default")
        assert now is not None
        assert condition(now, "Running") == {}, "the status function had the job's events"
        wait_for(lambda: condition(kube.get(resources.PYTORCHJOBS, name, "default"),
                                   "Running").get("status") == "True",
                 SWEEP_SECONDS + SWEEP_HOLD_SECONDS + 60, 0.5,
                 "the job to get Running from the status function's sweep")
        print(f"Running {time.monotonic() - created:.1f}s after the create")
        since = appended(log, size)
        assert "changes no event has brought" in since
        assert " resync: " not in since
    finally:
        kube.delete(resources.PYTORCHJOBS, name, "default")
