"""The queue on a real API server: at most N running, priority then FIFO, dequeue by delete."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from functions.api.core import queue
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.api.conftest import QueueWorld, job_request

Obj = dict[str, Any]


def finished(job: Obj) -> bool:
    return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def running(jobs: list[Obj]) -> list[str]:
    """Jobs admitted and not finished: what holds capacity."""
    return sorted(j["metadata"]["name"] for j in jobs
                  if not j["spec"]["runPolicy"].get("suspend") and not finished(j))


def test_two_at_a_time_in_priority_then_fifo_order(
        client: FlaskClient, user: dict[str, str], namespace: str, kube: KubeClient,
        world: QueueWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINING_QUEUE_MAX_RUNNING_PER_NAMESPACE", "2")
    base = f"/v1/namespaces/{namespace}/jobs"
    submitted = [("first", 0), ("second", 0), ("urgent", 5), ("third", 0), ("urgent-later", 5)]
    for name, priority in submitted:
        answer = client.post(base, json=job_request(name, priority=priority), headers=user)
        assert answer.status_code == 201, answer.get_json()
    positions = {j["name"]: j["queue"]["position"]
                 for j in client.get(base, headers=user).get_json()["items"]}
    assert positions == {"urgent": 1, "urgent-later": 2, "first": 3, "second": 4, "third": 5}

    most = 0
    admitted_order: list[str] = []

    def observe(jobs: list[Obj]) -> None:
        nonlocal most
        most = max(most, len(running(jobs)))
        for job in sorted(jobs, key=lambda j: j["metadata"].get("annotations", {}).get(
                queue.ANNOTATION_ADMITTED_AT, "")):
            name = job["metadata"]["name"]
            if not job["spec"]["runPolicy"].get("suspend") and name not in admitted_order:
                admitted_order.append(name)

    jobs = world.run_until(lambda jobs: len(jobs) == 5 and all(finished(j) for j in jobs),
                           timeout=120, on_step=observe)
    assert most == 2
    assert admitted_order == ["urgent", "urgent-later", "first", "second", "third"]
    assert all(j["metadata"]["labels"][queue.LABEL_QUEUE_STATE] == "Finished" for j in world.step())
    assert {j["metadata"]["name"] for j in jobs if any(
        c["type"] == "Succeeded" for c in j["status"]["conditions"])} == {n for n, _ in submitted}


def test_deleting_a_queued_job_removes_it_from_the_queue(
        client: FlaskClient, user: dict[str, str], namespace: str, kube: KubeClient,
        world: QueueWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINING_QUEUE_MAX_RUNNING_PER_NAMESPACE", "1")
    base = f"/v1/namespaces/{namespace}/jobs"
    for name in ("a", "b", "c"):
        assert client.post(base, json=job_request(name), headers=user).status_code == 201
    world.step()
    assert running(world.jobs()) == ["a"]
    assert client.get(f"{base}/c", headers=user).get_json()["queue"]["position"] == 2

    assert client.delete(f"{base}/b", headers=user).status_code == 204
    assert kube.get(resources.PYTORCHJOBS, "b", namespace) is None
    assert client.get(f"{base}/b", headers=user).status_code == 404
    assert client.get(f"{base}/c", headers=user).get_json()["queue"]["position"] == 1

    seen: set[str] = set()
    world.run_until(lambda jobs: all(finished(j) for j in jobs) and len(jobs) == 2,
                    timeout=90, on_step=lambda jobs: seen.update(running(jobs)))
    assert seen == {"a", "c"}


def test_kueue_takes_over_admission_when_installed(
        client: FlaskClient, user: dict[str, str], namespace: str, kube: KubeClient,
        world: QueueWorld) -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "workloads.kueue.x-k8s.io"},
           "spec": {"group": "kueue.x-k8s.io", "scope": "Namespaced",
                    "names": {"plural": "workloads", "singular": "workload",
                              "kind": "Workload", "listKind": "WorkloadList"},
                    "versions": [{"name": "v1beta1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {
                                      "type": "object",
                                      "x-kubernetes-preserve-unknown-fields": True}}}]}}
    kube.create(crd, res=resources.CRDS)
    try:
        def served() -> bool:
            return any(r.plural == "workloads" for r in kube.discover("kueue.x-k8s.io/v1beta1"))
        from tests.support import wait_for
        wait_for(served, timeout=20, message="the Workload API")
        base = f"/v1/namespaces/{namespace}/jobs"
        answer = client.post(base, json=job_request("kq", queue="team-queue"), headers=user)
        assert answer.status_code == 201
        body = answer.get_json()
        assert (body["state"], body["queue"]["admission"], body["queue"]["name"]) == (
            "Queued", "kueue", "team-queue")
        cr = kube.get(resources.PYTORCHJOBS, "kq", namespace)
        assert cr is not None
        assert cr["metadata"]["labels"][queue.LABEL_KUEUE_QUEUE] == "team-queue"
        assert queue.LABEL_QUEUE_STATE not in cr["metadata"]["labels"]
        for _ in range(3):
            world.step()
        cr = kube.get(resources.PYTORCHJOBS, "kq", namespace)
        assert cr is not None and cr["spec"]["runPolicy"]["suspend"] is True  # left to Kueue
        # without a queue name the job stays with this queue
        plain = client.post(base, json=job_request("plain"), headers=user).get_json()
        assert plain["queue"]["admission"] == "queue"
    finally:
        kube.delete(resources.CRDS, "workloads.kueue.x-k8s.io")
