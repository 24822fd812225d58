"""Whole-job restarts and restart limits per replica type (:mod:`functions.jobs.core.restarts`):
what the status says, what reconcile deletes, and how the restart is counted."""

from __future__ import annotations

from typing import Any

import pytest

from functions.jobs.core import guards as g
from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.model import Job
from functions.jobs.core.plan import reconcile_plan, status_of
from functions.jobs.core.planning import (
    RESTARTED_PODS_ANNOTATION,
    RESTARTS_ANNOTATION,
    Observed,
)
from functions.jobs.core.pods import name_of
from functions.jobs.core.restarts import RESTARTS_BY_TYPE
from functions.jobs.core.settings import Settings
from functions.jobs.writes import _restart_patch
from tests.jobs.fixtures import NOW, condition, job, pod, stamp, summary

PT = "pytorch-master-workers.yaml"
MPI = "mpijob-pi.yaml"
MPI_V1 = "mpijob-v1-pi.yaml"
WHOLE = {g.RESTART_SCOPE: "Job"}
CREATED = condition("Created", reason="PyTorchJobCreated")
RUNNING = condition("Running", reason="PyTorchJobRunning", message="PyTorchJob mnist is running.")
RESTARTING = condition("Restarting", reason="PyTorchJobRestarting",
                       message="PyTorchJob mnist is restarting as a whole: x")


def pods_of(j: Job, phases: dict[str, Any]) -> list[dict[str, Any]]:
    """``{"Master-0": "Running", "Worker-1": ("Failed", {"exit_code": 137})}``."""
    out = []
    for key, value in phases.items():
        rtype, _, index = key.partition("-")
        phase, extra = (value, {}) if isinstance(value, str) else value
        out.append(pod(j, rtype, int(index), phase, **extra))
    return out


def status(annotations: dict[str, str], conditions: list[dict[str, Any]],
           phases: dict[str, Any], spec: dict[str, Any] | None = None,
           file: str = PT) -> Any:
    raw = job(file, spec=spec, annotations=annotations,
              status={"conditions": conditions, "startTime": stamp(-100)})
    outcome = status_of(Observed(job=raw, pods=pods_of(with_defaults(raw), phases)), NOW)
    assert outcome is not None
    return outcome


ALL_RUNNING = {"Master-0": "Running", "Worker-0": "Running", "Worker-1": "Running"}
WORKER_FAILED = {**ALL_RUNNING, "Worker-1": ("Failed", {"exit_code": 137})}
WORKER_RESTARTED_IN_PLACE = {**ALL_RUNNING, "Worker-1": ("Running", {"restart_count": 1})}


@pytest.mark.parametrize(("annotations", "conditions", "phases", "last", "message"), [
    pytest.param(WHOLE, [CREATED, RUNNING], WORKER_FAILED,
                 ("Restarting", "True", "PyTorchJobRestarting"),
                 "PyTorchJob mnist is restarting as a whole: mnist-worker-1 failed (exit code "
                 "137)", id="a-failed-worker-restarts-the-job"),
    pytest.param(WHOLE, [CREATED, RUNNING], WORKER_RESTARTED_IN_PLACE,
                 ("Restarting", "True", "PyTorchJobRestarting"),
                 "PyTorchJob mnist is restarting as a whole: mnist-worker-1 restarted in "
                 "place", id="an-in-place-restart-restarts-the-job"),
    pytest.param({}, [CREATED, RUNNING], WORKER_RESTARTED_IN_PLACE,
                 ("Running", "True", "PyTorchJobRunning"), "PyTorchJob mnist is running.",
                 id="pod-scope-leaves-in-place-restarts-to-the-kubelet"),
    pytest.param(WHOLE, [CREATED, RESTARTING], WORKER_FAILED,
                 ("Restarting", "True", "PyTorchJobRestarting"),
                 "PyTorchJob mnist is restarting as a whole: x", id="restarting-kept-as-is"),
    pytest.param(WHOLE, [CREATED, RUNNING],
                 {**ALL_RUNNING, "Master-0": "Succeeded", "Worker-1": ("Failed", {})},
                 ("Succeeded", "True", "PyTorchJobSucceeded"),
                 "PyTorchJob mnist is successfully completed.", id="success-wins"),
    pytest.param({**WHOLE, RESTARTED_PODS_ANNOTATION: "uid-mnist-worker-1"},
                 [CREATED, RESTARTING], {**WORKER_FAILED, "Master-0": "Pending",
                                         "Worker-0": "Pending"},
                 ("Restarting", "True", "PyTorchJobRestarting"),
                 "PyTorchJob mnist is restarting as a whole: x",
                 id="pods-a-restart-deleted-no-longer-count"),
])
def test_whole_job_restart_status(annotations: dict[str, str], conditions: list[Any],
                                  phases: dict[str, Any], last: tuple[str, str, str],
                                  message: str) -> None:
    outcome = status(annotations, conditions, phases)
    assert summary(outcome.status.conditions)[-1] == last
    assert outcome.status.conditions[-1].message == message
    if RESTARTED_PODS_ANNOTATION in annotations:
        assert outcome.status.replica_statuses["Worker"].failed == 0


def test_restarting_kept_as_is_writes_nothing() -> None:
    outcome = status(WHOLE, [CREATED, RESTARTING], WORKER_FAILED)
    assert [c.model_dump(by_alias=True, exclude_none=True) for c in outcome.status.conditions
            ] == [CREATED, RESTARTING]
    assert outcome.notices == [n for n in outcome.notices if n.reason == "ExitedWithCode"]


def test_a_permanent_failure_still_fails_the_job() -> None:
    outcome = status(WHOLE, [CREATED, RUNNING], WORKER_FAILED,
                     spec={"pytorchReplicaSpecs": {"Worker": {"restartPolicy": "Never"}}})
    assert summary(outcome.status.conditions)[-1] == ("Failed", "True", "PyTorchJobFailed")


@pytest.mark.parametrize(("annotations", "backoff", "phases", "last"), [
    pytest.param({**WHOLE, RESTARTS_ANNOTATION: "1"}, 3, WORKER_FAILED,
                 ("Restarting", "True", "PyTorchJobRestarting"), id="second-restart"),
    pytest.param({**WHOLE, RESTARTS_ANNOTATION: "2"}, 3, WORKER_FAILED,
                 ("Failed", "True", "PyTorchJobFailed"), id="third-would-reach-the-limit"),
    pytest.param({**WHOLE, RESTARTS_ANNOTATION: "2"}, 3, ALL_RUNNING,
                 ("Running", "True", "PyTorchJobRunning"), id="below-the-limit-without-cause"),
    pytest.param({**WHOLE}, 0, WORKER_RESTARTED_IN_PLACE,
                 ("Failed", "True", "PyTorchJobFailed"), id="zero-allows-none"),
    pytest.param({}, 3, {**ALL_RUNNING, "Worker-0": ("Running", {"restart_count": 2}),
                         "Worker-1": ("Running", {"restart_count": 1})},
                 ("Failed", "True", "PyTorchJobFailed"),
                 id="pod-scope-counts-each-in-place-restart"),
    pytest.param(WHOLE, 3, {**ALL_RUNNING, "Worker-0": ("Running", {"restart_count": 2}),
                            "Worker-1": ("Running", {"restart_count": 1})},
                 ("Restarting", "True", "PyTorchJobRestarting"),
                 id="whole-scope-counts-one-restart"),
])
def test_whole_job_restarts_count_once_against_backoff_limit(
        annotations: dict[str, str], backoff: int, phases: dict[str, Any],
        last: tuple[str, str, str]) -> None:
    outcome = status(annotations, [CREATED, RUNNING], phases,
                     spec={"runPolicy": {"backoffLimit": backoff}})
    assert summary(outcome.status.conditions)[-1] == last


@pytest.mark.parametrize(("annotations", "phases", "last"), [
    pytest.param({g.RESTART_LIMITS: "Worker=1", RESTARTS_BY_TYPE: "Worker=1"}, WORKER_FAILED,
                 ("Failed", "True", "PyTorchJobRestartLimitExceeded"), id="past-the-limit"),
    pytest.param({g.RESTART_LIMITS: "Worker=2", RESTARTS_BY_TYPE: "Worker=1"}, WORKER_FAILED,
                 ("Restarting", "True", "PyTorchJobRestarting"), id="within-the-limit"),
    pytest.param({g.RESTART_LIMITS: "Master=0", RESTARTS_BY_TYPE: "Worker=5"}, WORKER_FAILED,
                 ("Restarting", "True", "PyTorchJobRestarting"), id="another-types-limit"),
    pytest.param({g.RESTART_LIMITS: "Worker=0"}, WORKER_FAILED,
                 ("Failed", "True", "PyTorchJobRestartLimitExceeded"), id="zero"),
    pytest.param({g.RESTART_LIMITS: "Worker=2"},
                 {**ALL_RUNNING, "Worker-0": ("Running", {"restart_count": 3})},
                 ("Failed", "True", "PyTorchJobRestartLimitExceeded"),
                 id="in-place-restarts-count"),
    pytest.param({g.RESTART_LIMITS: "Worker=1", RESTARTS_BY_TYPE: "Worker=1",
                  RESTARTED_PODS_ANNOTATION: "uid-mnist-worker-1"}, WORKER_FAILED,
                 ("Restarting", "True", "PyTorchJobRestarting"), id="a-counted-failure-once"),
    pytest.param({**WHOLE, g.RESTART_LIMITS: "Worker=1", RESTARTS_BY_TYPE: "Worker=1"},
                 WORKER_RESTARTED_IN_PLACE,
                 ("Failed", "True", "PyTorchJobRestartLimitExceeded"), id="whole-job"),
])
def test_restart_limit_per_replica_type(annotations: dict[str, str], phases: dict[str, Any],
                                        last: tuple[str, str, str]) -> None:
    outcome = status(annotations, [CREATED, RUNNING], phases)
    assert summary(outcome.status.conditions)[-1] == last
    if last[2].endswith("RestartLimitExceeded"):
        assert outcome.status.conditions[-1].message.startswith(
            "PyTorchJob mnist has failed because its Worker replicas needed more than")


# -- reconcile: what a whole-job restart deletes ------------------------------------------------

def plan_of(file: str, annotations: dict[str, str], conditions: list[dict[str, Any]],
            pods: list[dict[str, Any]] | None = None, **observed: Any) -> Any:
    raw = job(file, annotations=annotations,
              status={"conditions": conditions, "startTime": stamp(-100)})
    return raw, reconcile_plan(Observed(job=raw, pods=pods or [], **observed), NOW, Settings())


def test_reconcile_deletes_every_pod_once_restarting() -> None:
    raw = job(PT, annotations=WHOLE)
    pods = pods_of(with_defaults(raw), WORKER_FAILED)
    _, plan = plan_of(PT, WHOLE, [CREATED, RESTARTING], pods)
    assert sorted(map(name_of, plan.restarts)) == [
        "mnist-master-0", "mnist-worker-0", "mnist-worker-1"]
    assert [o for o in plan.creates if o["kind"] == "Pod"] == []
    assert plan.restart_batch is not None and plan.restart_batch.whole is not None
    assert plan.restart_batch.whole.types == ("Worker",)


def test_reconcile_waits_for_the_persisted_restarting() -> None:
    raw = job(PT, annotations=WHOLE)
    _, plan = plan_of(PT, WHOLE, [CREATED, RUNNING], pods_of(with_defaults(raw),
                                                             WORKER_FAILED))
    assert plan.restarts == []


def test_reconcile_creates_the_pods_a_restart_deleted_once_gone() -> None:
    annotations = {**WHOLE, RESTARTED_PODS_ANNOTATION: "uid-mnist-master-0"}
    raw = job(PT, annotations=annotations)
    pods = pods_of(with_defaults(raw), {"Master-0": "Running"})
    pods[0]["metadata"]["deletionTimestamp"] = stamp()
    _, plan = plan_of(PT, annotations, [CREATED, RESTARTING], pods)
    assert plan.restarts == []
    assert sorted(name_of(o) for o in plan.creates if o["kind"] == "Pod") == [
        "mnist-worker-0", "mnist-worker-1"]


def _mpi_worker(index: int, phase: str, uid: str = "", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"pi-worker-{index}", "uid": uid or f"w{index}", "labels": {
        "training.kubeflow.org/job-role": "worker",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": str(index)}},
        "status": {"phase": phase, **status}}


def test_mpijob_whole_restart_takes_the_launcher_job() -> None:
    launcher = {"metadata": {"name": "pi-launcher", "uid": "l1"}, "spec": {"suspend": False},
                "status": {}}
    launcher_pod = {"metadata": {"name": "pi-launcher-x", "uid": "lp", "labels": {
        "training.kubeflow.org/job-role": "launcher"}}, "status": {"phase": "Running"}}
    restarting = condition("Restarting", reason="MPIJobRestarting")
    workers = [_mpi_worker(0, "Running"), _mpi_worker(1, "Failed")]
    spec = {"mpiReplicaSpecs": {"Worker": {"restartPolicy": "OnFailure"}}}
    raw = job(MPI, spec=spec, annotations=WHOLE,
              status={"conditions": [condition("Created", reason="MPIJobCreated"),
                                     restarting], "startTime": stamp(-100)})
    plan = reconcile_plan(Observed(job=raw, pods=[*workers, launcher_pod], launcher=launcher,
                                   services=[{"metadata": {"name": "pi"}}]), NOW, Settings())
    assert sorted(map(name_of, plan.restarts)) == ["pi-worker-0", "pi-worker-1"]
    assert launcher in plan.deletes
    assert not any(o["kind"] == "Job" for o in plan.creates)
    assert plan.restart_batch is not None and plan.restart_batch.also == ("lp",)


def test_mpijob_v1_whole_restart_takes_the_launcher_pod() -> None:
    # training-operator's MPIJob restarts only under ExitCode (a retryable code)
    raw = job(MPI_V1, annotations=WHOLE, spec={"mpiReplicaSpecs": {
        "Worker": {"restartPolicy": "ExitCode"}}},
        status={"conditions": [condition("Created", reason="MPIJobCreated"),
                               condition("Restarting", reason="MPIJobRestarting")],
                "startTime": stamp(-100)})
    d = with_defaults(raw)
    pods = [pod(d, "Launcher", 0, "Running"), pod(d, "Worker", 0, "Running"),
            pod(d, "Worker", 1, "Failed", exit_code=137)]
    pods[0]["metadata"]["name"] = "pi-launcher"
    plan = reconcile_plan(Observed(job=raw, pods=pods), NOW, Settings())
    assert sorted(map(name_of, plan.restarts)) == ["pi-launcher", "pi-worker-0",
                                                    "pi-worker-1"]


# -- how a restart is recorded ----------------------------------------------------------------

def _batch(file: str, annotations: dict[str, str], phases: dict[str, Any]) -> Any:
    raw = job(file, annotations=annotations)
    pods = pods_of(with_defaults(raw), phases)
    _, plan = plan_of(file, annotations, [CREATED, RESTARTING], pods)
    return plan


@pytest.mark.parametrize(("annotations", "counted", "expected"), [
    pytest.param(WHOLE, {}, {RESTARTS_ANNOTATION: "1", RESTARTS_BY_TYPE: "Worker=1",
                             RESTARTED_PODS_ANNOTATION: "uid-mnist-master-0,"
                             "uid-mnist-worker-0,uid-mnist-worker-1"}, id="whole-counts-once"),
    pytest.param(WHOLE, {RESTARTS_ANNOTATION: "2", RESTARTS_BY_TYPE: "Master=1,Worker=1"},
                 {RESTARTS_ANNOTATION: "3", RESTARTS_BY_TYPE: "Master=1,Worker=2",
                  RESTARTED_PODS_ANNOTATION: "uid-mnist-master-0,uid-mnist-worker-0,"
                  "uid-mnist-worker-1"}, id="whole-adds-to-the-counts"),
    pytest.param(WHOLE, {RESTARTED_PODS_ANNOTATION: "uid-mnist-master-0,uid-mnist-worker-0,"
                         "uid-mnist-worker-1"}, None, id="whole-counted-already"),
    pytest.param({}, {RESTARTS_ANNOTATION: "4"},
                 {RESTARTS_ANNOTATION: "5", RESTARTS_BY_TYPE: "Worker=1",
                  RESTARTED_PODS_ANNOTATION: "uid-mnist-worker-1"}, id="per-pod"),
])
def test_restart_record(annotations: dict[str, str], counted: dict[str, str],
                        expected: dict[str, str] | None) -> None:
    plan = _batch(PT, annotations, WORKER_FAILED)
    uids = sorted(p["metadata"]["uid"] for p in plan.restarts)
    assert _restart_patch({**annotations, **counted}, uids, plan.restart_batch) == expected
