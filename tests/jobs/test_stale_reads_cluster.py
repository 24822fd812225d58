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

Obj = dict[str, Any]


class StaleReader:
    """Reads like a watch cache that has not seen the pods change since ``pods`` was taken."""

    def __init__(self, kube: KubeClient, pods: list[Obj]) -> None:
        self.kube = kube
        self.pods = pods

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        return self.kube.get(res, name, namespace)

    def list(self, res: Resource, namespace: str | None = None, *,
             label_selector: str | None = None) -> list[Obj]:
        if res == resources.PODS:
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
    stale = Context(kube, driver.recorder, "status", reader=StaleReader(kube, pending))
    driver.controller.handlers["status"](stale, driver.key)
    assert driver.status() == before
