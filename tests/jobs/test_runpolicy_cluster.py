"""runPolicy on the local cluster: suspend/resume, managedBy, TTL, activeDeadlineSeconds."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from functions.jobs.controller import RESOURCES
from functions.kube.client import KubeClient
from tests.jobs.driver import JobDriver, for_test, sample

pytestmark = pytest.mark.cluster


def pytorch(namespace: str, name: str, **run_policy: object) -> dict[str, object]:
    job = for_test(sample("PyTorchJob"), name, namespace)
    job["spec"]["runPolicy"].update(run_policy)
    return job


def test_suspend_and_resume(kube: KubeClient, crds: None, namespace: str) -> None:
    job = pytorch(namespace, "sus")
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.condition("Running"), what="Running")
    started = driver.status()["startTime"]

    kube.patch(RESOURCES["PyTorchJob"], "sus", {"spec": {"runPolicy": {"suspend": True}}},
               namespace)
    driver.run_until(lambda: not driver.live_pods() and not driver.services()
                     and driver.condition("Suspended"), what="suspended")
    assert driver.conditions() == [
        ("Created", "True", "PyTorchJobCreated"), ("Running", "False", "PyTorchJobSuspended"),
        ("Suspended", "True", "PyTorchJobSuspended")]
    status = driver.status()
    assert status["startTime"] == started
    assert all(s.get("active", 0) == 0 for s in status["replicaStatuses"].values())

    time.sleep(1.1)
    kube.patch(RESOURCES["PyTorchJob"], "sus", {"spec": {"runPolicy": {"suspend": False}}},
               namespace)
    driver.run_until(lambda: driver.condition("Running") and len(driver.live_pods()) == 2,
                     what="resumed and running")
    assert driver.conditions() == [
        ("Created", "True", "PyTorchJobCreated"), ("Suspended", "False", "PyTorchJobResumed"),
        ("Running", "True", "PyTorchJobRunning")]
    assert driver.status()["startTime"] > started
    assert len(driver.services()) == 2


def test_created_suspended_has_no_pods_and_no_start_time(kube: KubeClient, crds: None,
                                                         namespace: str) -> None:
    job = pytorch(namespace, "held", suspend=True)
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.condition("Suspended"), what="Suspended")
    for _ in range(3):
        driver.step()
    assert driver.pods() == []
    assert "startTime" not in driver.status()
    assert driver.conditions() == [("Created", "True", "PyTorchJobCreated"),
                                   ("Suspended", "True", "PyTorchJobSuspended")]


@pytest.mark.parametrize("kind", ["PyTorchJob", "TFJob", "MXJob", "MPIJob"])
def test_multikueue_managed_job_is_left_alone(kube: KubeClient, crds: None, namespace: str,
                                              kind: str) -> None:
    job = for_test(sample(kind), "remote", namespace)
    job["spec"].setdefault("runPolicy", {})["managedBy"] = "kueue.x-k8s.io/multikueue"
    driver = JobDriver(kube, job)
    driver.create(job)
    before = kube.request_count("create", "apply", "patch", "delete")
    for _ in range(3):
        driver.step()
    assert kube.request_count("create", "apply", "patch", "delete") == before
    assert driver.pods() == []
    assert driver.status() == {}


def test_ttl_deletes_finished_job(kube: KubeClient, crds: None, namespace: str) -> None:
    job = pytorch(namespace, "ttl", ttlSecondsAfterFinished=2)
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.all_running(2), what="pods running")
    driver.finish_pod("ttl-master-0", "succeed")
    driver.run_until(lambda: driver.condition("Succeeded"), what="Succeeded")
    completed = datetime.fromisoformat(driver.status()["completionTime"].replace("Z", "+00:00"))
    driver.run_until(lambda: driver.get() is None, timeout=20, what="job deleted by TTL")
    # Not before the TTL has passed since the recorded completion, and within a few seconds.
    assert 2.0 <= (datetime.now(UTC) - completed).total_seconds() <= 10.0


def test_active_deadline_fails_running_job(kube: KubeClient, crds: None, namespace: str) -> None:
    job = pytorch(namespace, "ads", activeDeadlineSeconds=3, cleanPodPolicy="All")
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.condition("Running"), what="Running")
    driver.run_until(lambda: driver.condition("Failed"), timeout=20, what="deadline")
    failed = driver.condition("Failed")
    assert failed is not None
    assert failed["reason"] == "PyTorchJobFailed"
    assert failed["message"] == (
        "Job ads has failed because it was active longer than specified deadline")
    status = driver.status()
    start = datetime.fromisoformat(status["startTime"].replace("Z", "+00:00"))
    done = datetime.fromisoformat(status["completionTime"].replace("Z", "+00:00"))
    assert 3 <= (done - start).total_seconds() <= 7
    driver.run_until(lambda: not driver.live_pods(), what="pods cleaned")
