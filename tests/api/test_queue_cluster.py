"""The queue on a real API server: at most N running, priority then FIFO, dequeue by delete."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from devstack.cluster.runner import LocalCluster
from functions.api import queue_controller
from functions.api.core import crs, queue
from functions.api.core.models import JobRequest
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.api.conftest import QueueWorld, job_request, set_priority_policy
from tests.support import REPO

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
    set_priority_policy(kube, namespace, {f"maxPriority.{namespace}": "5"})
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
    held = kube.get(resources.LEASES, queue_controller.LEASE, namespace)
    assert held is not None, "the passes ran without the Lease"
    assert all(j["metadata"]["labels"][queue.LABEL_QUEUE_STATE] == "Finished" for j in world.step())
    assert {j["metadata"]["name"] for j in jobs if any(
        c["type"] == "Succeeded" for c in j["status"]["conditions"])} == {n for n, _ in submitted}


def test_priority_is_bounded_by_the_admins_policy(
        client: FlaskClient, user: dict[str, str], namespace: str, kube: KubeClient,
        world: QueueWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused through the API above the namespace's maximum; written on a CR directly, past
    the API, a higher priority is capped when the queue orders jobs."""
    monkeypatch.setenv("TRAINING_QUEUE_MAX_RUNNING_PER_NAMESPACE", "1")
    base = f"/v1/namespaces/{namespace}/jobs"
    refused = client.post(base, json=job_request("jumper", priority=1), headers=user)
    assert refused.status_code == 403
    assert [e["field"] for e in refused.get_json()["errors"]] == ["priority"]
    assert kube.get(resources.PYTORCHJOBS, "jumper", namespace) is None

    set_priority_policy(kube, namespace, {"maxPriority": "3"})
    assert client.post(base, json=job_request("blocker"), headers=user).status_code == 201
    world.step()  # "blocker" runs; the rest waits
    assert client.post(base, json=job_request("early"), headers=user).status_code == 201
    assert client.post(base, json=job_request("too-high", priority=4),
                       headers=user).status_code == 403
    allowed = client.post(base, json=job_request("allowed", priority=3), headers=user)
    assert allowed.status_code == 201
    direct = JobRequest.model_validate(job_request("direct", priority=1000))
    kube.create(crs.build_job(direct, namespace, datetime.now(UTC), "someone", False),
                res=resources.PYTORCHJOBS)
    positions = {j["name"]: j["queue"]["position"]
                 for j in client.get(base, headers=user).get_json()["items"]
                 if j["state"] == "Queued"}
    # "direct" asked for 1000 and counts as 3 (the cap), submitted after "allowed": FIFO
    assert positions == {"allowed": 1, "direct": 2, "early": 3}

    order: list[str] = []

    def note(jobs: list[Obj]) -> None:
        order.extend(n for n in running(jobs) if n not in order)

    world.run_until(lambda jobs: len(jobs) == 4 and all(finished(j) for j in jobs),
                    timeout=120, on_step=note)
    assert order == ["blocker", "allowed", "direct", "early"]


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


# -- two replicas at once ------------------------------------------------------------------------

REPLICA_LIMIT = 2
REPLICA_JOBS = 40


def _submit(kube: KubeClient, namespace: str, name: str, priority: int) -> None:
    request = JobRequest.model_validate(job_request(name, priority=priority))
    kube.create(crs.build_job(request, namespace, datetime.now(UTC), "test", False),
                res=resources.PYTORCHJOBS)


def _finish(kube: KubeClient, namespace: str, name: str) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": "Succeeded", "status": "True", "reason": "Test",
                 "message": "finished by the test", "lastUpdateTime": now,
                 "lastTransitionTime": now}
    kube.patch(resources.PYTORCHJOBS, name, {"status": {"conditions": [condition]}},
               namespace, subresource="status")


def over_admissions(admitted: dict[str, datetime], finished: dict[str, datetime],
                    limit: int) -> list[str]:
    """The admissions after which more than ``limit`` jobs held capacity: each job counts from
    its admitted-at stamp (taken by the handler before its patch) until the test began to
    finish it, so the count can only be too high through a real over-admission."""
    found = []
    for name, moment in sorted(admitted.items(), key=lambda item: item[1]):
        holding = sorted(other for other, start in admitted.items()
                         if start <= moment and not (other in finished
                                                     and finished[other] <= moment))
        if len(holding) > limit:
            found.append(f"{name} at {moment.isoformat()}: {', '.join(holding)}")
    return found


@pytest.mark.parametrize(("admitted", "finished", "expected"), [
    pytest.param({"a": 1, "b": 2, "c": 3}, {"a": 2.5}, [], id="capacity-freed-first"),
    pytest.param({"a": 1, "b": 2, "c": 3}, {"a": 3.5}, ["c"], id="third-while-two-hold"),
    pytest.param({"a": 1, "b": 1, "c": 1}, {}, ["a", "b", "c"], id="three-at-once"),
])
def test_over_admissions(admitted: dict[str, int], finished: dict[str, float],
                         expected: list[str]) -> None:
    def at(seconds: float) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)
    found = over_admissions({k: at(v) for k, v in admitted.items()},
                            {k: at(v) for k, v in finished.items()}, 2)
    assert [line.split()[0] for line in found] == expected


def test_two_replicas_in_two_processes_never_admit_past_the_limit(
        cluster: LocalCluster, kube: KubeClient, crds: None, namespace: str,
        tmp_path: Path) -> None:
    """Two queue handlers in two processes pass as fast as they can while the test submits
    jobs of random priority (so a stale view would pick a different job than the other
    replica, which no resourceVersion guard catches) and finishes running ones."""
    rng = random.Random(15)
    env = {**os.environ, "LEASE_NAMESPACE": namespace,
           "TRAINING_QUEUE_MAX_RUNNING_PER_NAMESPACE": str(REPLICA_LIMIT),
           "TRAINING_QUEUE_MIN_INTERVAL_SECONDS": "0"}
    stop = tmp_path / "stop"
    submitted = 0
    for _ in range(4):
        _submit(kube, namespace, f"job-{submitted}", rng.randint(0, 3))
        submitted += 1
    start = time.time() + 3.0  # both past their imports
    workers = [subprocess.Popen(
        [sys.executable, "-m", "tests.api.queue_worker", str(cluster.kubeconfig), namespace,
         str(start), str(stop), f"replica-{index}"], cwd=REPO, env=env,
        stdout=subprocess.PIPE, stderr=(tmp_path / f"replica-{index}.log").open("wb"))
        for index in range(2)]
    finished: dict[str, datetime] = {}
    most = 0
    deadline = time.monotonic() + 120
    try:
        while len(finished) < REPLICA_JOBS:
            assert time.monotonic() < deadline, f"{len(finished)} jobs finished in time"
            jobs = kube.list(resources.PYTORCHJOBS, namespace)
            holding = [j["metadata"]["name"] for j in jobs
                       if not queue.suspended(j) and j["metadata"]["name"] not in finished]
            most = max(most, len(holding))
            if holding and rng.random() < 0.7:
                name = rng.choice(holding)
                finished[name] = datetime.now(UTC)  # before the write takes effect
                _finish(kube, namespace, name)
            waiting = sum(1 for j in jobs if queue.suspended(j))
            while submitted < REPLICA_JOBS and waiting < 4:
                _submit(kube, namespace, f"job-{submitted}", rng.randint(0, 3))
                submitted += 1
                waiting += 1
            time.sleep(rng.uniform(0.0, 0.03))
    finally:
        stop.touch()
        outputs = [json.loads(w.communicate(timeout=60)[0] or b"{}") for w in workers]
    admitted = {j["metadata"]["name"]: datetime.fromisoformat(
        j["metadata"]["annotations"][queue.ANNOTATION_ADMITTED_AT].replace("Z", "+00:00"))
        for j in kube.list(resources.PYTORCHJOBS, namespace)}
    assert len(admitted) == REPLICA_JOBS
    assert most <= REPLICA_LIMIT
    violations = over_admissions(admitted, finished, REPLICA_LIMIT)
    assert not violations, "\n".join(violations)
    # both replicas took part: each admitted jobs and each found the Lease taken at times
    events = kube.list(resources.EVENTS, namespace, field_selector="reason=Admitted")
    by_replica = Counter(e["source"]["component"] for e in events)
    assert set(by_replica) == {"replica-0", "replica-1"}, by_replica
    assert all(output["refused"] > 0 for output in outputs), outputs
