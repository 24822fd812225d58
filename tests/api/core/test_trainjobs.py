"""TrainJob requests into TrainJobs, and TrainJobs into states, child-Job counts and queue
entries."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from functions.api.core import crs, kinds, problems, queue
from functions.api.core.models import JobRequest, ReplicaCounts, TrainJobRequest, parse_request

DATA = Path(__file__).resolve().parents[1] / "data"
NOW = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)
Obj = dict[str, Any]
GOOD: Obj = {"name": "llm", "runtime": "torch-distributed", "image": "img:1"}


def completed() -> Obj:
    data = yaml.safe_load((DATA / "trainjob-complete.yaml").read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize(("body", "model"), [
    pytest.param(GOOD, TrainJobRequest, id="runtime-without-framework"),
    pytest.param({**GOOD, "framework": "trainjob"}, TrainJobRequest, id="framework-trainjob"),
    pytest.param({"name": "x", "framework": "pytorch", "image": "i"}, JobRequest, id="pytorch"),
])
def test_the_request_chooses_its_kind(body: Obj, model: type) -> None:
    assert type(parse_request(body)) is model


@pytest.mark.parametrize(("body", "fields"), [
    pytest.param({"name": "llm", "framework": "trainjob", "image": "i"}, ["runtime"],
                 id="trainjob-without-runtime"),
    pytest.param({**GOOD, "framework": "pytorch"}, ["runtime"], id="runtime-on-a-v1-kind"),
    pytest.param({**GOOD, "workers": 2}, ["workers"], id="workers-on-a-trainjob"),
    pytest.param({**GOOD, "numNodes": 0}, ["numNodes"], id="zero-nodes"),
    pytest.param({**GOOD, "runtime": "Torch_Distributed"}, ["runtime"], id="bad-runtime-name"),
    pytest.param({**GOOD, "resources": {"gpus": -1}}, ["resources.gpus"], id="negative-gpus"),
    pytest.param({"runtime": "torch-distributed"}, ["name", "image"], id="missing-fields"),
])
def test_invalid_trainjob_requests_name_the_field(body: Obj, fields: list[str]) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_request(body)
    assert [e.field for e in problems.invalid_request(caught.value).errors] == fields


def test_build_a_suspended_queued_trainjob() -> None:
    request = parse_request({**GOOD, "numNodes": 2, "command": ["torchrun", "train.py"],
                             "args": ["--epochs=1"], "env": {"B": "2", "A": "1"},
                             "resources": {"cpu": "2", "memory": "8Gi", "gpus": 1},
                             "priority": 3, "labels": {"team": "x"}})
    job = crs.build_job(request, "team-a", NOW, "alice", kueue=False)
    assert job == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "llm", "namespace": "team-a",
                     "labels": {"team": "x", queue.LABEL_QUEUE_STATE: "Queued",
                                queue.LABEL_QUEUE: "default"},
                     "annotations": {queue.ANNOTATION_PRIORITY: "3",
                                     queue.ANNOTATION_SUBMITTED_AT: "2026-03-01T12:00:00.250000Z",
                                     queue.ANNOTATION_SUBMITTED_BY: "alice"}},
        "spec": {"suspend": True,
                 "runtimeRef": {"apiGroup": "trainer.kubeflow.org",
                                "kind": "ClusterTrainingRuntime", "name": "torch-distributed"},
                 "trainer": {"image": "img:1", "numNodes": 2,
                             "command": ["torchrun", "train.py"], "args": ["--epochs=1"],
                             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                             "resourcesPerNode": {
                                 "requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": 1},
                                 "limits": {"memory": "8Gi", "nvidia.com/gpu": 1}}},
                 "runtimePatches": [{
                     "manager": "training.opendatahub.io/api",
                     "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{
                         "name": "node", "template": {"spec": {"template": {
                             "metadata": {"labels": {"team": "x"}}}}}}]}}}}]}}
    entry = queue.entry_of(job)
    assert entry is not None
    assert (entry.kind, entry.phase, entry.gpus, entry.priority) == ("TrainJob", "Queued", 2, 3)


def test_a_minimal_trainjob_sets_only_what_was_asked() -> None:
    job = crs.build_job(parse_request(GOOD), "ns", NOW, "u", kueue=True)
    assert job["spec"]["trainer"] == {"image": "img:1", "numNodes": 1}
    assert "runtimePatches" not in job["spec"]
    assert queue.LABEL_QUEUE_STATE in job["metadata"]["labels"]  # no queue name: ours


def test_kueue_takes_a_named_queue() -> None:
    job = crs.build_job(parse_request({**GOOD, "queue": "gpu"}), "ns", NOW, "u", kueue=True)
    assert job["metadata"]["labels"] == {queue.LABEL_KUEUE_QUEUE: "gpu"}
    assert job["spec"]["suspend"] is True


def status(*conditions: tuple[str, str], jobs: list[Obj] | None = None) -> Obj:
    out: Obj = {"conditions": [{"type": t, "status": s} for t, s in conditions]}
    if jobs is not None:
        out["jobsStatus"] = jobs
    return out


def trainjob(suspend: bool, labelled: bool, job_status: Obj | None) -> Obj:
    labels = {queue.LABEL_QUEUE_STATE: "Queued"} if labelled else {}
    cr: Obj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
               "metadata": {"name": "llm", "namespace": "ns", "labels": labels},
               "spec": {"suspend": suspend}}
    if job_status is not None:
        cr["status"] = job_status
    return cr


NODE = {"name": "node", "active": 1, "ready": 1, "succeeded": 0, "failed": 0, "suspended": 0}


@pytest.mark.parametrize(("suspend", "labelled", "job_status", "state"), [
    pytest.param(True, True, None, "Queued", id="queued"),
    pytest.param(True, False, None, "Suspended", id="suspended-outside-the-queue"),
    pytest.param(False, True, None, "Pending", id="admitted-no-status-yet"),
    pytest.param(False, True, status(jobs=[{**NODE, "active": 0, "ready": 0}]), "Pending",
                 id="child-job-not-active"),
    pytest.param(False, True, status(jobs=[NODE]), "Running", id="child-job-active"),
    pytest.param(False, True, status(("Complete", "True"), jobs=[NODE]), "Succeeded",
                 id="complete"),
    pytest.param(False, True, status(("Complete", "False")), "Pending", id="complete-false"),
    pytest.param(False, True, status(("Failed", "True")), "Failed", id="failed"),
    pytest.param(True, True, status(("Complete", "True")), "Succeeded",
                 id="complete-wins-over-suspend"),
    pytest.param(False, True, status(("Succeeded", "True")), "Pending",
                 id="v1-condition-means-nothing-here"),
])
def test_state_of_a_trainjob(suspend: bool, labelled: bool, job_status: Obj | None,
                             state: str) -> None:
    assert crs.state_of(trainjob(suspend, labelled, job_status)) == state


def test_view_of_a_completed_trainjob() -> None:
    view = crs.job_view(completed())
    assert (view.kind, view.framework, view.state) == ("TrainJob", "trainjob", "Succeeded")
    assert view.replicas == {"node": ReplicaCounts(desired=1, succeeded=1)}
    assert [c.type for c in view.conditions] == ["Suspended", "Complete"]
    assert view.queue.admitted_at == "2026-11-30T02:10:01.000000Z"


@pytest.mark.parametrize(("spec", "gpus"), [
    pytest.param(completed()["spec"], 4, id="two-nodes-of-two"),
    pytest.param({"trainer": {"image": "i"}}, 0, id="no-resources"),
    pytest.param({"trainer": {"resourcesPerNode": {"requests": {"nvidia.com/gpu": "3"}}}}, 3,
                 id="default-one-node-requests-only"),
    pytest.param({"trainer": {"numNodes": 0, "resourcesPerNode": {
        "limits": {"nvidia.com/gpu": 8}}}}, 0, id="zero-nodes"),
])
def test_gpus_of_a_trainjob(spec: Obj, gpus: int) -> None:
    assert queue.requested_gpus({"kind": "TrainJob", "spec": spec}) == gpus


def test_a_completed_trainjob_is_finished_for_the_queue() -> None:
    entry = queue.entry_of(completed())
    assert entry is not None and entry.phase == "Finished"
    running = copy.deepcopy(completed())
    del running["status"]
    entry = queue.entry_of(running)
    assert entry is not None and entry.phase == "Admitted"


@pytest.mark.parametrize(("kind", "patch"), [
    pytest.param("TrainJob", {"suspend": False}, id="trainjob"),
    pytest.param("PyTorchJob", {"runPolicy": {"suspend": False}}, id="pytorchjob"),
    pytest.param("MPIJob", {"runPolicy": {"suspend": False}}, id="mpijob"),
])
def test_admission_clears_the_kinds_own_suspend(kind: str, patch: Obj) -> None:
    entry = queue.Entry(kind=kind, namespace="ns", name="j", priority=0, submitted_at="",
                        gpus=0, phase="Queued", labelled="Queued", resource_version="5")
    assert queue.admission_patch(entry, NOW)["spec"] == patch
    assert kinds.suspend_patch(kind, True) == {
        k: ({"suspend": True} if isinstance(v, dict) else True) for k, v in patch.items()}


def test_logs_of_a_trainjob_come_from_its_trainer_nodes() -> None:
    cr = completed()
    assert crs.primary_replica(cr) == "node"
    assert crs.log_pod_selector(cr, "node", 1) == (
        "jobset.sigs.k8s.io/jobset-name=llm,jobset.sigs.k8s.io/replicatedjob-name=node,"
        "batch.kubernetes.io/job-completion-index=1")
    pod = {"spec": {"containers": [{"name": "sidecar"}, {"name": "node"}]}}
    assert crs.log_container(cr, pod) == "node"
