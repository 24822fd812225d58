"""runPolicy on the local cluster: suspend/resume, managedBy, TTL, activeDeadlineSeconds, for
every v1 kind of the same shape (one table, one driver)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from functions.jobs.controller import RESOURCES
from functions.jobs.core.frameworks import BY_KIND, FRAMEWORKS
from functions.kube.client import KubeClient
from tests.jobs.driver import JobDriver, for_test, sample, specs_of

pytestmark = pytest.mark.cluster

# The kinds whose runPolicy goes through the shared v1 path (MPIJob's is its launcher Job's,
# tests/jobs/test_mpijob_cluster.py), with the pods whose success ends their sample.
ENDING_PODS = {"PyTorchJob": ("master-0",), "XGBoostJob": ("master-0",),
               "PaddleJob": ("worker-0", "worker-1"), "JAXJob": ("worker-0", "worker-1")}
KINDS = [pytest.param(kind, id=kind.lower()) for kind in ENDING_PODS]


def job_of(kind: str, namespace: str, name: str, **run_policy: object) -> dict[str, object]:
    job = for_test(sample(kind), name, namespace)
    job["spec"].setdefault("runPolicy", {}).update(run_policy)
    return job


def pod_count(kind: str) -> int:
    return sum(int(s.get("replicas", 1)) for s in specs_of(sample(kind)).values())


@pytest.mark.parametrize("kind", KINDS)
def test_suspend_and_resume(kube: KubeClient, crds: None, namespace: str, kind: str) -> None:
    job = job_of(kind, namespace, "sus")
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.condition("Running"), what="Running")
    started = driver.status()["startTime"]

    kube.patch(RESOURCES[kind], "sus", {"spec": {"runPolicy": {"suspend": True}}},
               namespace)
    driver.run_until(lambda: not driver.live_pods() and not driver.services()
                     and driver.condition("Suspended"), what="suspended")
    assert driver.conditions() == [
        ("Created", "True", f"{kind}Created"), ("Running", "False", f"{kind}Suspended"),
        ("Suspended", "True", f"{kind}Suspended")]
    status = driver.status()
    assert status["startTime"] == started
    assert all(s.get("active", 0) == 0 for s in status["replicaStatuses"].values())

    time.sleep(1.1)
    kube.patch(RESOURCES[kind], "sus", {"spec": {"runPolicy": {"suspend": False}}},
               namespace)
    driver.run_until(lambda: driver.condition("Running")
                     and len(driver.live_pods()) == pod_count(kind),
                     what="resumed and running")
    assert driver.conditions() == [
        ("Created", "True", f"{kind}Created"), ("Suspended", "False", f"{kind}Resumed"),
        ("Running", "True", f"{kind}Running")]
    assert driver.status()["startTime"] > started
    assert len(driver.services()) == pod_count(kind)


@pytest.mark.parametrize("kind", KINDS)
def test_created_suspended_has_no_pods_and_no_start_time(kube: KubeClient, crds: None,
                                                         namespace: str, kind: str) -> None:
    job = job_of(kind, namespace, "held", suspend=True)
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.condition("Suspended"), what="Suspended")
    for _ in range(3):
        driver.step()
    assert driver.pods() == []
    assert "startTime" not in driver.status()
    assert driver.conditions() == [("Created", "True", f"{kind}Created"),
                                   ("Suspended", "True", f"{kind}Suspended")]


@pytest.mark.parametrize("kind", [pytest.param(fw.kind, id=fw.kind.lower())
                                  for fw in FRAMEWORKS])
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


@pytest.mark.parametrize("kind", KINDS)
def test_ttl_deletes_finished_job(kube: KubeClient, crds: None, namespace: str,
                                  kind: str) -> None:
    job = job_of(kind, namespace, "ttl", ttlSecondsAfterFinished=2)
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.all_running(pod_count(kind)), what="pods running")
    for suffix in ENDING_PODS[kind]:
        driver.finish_pod(f"ttl-{suffix}", "succeed")
    driver.run_until(lambda: driver.condition("Succeeded"), what="Succeeded")
    completed = datetime.fromisoformat(driver.status()["completionTime"].replace("Z", "+00:00"))
    driver.run_until(lambda: driver.get() is None, timeout=20, what="job deleted by TTL")
    # Not before the TTL has passed since the recorded completion, and within a few seconds.
    assert 2.0 <= (datetime.now(UTC) - completed).total_seconds() <= 10.0
    assert (BY_KIND[kind].job_deleted_reason, "Deleted job: ttl") in driver.events()


@pytest.mark.parametrize("kind", KINDS)
def test_active_deadline_fails_running_job(kube: KubeClient, crds: None, namespace: str,
                                           kind: str) -> None:
    job = job_of(kind, namespace, "ads", activeDeadlineSeconds=3, cleanPodPolicy="All")
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.condition("Running"), what="Running")
    driver.run_until(lambda: driver.condition("Failed"), timeout=20, what="deadline")
    failed = driver.condition("Failed")
    assert failed is not None
    assert failed["reason"] == f"{kind}Failed"
    assert failed["message"] == (
        "Job ads has failed because it was active longer than specified deadline")
    status = driver.status()
    start = datetime.fromisoformat(status["startTime"].replace("Z", "+00:00"))
    done = datetime.fromisoformat(status["completionTime"].replace("Z", "+00:00"))
    assert 3 <= (done - start).total_seconds() <= 7
    driver.run_until(lambda: not driver.live_pods(), what="pods cleaned")
