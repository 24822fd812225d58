"""Requests into CRs and CRs into responses."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from functions.api.core import crs, queue
from functions.api.core.models import FRAMEWORKS, FrameworkName, JobRequest
from functions.jobs.core.frameworks import FRAMEWORKS as JOB_FRAMEWORKS
from functions.jobs.core.model import parse_job

DATA = Path(__file__).resolve().parents[1] / "data"
NOW = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)
Obj = dict[str, Any]


def recorded(name: str) -> Obj:
    data = yaml.safe_load((DATA / name).read_text())
    assert isinstance(data, dict)
    return data


def request(**fields: Any) -> JobRequest:
    body: Obj = {"name": "job", "framework": "pytorch", "image": "img:1"}
    body.update(fields)
    return JobRequest.model_validate(body)


@pytest.mark.parametrize(("framework", "workers", "expected"), [
    pytest.param("pytorch", 1, {"Master": 1}, id="pytorch-single"),
    pytest.param("pytorch", 4, {"Master": 1, "Worker": 3}, id="pytorch-master-and-workers"),
    pytest.param("tensorflow", 3, {"Worker": 3}, id="tensorflow-workers"),
    pytest.param("mxnet", 2, {"Scheduler": 1, "Server": 1, "Worker": 2}, id="mxnet"),
    pytest.param("mpi", 2, {"Launcher": 1, "Worker": 2}, id="mpi"),
    pytest.param("xgboost", 3, {"Master": 1, "Worker": 2}, id="xgboost"),
    pytest.param("paddle", 2, {"Worker": 2}, id="paddle-collective"),
    pytest.param("jax", 2, {"Worker": 2}, id="jax"),
])
def test_replica_layout(framework: str, workers: int, expected: dict[str, int]) -> None:
    job = crs.build_job(request(framework=framework, workers=workers), "ns", NOW, "u", False)
    specs = next(v for k, v in job["spec"].items() if k.endswith("ReplicaSpecs"))
    assert {k: v["replicas"] for k, v in specs.items()} == expected
    assert parse_job(job).total_replicas == sum(expected.values())  # the controllers read it


def test_build_job_is_suspended_and_queued() -> None:
    job = crs.build_job(request(priority=5, queue="gpu", env={"B": "2", "A": "1"},
                                command=["python"], args=["t.py"], labels={"team": "x"},
                                resources={"cpu": "1", "memory": "1Gi", "gpus": 2}, workers=2),
                        "ns", NOW, "alice", kueue=False)
    assert job["spec"]["runPolicy"] == {"suspend": True}
    assert job["metadata"]["labels"] == {"team": "x", queue.LABEL_QUEUE_STATE: "Queued",
                                         queue.LABEL_QUEUE: "gpu"}
    assert job["metadata"]["annotations"] == {
        queue.ANNOTATION_PRIORITY: "5",
        queue.ANNOTATION_SUBMITTED_AT: "2026-03-01T12:00:00.250000Z",
        queue.ANNOTATION_SUBMITTED_BY: "alice"}
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert worker["metadata"] == {"labels": {"team": "x"}}
    assert worker["spec"]["containers"] == [{
        "name": "pytorch", "image": "img:1", "command": ["python"], "args": ["t.py"],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 2},
                      "limits": {"memory": "1Gi", "nvidia.com/gpu": 2}}}]
    assert queue.requested_gpus(job) == 4


def test_build_job_for_kueue_leaves_admission_to_kueue() -> None:
    job = crs.build_job(request(queue="team-q"), "ns", NOW, "alice", kueue=True)
    assert job["metadata"]["labels"] == {queue.LABEL_KUEUE_QUEUE: "team-q"}
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert queue.entry_of(job) is None
    assert crs.job_view(job).queue.admission == "kueue"


def test_mpi_workers_run_the_image_and_the_launcher_the_command() -> None:
    job = crs.build_job(request(framework="mpi", command=["mpirun"], resources={"gpus": 1}),
                        "ns", NOW, "u", False)
    specs = job["spec"]["mpiReplicaSpecs"]
    launcher = specs["Launcher"]["template"]["spec"]["containers"][0]
    worker = specs["Worker"]["template"]["spec"]["containers"][0]
    assert launcher["command"] == ["mpirun"] and "resources" not in launcher
    assert "command" not in worker and worker["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert job["spec"]["slotsPerWorker"] == 1


def test_job_view_of_a_finished_job() -> None:
    view = crs.job_view(recorded("pytorchjob-succeeded.yaml"), position=4)
    assert view.state == "Succeeded"
    assert view.framework == "pytorch"
    assert {k: (v.desired, v.succeeded) for k, v in view.replicas.items()} == {
        "Master": (1, 1), "Worker": (2, 2)}
    assert view.queue.position is None  # only queued jobs have a place
    assert (view.queue.priority, view.queue.admission) == (3, "queue")
    assert view.queue.admitted_at == "2026-11-30T01:04:37.899393Z"
    assert [c.type for c in view.conditions] == ["Created", "Suspended", "Running", "Succeeded"]
    assert view.completion_time == "2026-11-30T01:04:41Z"


def _with(conditions: list[tuple[str, str]], suspend: bool, labels: dict[str, str]) -> Obj:
    obj = copy.deepcopy(recorded("pytorchjob-succeeded.yaml"))
    obj["metadata"]["labels"] = labels
    obj["spec"]["runPolicy"]["suspend"] = suspend
    obj["status"]["conditions"] = [{"type": t, "status": s} for t, s in conditions]
    return obj


QUEUED = {queue.LABEL_QUEUE_STATE: "Queued"}


@pytest.mark.parametrize(("conditions", "suspend", "labels", "state"), [
    pytest.param([], True, QUEUED, "Queued", id="queued"),
    pytest.param([("Created", "True"), ("Suspended", "True")], True,
                 {queue.LABEL_KUEUE_QUEUE: "q"}, "Queued", id="waiting-for-kueue"),
    pytest.param([("Created", "True"), ("Suspended", "True")], True, {}, "Suspended",
                 id="suspended-by-hand"),
    pytest.param([("Created", "True")], False, QUEUED, "Pending", id="admitted-no-pods-yet"),
    pytest.param([("Created", "True"), ("Running", "True")], False, {}, "Running", id="running"),
    pytest.param([("Restarting", "True")], False, {}, "Restarting", id="restarting"),
    pytest.param([("Running", "False"), ("Failed", "True")], False, {}, "Failed", id="failed"),
    pytest.param([("Succeeded", "True")], True, QUEUED, "Succeeded",
                 id="finished-wins-over-suspend"),
])
def test_state_of(conditions: list[tuple[str, str]], suspend: bool, labels: dict[str, str],
                  state: str) -> None:
    assert crs.state_of(_with(conditions, suspend, labels)) == state


@pytest.mark.parametrize(("kind", "specs", "replica"), [
    pytest.param("PyTorchJob", {"Master": {}, "Worker": {}}, "master", id="pytorch"),
    pytest.param("TFJob", {"PS": {}, "Worker": {}}, "worker", id="tf-without-chief"),
    pytest.param("TFJob", {"Chief": {}, "Worker": {}}, "chief", id="tf-chief"),
    pytest.param("MPIJob", {"Launcher": {}, "Worker": {}}, "launcher", id="mpi"),
])
def test_primary_replica(kind: str, specs: Obj, replica: str) -> None:
    field = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs",
             "MPIJob": "mpiReplicaSpecs"}[kind]
    assert crs.primary_replica({"kind": kind, "spec": {field: specs}}) == replica


def test_log_pod_selection() -> None:
    job = {"kind": "MPIJob", "metadata": {"name": "pi"}}
    assert crs.log_pod_selector(job, "launcher", 0) == (
        "training.kubeflow.org/job-name=pi,training.kubeflow.org/job-role=launcher")
    assert crs.log_pod_selector(job, "worker", 1) == (
        "training.kubeflow.org/job-name=pi,training.kubeflow.org/replica-type=worker,"
        "training.kubeflow.org/replica-index=1")
    pods = [{"metadata": {"name": n, "creationTimestamp": t}} for n, t in
            (("old", "2026-01-01T00:00:00Z"), ("new", "2026-01-01T00:01:00Z"))]
    assert crs.newest(pods) == pods[1]
    assert crs.newest([]) is None
    assert crs.log_container(job, {"spec": {"containers": [{"name": "launcher"}]}}) == "launcher"
    both = {"spec": {"containers": [{"name": "x"}, {"name": "mpi"}]}}
    assert crs.log_container(job, both) == "mpi"


def _event(reason: str, uid: str | None, last: str) -> Obj:
    involved: Obj = {"kind": "PyTorchJob", "name": "job"}
    if uid is not None:
        involved["uid"] = uid
    return {"type": "Normal", "reason": reason, "message": reason, "lastTimestamp": last,
            "involvedObject": involved}


@pytest.mark.parametrize(("events", "reasons"), [
    pytest.param([_event("Second", "u1", "2026-03-01T12:00:02Z"),
                  _event("First", "u1", "2026-03-01T12:00:01Z")], ["First", "Second"],
                 id="oldest-first"),
    pytest.param([_event("Mine", "u1", "2026-03-01T12:00:01Z"),
                  _event("Predecessor", "u0", "2026-03-01T12:00:00Z")], ["Mine"],
                 id="earlier-job-of-the-same-name-left-out"),
    pytest.param([_event("NoUid", None, "2026-03-01T12:00:01Z")], ["NoUid"],
                 id="event-without-uid-kept"),
])
def test_event_views(events: list[Obj], reasons: list[str]) -> None:
    assert [e.reason for e in crs.event_views(events, "u1")] == reasons


@pytest.mark.parametrize(("positions", "expected"), [
    pytest.param({("ns", "PyTorchJob", "job"): 3}, 3, id="listed"),
    pytest.param({("ns", "TFJob", "job"): 3}, None, id="other-kind"),
    pytest.param({}, None, id="not-queued"),
])
def test_position_in(positions: dict[tuple[str, str, str], int], expected: int | None) -> None:
    cr = {"kind": "PyTorchJob", "metadata": {"namespace": "ns", "name": "job"}}
    assert crs.position_in(cr, positions) == expected


def test_every_framework_of_the_table_can_be_requested() -> None:
    assert set(get_args(FrameworkName)) == set(FRAMEWORKS) == {
        fw.name for fw in JOB_FRAMEWORKS}
