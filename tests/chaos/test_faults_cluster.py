"""API fault injection: with 20% of the functions' API requests failing (429, 500, 503, 409 on
writes, answers lost after the write, dropped connections), the Trainer and a batch of jobs
still converge when resyncs keep coming, without duplicate pods, and deleting everything
leaves no finalizer behind.

The functions run in process (``create_app("all")``) with their API client on a
:class:`~devstack.faults.FaultInjectingTransport`; the test reads the cluster through
its own fault-free client.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.runner import LocalCluster
from devstack.faults import FaultInjectingTransport, FaultPlan
from functions.kube import resources
from functions.kube.client import KubeClient, RequestHook
from functions.trainer import controller as trainer_controller
from tests.chaos.replay import FunctionUnderTest, environment, trainer_environment
from tests.chaos.scenario import (
    JOB_KINDS,
    apply_all,
    duplicate_pods,
    succeeding_job,
    trainer_sample,
)
from tests.support import REPO
from tests.trainer import harness

pytestmark = pytest.mark.cluster

FAULT_RATE = 0.2
JOBS_PER_KIND = 2
JOB_RESOURCES = (resources.PYTORCHJOBS, resources.TFJOBS, resources.MPIJOBS)


def faulty_clients(cluster: LocalCluster, plan: FaultPlan,
                   transports: list[FaultInjectingTransport]
                   ) -> Callable[[RequestHook], KubeClient]:
    def factory(hook: RequestHook) -> KubeClient:
        transport = FaultInjectingTransport(cluster.client().transport, plan)
        transports.append(transport)
        return KubeClient(transport, on_request=hook)

    return factory


def batch(namespace: str) -> list[dict[str, Any]]:
    jobs = []
    for kind in JOB_KINDS:
        for index in range(JOBS_PER_KIND):
            job = succeeding_job(kind, namespace)
            job["metadata"]["name"] = f"{job['metadata']['name']}-{index}"
            jobs.append(job)
    return jobs


def condition(obj: dict[str, Any] | None, kind: str) -> str:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return ""


def drive(function: FunctionUnderTest, done: Callable[[], bool], timeout: float,
          what: str) -> int:
    """Resync (through the faults) until ``done()``; returns the number of resyncs."""
    deadline = time.monotonic() + timeout
    rounds = 0
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"no convergence after {rounds} resyncs: {what}")
        function.resync(attempts=1)
        rounds += 1
        time.sleep(0.5)
    return rounds


@pytest.fixture
def trainer_ready_env(kube: KubeClient, crds: None, bin_dir: Path, upstream_manifests: Path,
                      tmp_path: Path) -> Any:
    apply_objects(kube, load_documents([bin_dir / "crds" / "jobset",
                                        REPO / "tests" / "trainer" / "data" /
                                        "podmonitor-crd.yaml"]))
    with environment(trainer_environment(bin_dir, tmp_path / "work", upstream_manifests)):
        yield
    trainer_controller.cleanup(harness.context(kube, "gc"))


def test_trainer_and_jobs_converge_at_twenty_percent_api_faults(
        cluster: LocalCluster, kube: KubeClient, namespace: str,
        trainer_ready_env: None) -> None:
    transports: list[FaultInjectingTransport] = []
    function = FunctionUnderTest(faulty_clients(cluster, FaultPlan(rate=FAULT_RATE, seed=20),
                                                transports))
    trainer = trainer_sample()
    trainer["spec"]["appNamespace"] = namespace
    jobs = batch(namespace)
    apply_all(kube, [trainer, *jobs])

    def converged() -> bool:
        listed = [j for res in JOB_RESOURCES for j in kube.list(res, namespace)]
        return (len(listed) == len(jobs)
                and all(condition(j, "Succeeded") == "True" for j in listed)
                and condition(harness.trainer(kube), "Ready") == "True")

    try:
        rounds = drive(function, converged, 240, "jobs Succeeded and the Trainer Ready")
        assert duplicate_pods(kube, namespace) == {}
        drive(function, lambda: not [
            p for p in kube.list(resources.PODS, namespace)
            if (p.get("status") or {}).get("phase") == "Running"
            and p["metadata"]["labels"].get("training.kubeflow.org/job-name", "").startswith(
                "pi-")], 60, "cleanPodPolicy Running removes the MPI workers")

        kube.delete(resources.TRAINERS, trainer["metadata"]["name"])
        for job in jobs:
            kube.delete(kube.resource_for(job["apiVersion"], job["kind"]),
                        job["metadata"]["name"], namespace)
        drive(function, lambda: harness.trainer(kube) is None and not any(
            kube.list(res, namespace) for res in JOB_RESOURCES), 120,
            "the Trainer's finalizer removed and the jobs gone")
    finally:
        function.close()
        for transport in transports:
            transport.enabled = False
    by_kind: Counter[str] = Counter()
    for transport in transports:
        by_kind.update(transport.injected)
    injected = sum(by_kind.values())
    total = injected + sum(t.passed for t in transports)
    print(f"{rounds} resyncs to converge; {injected} of {total} API requests failed "
          f"({dict(by_kind)})")
    assert set(by_kind) == {"throttle", "error", "unavailable", "conflict", "timeout", "reset"}
    assert total > 100
    assert 0.15 < injected / total < 0.25
