"""An ApiServerSource adapter that stops misses what changes before its successor's watches
start; the functions catch up with a resync once the successor has settled
(:mod:`functions.core.event_sources`), with no PingSource."""

from __future__ import annotations

import time

from devstack.stack import DevStack
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.chaos.scenario import succeeding_job
from tests.dev.e2e.conftest import NAMESPACE, OBJECTS_ADAPTER_PODS, attributes, events_of
from tests.support import condition, wait_for


def test_a_change_while_an_adapter_restarts_converges_without_the_resync(
        stack: DevStack, kube: KubeClient) -> None:
    """The adapter that watches every namespace stops (its pod deleted) and its successor
    is slow to start; a job created in between is in no event (a restarted adapter's first
    list sends none). The adapter pods' own source reports the delete, and once the successor
    has settled each function resyncs: the job runs to its end with no PingSource."""
    knative = stack.knative
    assert knative is not None and knative.kubelet is not None
    selector = OBJECTS_ADAPTER_PODS
    wait_for(lambda: len(kube.list(resources.PODS, NAMESPACE, label_selector=selector)) == 1,
             60, 0.2, "one adapter pod of odh-training-objects")  # no rollout under way
    [old] = kube.list(resources.PODS, NAMESPACE, label_selector=selector)
    [local] = [p for p in knative.kubelet.snapshot() if p.uid == old["metadata"]["uid"]]
    job = succeeding_job("PyTorchJob", "default")
    name = job["metadata"]["name"]
    with knative.kubelet.holding_new_pods():
        kube.delete(resources.PODS, old["metadata"]["name"], NAMESPACE)
        wait_for(lambda: local.process is None or local.process.poll() is not None, 30, 0.1,
                 "the old adapter to stop")
        kube.apply(job, "e2e-user")
        started = time.monotonic()
        time.sleep(2)
        assert events_of(knative.events(), "PyTorchJob", name, "default") == [], \
            "the job's create was not in the gap"
    wait_for(lambda: condition(kube.get(resources.PYTORCHJOBS, name, "default"), "Succeeded")
             .get("status") == "True", 90, 0.5, "the job created in the gap to succeed")
    print(f"job created in the adapter's gap Succeeded {time.monotonic() - started:.1f}s later")
    stopped = [e for e in map(attributes, knative.events())
               if e.get("component") == "event-source" and e.get("name") == old["metadata"]["name"]
               and e.get("type") == "dev.knative.apiserver.resource.delete"]
    assert stopped, "the adapter pod's delete event through the Broker"
    adds = [e for e in events_of(knative.events(), "PyTorchJob", name, "default")
            if e.get("type") == "dev.knative.apiserver.resource.add"]
    assert adds == []  # what ran it was the resync, not a late event
    assert stack.cluster is not None
    log = (stack.cluster.logs / "function-reconcile.log").read_text()
    assert "reconcile resync: an adapter pod of odh-training-objects was deleted" in log
