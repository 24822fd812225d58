"""Warning Events for stuck pods: once per cause per process, from the status handler."""

from __future__ import annotations

import copy
from typing import Any

from functions.jobs.core.pod_problems import PodProblem
from functions.jobs.pod_events import ReportedCauses
from tests.jobs.fake_api import JobApi, run_status
from tests.jobs.fixtures import load

Obj = dict[str, Any]


def problem(uid: str, cause: str = "unschedulable") -> PodProblem:
    return PodProblem(uid, cause, "Unschedulable", f"Pod {uid} cannot be scheduled")


def test_first_sightings_once_per_cause_and_bounded() -> None:
    seen = ReportedCauses(size=2)
    assert seen.first_sightings([problem("a"), problem("a")]) == [problem("a")]
    assert seen.first_sightings([problem("a"), problem("a", "image/x")]) == [
        problem("a", "image/x")]
    assert seen.first_sightings([problem("b")]) == [problem("b")]
    # "a/unschedulable" was seen longest ago and is forgotten past the bound
    assert seen.first_sightings([problem("a")]) == [problem("a")]


def pod(job: Obj, index: int, waiting: str) -> Obj:
    meta = job["metadata"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{meta['name']}-worker-{index}", "namespace": meta["namespace"],
                         "uid": f"{meta['namespace']}-pod-{index}",
                         "labels": {"training.kubeflow.org/job-name": meta["name"],
                                    "training.kubeflow.org/replica-type": "worker",
                                    "training.kubeflow.org/replica-index": str(index)},
                         "ownerReferences": [{"apiVersion": job["apiVersion"],
                                              "kind": job["kind"], "name": meta["name"],
                                              "uid": meta["uid"], "controller": True}]},
            "spec": {"containers": [{"name": "jax", "image": "registry.invalid/jax:1"}]},
            "status": {"phase": "Pending", "containerStatuses": [
                {"name": "jax", "restartCount": 0,
                 "state": {"waiting": {"reason": waiting}}}]}}


def warnings(api: JobApi) -> list[tuple[str, str, int]]:
    return [(e["reason"], e["message"], e["count"]) for e in api.events
            if e["type"] == "Warning"]


def test_status_handler_reports_each_new_cause_once() -> None:
    job = load("jaxjob-workers.yaml")
    job["metadata"].update(namespace="stuck-pods", uid="uid-stuck-pods")
    api = JobApi(job, [pod(job, 0, "ErrImagePull"), pod(job, 1, "ContainerCreating")])
    run_status(api)
    api.pods[0] = pod(job, 0, "ImagePullBackOff")     # the kubelet retries: the same cause
    run_status(api)
    run_status(api)
    assert warnings(api) == [("ErrImagePull", 'Pod spmd-worker-0: container "jax" cannot pull '
                              'image "registry.invalid/jax:1"', 1)]
    api.pods[1] = pod(job, 1, "ImagePullBackOff")     # a new cause: another pod
    run_status(api)
    assert len(warnings(api)) == 2


def test_finished_job_reports_nothing() -> None:
    job = copy.deepcopy(load("jaxjob-workers.yaml"))
    job["metadata"].update(namespace="stuck-finished", uid="uid-stuck-finished")
    job["status"] = {"conditions": [{"type": "Created", "status": "True"},
                                    {"type": "Failed", "status": "True"}]}
    api = JobApi(job, [pod(job, 0, "ImagePullBackOff")])
    run_status(api)
    assert warnings(api) == []
