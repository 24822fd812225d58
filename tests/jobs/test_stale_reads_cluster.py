"""Handlers read through a cache that may lag the API server; a stale read must never move a
job's status backwards (functions/jobs/controller.py ``status`` confirms such a move on fresh
state before writing)."""

from __future__ import annotations

from typing import Any

from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.resources import Resource
from functions.runtime.registry import Context
from tests.jobs.driver import JobDriver, for_test, sample
from tests.support import wait_for

Obj = dict[str, Any]


class StaleReader:
    """Reads like a watch cache that has not seen the latest changes: ``job`` as the job (by
    kind and name) and ``pods`` as the pods, when given; everything else as it is."""

    def __init__(self, kube: KubeClient, *, job: Obj | None = None,
                 pods: list[Obj] | None = None) -> None:
        self.kube, self.job, self.pods = kube, job, pods

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        if self.job is not None and (res.kind, name) == (self.job["kind"],
                                                         self.job["metadata"]["name"]):
            return self.job
        return self.kube.get(res, name, namespace)

    def list(self, res: Resource, namespace: str | None = None, *,
             label_selector: str | None = None) -> list[Obj]:
        if self.pods is not None and res == resources.PODS:
            return self.pods
        return self.kube.list(res, namespace, label_selector=label_selector)


def test_a_stale_read_of_the_pods_does_not_roll_the_status_back(
        kube: KubeClient, crds: None, namespace: str) -> None:
    job = for_test(sample("PyTorchJob"), "stale", namespace)
    driver = JobDriver(kube, job)
    driver.create(job)
    def settled() -> bool:
        replicas = (driver.status().get("replicaStatuses") or {}).values()
        return bool(driver.condition("Running") and driver.all_running(2) and replicas
                    and all(rs.get("active") for rs in replicas))

    driver.run_until(settled, what="Running with every replica active")
    before = driver.status()
    # The pods as a cache that missed their start would still have them.
    pending = [{**pod, "status": {**pod["status"], "phase": "Pending"}}
               for pod in driver.pods()]
    stale = Context(kube, driver.recorder, "status", reader=StaleReader(kube, pods=pending))
    driver.controller.handlers["status"](stale, driver.key)
    assert driver.status() == before


def test_a_stale_read_of_a_finished_job_does_not_replace_its_pods(
        kube: KubeClient, crds: None, namespace: str) -> None:
    job = for_test(sample("PyTorchJob"), "stale-end", namespace)
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.condition("Running") and driver.all_running(2),
                     what="Running")
    running = driver.get()
    assert running is not None
    # The job ends (as its status function would write it) and a worker pod goes away; a
    # replica whose cache still has the running job then gets the pod's delete event.
    conditions = [c for c in driver.status()["conditions"] if c["type"] != "Running"]
    conditions += [{"type": "Running", "status": "False", "reason": "PyTorchJobSucceeded"},
                   {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded",
                    "message": "finished", "lastUpdateTime": "2026-12-01T00:00:00Z",
                    "lastTransitionTime": "2026-12-01T00:00:00Z"}]
    kube.apply_status({"apiVersion": running["apiVersion"], "kind": running["kind"],
                       "metadata": {"name": driver.name, "namespace": namespace},
                       "status": {"conditions": conditions,
                                  "completionTime": "2026-12-01T00:00:00Z"}},
                      "test-status", res=driver.res)
    worker = next(p for p in driver.pods() if "worker" in p["metadata"]["name"])
    kube.delete(resources.PODS, worker["metadata"]["name"], namespace)
    wait_for(lambda: driver.pod(worker["metadata"]["name"]) is None, 30, 0.2, "worker gone")
    stale = Context(kube, driver.recorder, "reconcile", reader=StaleReader(kube, job=running))
    driver.controller.handlers["reconcile"](stale, driver.key)
    assert driver.pod(worker["metadata"]["name"]) is None
