"""With the platform's training operator running (a Deployment labelled as its manifests label
it), the job handlers leave the jobs alone: a new PyTorchJob gets no pods, Services or status
from us and one ConflictingController Warning Event however many passes run, and gc deletes
no finished job. Once the Deployment is gone (seen after the memo's TTL, made short here), the
same jobs are handled as usual. The simulated operator is a Deployment only (kwok runs its
pod); nothing reconciles on its behalf."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from functions.jobs import coexistence
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.platform.core.coexistence import TRAINING_OPERATOR_SELECTOR
from functions.platform.memo import ConflictMemo
from tests.jobs.driver import JobDriver, for_test, sample
from tests.support import wait_for
from tests.trainer.harness import Obj, recording_client

pytestmark = pytest.mark.cluster

OPERATOR = "kubeflow-training-operator"
DEPLOYMENTS = "/apis/apps/v1/deployments"


class TrainingOperator:
    """The platform's training operator as a Deployment in ``namespace``."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace

    def start(self) -> None:
        key, _, value = TRAINING_OPERATOR_SELECTOR.partition("=")
        labels = {key: value, "app.kubernetes.io/name": "training-operator"}
        self.kube.create({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": OPERATOR, "namespace": self.namespace, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{
                                      "name": "training-operator",
                                      "image": "kubeflow/training-operator:v1-855e096"}]}}}},
            res=resources.DEPLOYMENTS)

    def stop(self) -> None:
        self.kube.delete(resources.DEPLOYMENTS, OPERATOR, self.namespace,
                         propagation="Foreground")
        wait_for(lambda: self.kube.get(resources.DEPLOYMENTS, OPERATOR, self.namespace) is None,
                 60, 0.2, "the simulated training operator to go")


@pytest.fixture
def training_operator(kube: KubeClient, namespace: str) -> Iterator[TrainingOperator]:
    operator = TrainingOperator(kube, namespace)
    yield operator
    if kube.get(resources.DEPLOYMENTS, OPERATOR, namespace) is not None:
        operator.stop()


@pytest.fixture
def memo(monkeypatch: pytest.MonkeyPatch) -> Iterator[ConflictMemo]:
    """The process's memo, forgotten before and after, so no other test of this process sees
    this one's conflict (its TTL is set by each test)."""
    coexistence.CONFLICTS.forget()
    coexistence.WARNED.clear()
    monkeypatch.setattr(coexistence.CONFLICTS, "ttl", 60.0)
    yield coexistence.CONFLICTS
    coexistence.CONFLICTS.forget()
    coexistence.WARNED.clear()


def conflict_events(kube: KubeClient, namespace: str, name: str) -> list[Obj]:
    return [e for e in kube.list(resources.EVENTS, namespace)
            if e.get("reason") == "ConflictingController"
            and (e.get("involvedObject") or {}).get("name") == name]


def test_a_new_job_is_left_to_the_training_operator_until_it_goes(
        kube: KubeClient, crds: None, namespace: str, memo: ConflictMemo,
        training_operator: TrainingOperator) -> None:
    training_operator.start()
    client, transport = recording_client(kube)
    job = for_test(sample("PyTorchJob"), "mnist", namespace)
    driver = JobDriver(client, job)
    driver.create(job)
    transport.seen.clear()

    for _ in range(5):
        driver.step()  # reconcile, status and gc, as a burst of deliveries would
    assert {path for _, path in transport.writes()} == {
        f"/api/v1/namespaces/{namespace}/events"}
    # The memo read the platform once for the fifteen handler calls.
    assert [p for m, p in transport.seen if m == "GET" and p == DEPLOYMENTS] == [DEPLOYMENTS]
    assert (driver.pods(), driver.services(), driver.status()) == ([], [], {})
    (event,) = conflict_events(kube, namespace, "mnist")
    assert (event["type"], event["count"]) == ("Warning", 1)
    assert f"Deployment {namespace}/{OPERATOR}" in event["message"]
    assert "trainingoperator.managementState: Removed" in event["message"]

    training_operator.stop()
    memo.ttl = 0.5
    # the pods may turn Running after a step's status pass: the next step's sees them
    driver.run_until(lambda: driver.all_running(2) and driver.condition("Running"),
                     what="the job's pods to run and the job Running")
    assert len(driver.services()) == 2
    assert len(conflict_events(kube, namespace, "mnist")) == 1


def finished(driver: JobDriver) -> None:
    """The job as another controller reports it: succeeded a moment ago."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded",
                 "message": "done", "lastUpdateTime": now, "lastTransitionTime": now}
    driver.kube.apply_status({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                              "metadata": {"name": driver.name, "namespace": driver.namespace},
                              "status": {"conditions": [condition], "startTime": now,
                                         "completionTime": now}},
                             "training-operator", res=driver.res)


def test_gc_deletes_no_finished_job_while_the_operator_runs(
        kube: KubeClient, crds: None, namespace: str, memo: ConflictMemo,
        training_operator: TrainingOperator) -> None:
    training_operator.start()
    job = for_test(sample("PyTorchJob"), "done", namespace)
    job["spec"]["runPolicy"] = {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 0}
    driver = JobDriver(kube, job)
    driver.create(job)
    finished(driver)

    for function in ("gc", "status", "gc"):
        driver.call(function)
    assert driver.get() is not None
    assert [c["type"] for c in driver.status()["conditions"]] == ["Succeeded"]

    training_operator.stop()
    memo.ttl = 0.5

    def gone() -> bool:
        driver.call("gc")
        return driver.get() is None

    wait_for(gone, 30, 0.2, "gc to delete the finished job")
