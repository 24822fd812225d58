from __future__ import annotations

from typing import Any

import pytest

from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.model import Job
from functions.jobs.core.status import StatusOutcome, count_replicas, derive_status, regresses
from tests.jobs.fixtures import NOW, condition, job, load, pod, stamp, summary

PT = "pytorch-master-workers.yaml"
TF = "tfjob-chief-workers.yaml"
TF_NO_CHIEF = "tfjob-ps-worker-evaluator.yaml"
MX = "mxjob-train.yaml"
XGB = "xgboostjob-master-workers.yaml"
PADDLE_PS = "paddlejob-ps.yaml"
PADDLE = "paddlejob-collective.yaml"
JAX = "jaxjob-workers.yaml"
CREATED_PT = condition("Created", reason="PyTorchJobCreated")
RUNNING_PT = condition("Running", reason="PyTorchJobRunning")


def derive(file: str, pods: list[tuple[Any, ...]], *, status: dict[str, Any] | None = None,
           spec: dict[str, Any] | None = None, restarts: int = 0) -> StatusOutcome:
    raw = job(file, spec=spec, status=status if status is not None else {
        "conditions": [condition("Created", reason=f"{_kind(file)}Created")],
        "startTime": stamp(-100)})
    j = with_defaults(raw)
    observed = [pod(j, *args) if isinstance(args[-1], str | int) else pod(j, *args[:-1],
                                                                         **args[-1])
                for args in pods]
    outcome = derive_status(j, observed, NOW, restarts=restarts)
    assert outcome is not None
    return outcome


def _kind(file: str) -> str:
    return str(load(file)["kind"])


def last(outcome: StatusOutcome) -> tuple[str, str, str]:
    return summary(outcome.status.conditions)[-1]


@pytest.mark.parametrize(("file", "pods", "expected", "message"), [
    pytest.param(PT, [("Master", 0, "Running"), ("Worker", 0, "Running")],
                 ("Running", "True", "PyTorchJobRunning"), "PyTorchJob mnist is running.",
                 id="pytorch-master-running"),
    pytest.param(PT, [("Master", 0, "Pending"), ("Worker", 0, "Running")],
                 ("Created", "True", "PyTorchJobCreated"), "",
                 id="pytorch-only-master-drives-running"),
    pytest.param(PT, [("Master", 0, "Succeeded"), ("Worker", 0, "Running")],
                 ("Succeeded", "True", "PyTorchJobSucceeded"),
                 "PyTorchJob mnist is successfully completed.", id="pytorch-master-succeeded"),
    pytest.param(PT, [("Master", 0, "Succeeded"), ("Worker", 0, "Failed")],
                 ("Succeeded", "True", "PyTorchJobSucceeded"),
                 "PyTorchJob mnist is successfully completed.",
                 id="pytorch-master-success-wins-over-worker-failure"),
    pytest.param(PT, [("Master", 0, "Running"), ("Worker", 0, "Failed"),
                      ("Worker", 1, "Running")],
                 ("Restarting", "True", "PyTorchJobRestarting"),
                 "PyTorchJob mnist is restarting because 1 Worker replica(s) failed.",
                 id="pytorch-onfailure-restarts"),
    pytest.param("pytorch-elastic.yaml", [("Worker", 0, "Succeeded"), ("Worker", 1, "Running")],
                 ("Succeeded", "True", "PyTorchJobSucceeded"),
                 "PyTorchJob team-a/elastic successfully completed.",
                 id="pytorch-elastic-any-worker"),
    pytest.param("pytorch-elastic.yaml", [("Worker", 0, "Running"), ("Worker", 1, "Running")],
                 ("Running", "True", "PyTorchJobRunning"), "PyTorchJob team-a/elastic is running.",
                 id="pytorch-no-master-running"),
    pytest.param(TF, [("Chief", 0, "Running"), ("Worker", 0, "Running")],
                 ("Running", "True", "TFJobRunning"), "TFJob team-b/dist-mnist is running.",
                 id="tf-chief-running"),
    pytest.param(TF, [("Chief", 0, "Succeeded"), ("Worker", 0, "Running")],
                 ("Succeeded", "True", "TFJobSucceeded"),
                 "TFJob team-b/dist-mnist successfully completed.", id="tf-chief-succeeded"),
    pytest.param(TF, [("Chief", 0, "Failed", {"exit_code": 1})],
                 ("Failed", "True", "TFJobFailed"),
                 "TFJob team-b/dist-mnist has failed because 1 Chief replica(s) failed.",
                 id="tf-never-policy-fails"),
    pytest.param(TF, [("Chief", 0, "Running"), ("Worker", 0, "Failed", {"exit_code": 137})],
                 ("Restarting", "True", "TFJobRestarting"),
                 "job dist-mnist is restarting because Worker replica(s) failed.",
                 id="tf-exitcode-137-restarts"),
    pytest.param(TF, [("Chief", 0, "Running"), ("Worker", 0, "Failed", {"exit_code": 1})],
                 ("Failed", "True", "TFJobFailed"),
                 'job "dist-mnist" is failing because "Worker" replica(s) failed.',
                 id="tf-exitcode-1-permanent"),
    pytest.param(TF, [("Chief", 0, "Running"), ("Worker", 0, "Failed")],
                 ("Restarting", "True", "TFJobRestarting"),
                 "job dist-mnist is restarting because Worker replica(s) failed.",
                 id="tf-missing-exit-code-is-retryable"),
    pytest.param(MX, [("Scheduler", 0, "Running")], ("Running", "True", "MXJobRunning"),
                 "MXJob mxnet-job is running.", id="mx-running"),
    pytest.param(MX, [("Scheduler", 0, "Succeeded")], ("Succeeded", "True", "MXJobSucceeded"),
                 "MXJob mxnet-job is successfully completed.", id="mx-succeeded"),
    pytest.param(MX, [("Scheduler", 0, "Running"), ("Server", 0, "Failed")],
                 ("Failed", "True", "MXJobFailed"),
                 "mxjob mxnet-job is failed because 1 Server replica(s) failed.",
                 id="mx-server-failed"),
    pytest.param(XGB, [("Master", 0, "Running"), ("Worker", 0, "Running")],
                 ("Running", "True", "XGBoostJobRunning"), "XGBoostJob iris is running.",
                 id="xgboost-master-running"),
    pytest.param(XGB, [("Master", 0, "Pending"), ("Worker", 0, "Running")],
                 ("Created", "True", "XGBoostJobCreated"), "",
                 id="xgboost-only-master-drives-running"),
    pytest.param(XGB, [("Master", 0, "Succeeded"), ("Worker", 0, "Running")],
                 ("Succeeded", "True", "XGBoostJobSucceeded"),
                 "XGBoostJob iris is successfully completed.", id="xgboost-master-succeeded"),
    pytest.param(XGB, [("Master", 0, "Running"), ("Worker", 0, "Failed", {"exit_code": 137})],
                 ("Restarting", "True", "XGBoostJobRestarting"),
                 "XGBoostJob iris is restarting because 1 Worker replica(s) failed.",
                 id="xgboost-exitcode-137-restarts"),
    pytest.param(XGB, [("Master", 0, "Failed", {"exit_code": 1})],
                 ("Failed", "True", "XGBoostJobFailed"),
                 "XGBoostJob iris is failed because 1 Master replica(s) failed.",
                 id="xgboost-never-policy-fails"),
    pytest.param(PADDLE_PS, [("Master", 0, "Running"), ("Worker", 0, "Pending")],
                 ("Running", "True", "PaddleJobRunning"), "PaddleJob paddle-ps is running.",
                 id="paddle-master-running"),
    pytest.param(PADDLE_PS, [("Master", 0, "Succeeded"), ("Worker", 0, "Running")],
                 ("Succeeded", "True", "PaddleJobSucceeded"),
                 "PaddleJob paddle-ps is successfully completed.", id="paddle-master-succeeded"),
    pytest.param(PADDLE_PS, [("Master", 0, "Running"), ("Worker", 0, "Failed"),
                             ("Worker", 1, "Running")],
                 ("Restarting", "True", "PaddleJobRestarting"),
                 "PaddleJob paddle-ps is restarting because 1 Worker replica(s) failed.",
                 id="paddle-onfailure-restarts"),
    pytest.param(PADDLE, [("Worker", i, "Running") for i in range(3)],
                 ("Running", "True", "PaddleJobRunning"), "PaddleJob team-p/paddle-col is running.",
                 id="paddle-collective-running"),
    pytest.param(PADDLE, [("Worker", 0, "Succeeded"), ("Worker", 1, "Succeeded"),
                          ("Worker", 2, "Running")],
                 ("Running", "True", "PaddleJobRunning"), "PaddleJob team-p/paddle-col is running.",
                 id="paddle-elastic-policy-does-not-end-job-early"),
    pytest.param(PADDLE, [("Worker", i, "Succeeded") for i in range(3)],
                 ("Succeeded", "True", "PaddleJobSucceeded"),
                 "PaddleJob team-p/paddle-col successfully completed.",
                 id="paddle-collective-succeeded"),
    pytest.param(PADDLE, [("Worker", 0, "Running"), ("Worker", 1, "Failed", {"exit_code": 1}),
                          ("Worker", 2, "Running")],
                 ("Failed", "True", "PaddleJobFailed"),
                 "PaddleJob paddle-col is failed because 1 Worker replica(s) failed.",
                 id="paddle-never-policy-fails"),
    pytest.param(JAX, [("Worker", 0, "Running"), ("Worker", 1, "Running")],
                 ("Running", "True", "JAXJobRunning"), "JAXJob team-j/spmd is running.",
                 id="jax-running"),
    pytest.param(JAX, [("Worker", 0, "Succeeded"), ("Worker", 1, "Running")],
                 ("Running", "True", "JAXJobRunning"), "JAXJob team-j/spmd is running.",
                 id="jax-waits-for-every-worker"),
    pytest.param(JAX, [("Worker", 0, "Succeeded"), ("Worker", 1, "Succeeded")],
                 ("Succeeded", "True", "JAXJobSucceeded"),
                 "JAXJob team-j/spmd successfully completed.", id="jax-succeeded"),
    pytest.param(JAX, [("Worker", 0, "Running"), ("Worker", 1, "Failed", {"exit_code": 2})],
                 ("Failed", "True", "JAXJobFailed"),
                 "JAXJob spmd is failed because 1 Worker replica(s) failed.",
                 id="jax-never-policy-fails"),
])
def test_framework_rules(file: str, pods: list[tuple[Any, ...]],
                         expected: tuple[str, str, str], message: str) -> None:
    outcome = derive(file, pods)
    assert last(outcome) == expected
    if message:
        assert outcome.status.conditions[-1].message == message


def test_tf_chief_succeeded_workers_failed_has_both() -> None:
    outcome = derive(TF, [("Chief", 0, "Succeeded"), ("Worker", 0, "Failed", {"exit_code": 1}),
                          ("Worker", 1, "Failed", {"exit_code": 2})],
                     spec={"tfReplicaSpecs": {"Worker": {"restartPolicy": "Never"}}})
    kinds = [(t, s) for t, s, _ in summary(outcome.status.conditions)]
    assert ("Succeeded", "True") in kinds
    assert ("Running", "True") not in kinds


TWO_WORKERS = {"tfReplicaSpecs": {"Worker": {"replicas": 2}}}


@pytest.mark.parametrize(("worker0", "policy", "succeeded"), [
    pytest.param(("Worker", 0, "Succeeded", {"exit_code": 0}), "", True,
                 id="worker0-completed"),
    pytest.param(("Worker", 0, "Succeeded"), "", False, id="worker0-without-exit-code"),
    pytest.param(("Worker", 0, "Succeeded", {"exit_code": 0}), "AllWorkers", False,
                 id="all-workers-policy-waits"),
])
def test_tf_worker0_rule(worker0: tuple[Any, ...], policy: str, succeeded: bool) -> None:
    outcome = derive(TF_NO_CHIEF, [worker0, ("Worker", 1, "Running"), ("PS", 0, "Running")],
                     spec={**TWO_WORKERS, "successPolicy": policy})
    assert outcome.status.is_true("Succeeded") is succeeded
    if succeeded:
        assert outcome.status.conditions[-1].message == (
            "TFJob ns3/test-tfjob successfully completed.")


def test_tf_dynamic_worker_failure_ignored() -> None:
    outcome = derive(TF_NO_CHIEF, [("Worker", 0, "Failed", {"exit_code": 1}),
                                   ("PS", 0, "Running"), ("Evaluator", 0, "Running")],
                     spec={"enableDynamicWorker": True})
    assert not outcome.status.is_true("Failed")


def test_created_first_and_start_time() -> None:
    outcome = derive(PT, [], status={})
    assert summary(outcome.status.conditions) == [("Created", "True", "PyTorchJobCreated")]
    assert outcome.status.conditions[0].message == "PyTorchJob mnist is created."
    assert outcome.status.start_time == stamp()
    assert outcome.notices == []  # as training-operator: a condition, no Event


def test_replica_counts_and_selector() -> None:
    j = with_defaults(job(PT))
    pods = [pod(j, "Master", 0, "Running"), pod(j, "Worker", 0, "Running", deleting=True),
            pod(j, "Worker", 1, "Succeeded"), pod(j, "Worker", 2, "Pending")]
    counts = count_replicas(j, pods)
    assert counts["Master"].model_dump(exclude={"selector"}) == {
        "active": 1, "succeeded": 0, "failed": 0}
    assert counts["Worker"].model_dump(exclude={"selector"}) == {
        "active": 0, "succeeded": 1, "failed": 1}
    assert counts["Worker"].selector == (
        "training.kubeflow.org/job-name=mnist,training.kubeflow.org/operator-name="
        "pytorchjob-controller,training.kubeflow.org/replica-type=worker")
    assert count_replicas(with_defaults(job(TF)), [])["Chief"].selector is None


def test_succeeded_sets_completion_time_and_flips_running() -> None:
    status = {"conditions": [CREATED_PT, RUNNING_PT], "startTime": stamp(-100)}
    outcome = derive(PT, [("Master", 0, "Succeeded")], status=status)
    assert summary(outcome.status.conditions) == [
        ("Created", "True", "PyTorchJobCreated"), ("Running", "False", "PyTorchJobRunning"),
        ("Succeeded", "True", "PyTorchJobSucceeded")]
    assert outcome.status.completion_time == stamp()


def test_finished_job_folds_active_into_succeeded() -> None:
    status = {"conditions": [CREATED_PT, condition("Succeeded", reason="PyTorchJobSucceeded")],
              "replicaStatuses": {"Master": {"succeeded": 1},
                                  "Worker": {"active": 2, "succeeded": 0}},
              "completionTime": stamp(-5)}
    outcome = derive(PT, [], status=status)
    assert outcome.status.replica_statuses["Worker"].model_dump(exclude_none=True) == {
        "active": 0, "succeeded": 2, "failed": 0}
    assert outcome.status.completion_time == stamp(-5)


def test_failed_is_final() -> None:
    status = {"conditions": [CREATED_PT, condition("Failed", reason="PyTorchJobFailed")]}
    outcome = derive(PT, [("Master", 0, "Running")], status=status)
    assert last(outcome) == ("Failed", "True", "PyTorchJobFailed")


@pytest.mark.parametrize(("status", "expected"), [
    pytest.param({"conditions": [CREATED_PT]},
                 [("Created", "True", "PyTorchJobCreated"),
                  ("Suspended", "True", "PyTorchJobSuspended")], id="created-suspended"),
    pytest.param({"conditions": [CREATED_PT, RUNNING_PT], "startTime": stamp(-50),
                  "replicaStatuses": {"Master": {"active": 1}}},
                 [("Created", "True", "PyTorchJobCreated"),
                  ("Running", "False", "PyTorchJobSuspended"),
                  ("Suspended", "True", "PyTorchJobSuspended")], id="running-then-suspended"),
])
def test_suspend(status: dict[str, Any], expected: list[tuple[str, str, str]]) -> None:
    outcome = derive(PT, [("Master", 0, "Running")], status=status,
                     spec={"runPolicy": {"suspend": True}})
    assert summary(outcome.status.conditions) == expected
    assert outcome.status.start_time == status.get("startTime")
    assert all(rs.active == 0 for rs in outcome.status.replica_statuses.values())
    assert outcome.status.conditions[-1].message == "PyTorchJob mnist is suspended."


def test_resume_resets_start_time() -> None:
    status = {"conditions": [CREATED_PT, condition("Running", "False", "PyTorchJobSuspended"),
                             condition("Suspended", reason="PyTorchJobSuspended")],
              "startTime": stamp(-500)}
    outcome = derive(PT, [("Master", 0, "Running")], status=status)
    assert summary(outcome.status.conditions) == [
        ("Created", "True", "PyTorchJobCreated"), ("Suspended", "False", "PyTorchJobResumed"),
        ("Running", "True", "PyTorchJobRunning")]
    assert outcome.status.start_time == stamp()
    assert outcome.status.conditions[1].message == "PyTorchJob mnist is resumed."


@pytest.mark.parametrize(("spec", "pods", "restarts", "message"), [
    pytest.param({"runPolicy": {"activeDeadlineSeconds": 100}}, [("Master", 0, "Running")], 0,
                 "Job mnist has failed because it was active longer than specified deadline",
                 id="deadline-reached"),
    pytest.param({"runPolicy": {"activeDeadlineSeconds": 101}}, [("Master", 0, "Running")], 0,
                 None, id="deadline-not-reached"),
    pytest.param({"runPolicy": {"backoffLimit": 2}},
                 [("Master", 0, "Running", {"restart_count": 2})], 0,
                 "Job mnist has failed because it has reached the specified backoff limit",
                 id="backoff-container-restarts"),
    pytest.param({"runPolicy": {"backoffLimit": 3}},
                 [("Master", 0, "Running", {"restart_count": 1})], 2,
                 "Job mnist has failed because it has reached the specified backoff limit",
                 id="backoff-counts-persisted-restarts"),
    pytest.param({"runPolicy": {"backoffLimit": 3}}, [("Master", 0, "Running")], 2, None,
                 id="backoff-below-limit"),
    pytest.param({"runPolicy": {"backoffLimit": 0}},
                 [("Worker", 0, "Running", {"restart_count": 1})], 0,
                 "Job mnist has failed because it has reached the specified backoff limit",
                 id="backoff-zero"),
])
def test_limits(spec: dict[str, Any], pods: list[tuple[Any, ...]], restarts: int,
                message: str | None) -> None:
    outcome = derive(PT, pods, spec=spec, restarts=restarts)
    if message is None:
        assert not outcome.status.is_true("Failed")
    else:
        assert last(outcome) == ("Failed", "True", "PyTorchJobFailed")
        assert outcome.status.conditions[-1].message == message
        assert outcome.status.completion_time == stamp()


def test_deadline_requeue() -> None:
    outcome = derive(PT, [("Master", 0, "Running")],
                     spec={"runPolicy": {"activeDeadlineSeconds": 130}})
    assert outcome.requeue_after == 30


def test_exit_code_events() -> None:
    outcome = derive(TF, [("Chief", 0, "Running"), ("Worker", 0, "Failed", {"exit_code": 137})])
    assert ("Normal", "ExitedWithCode", "Pod: team-b.dist-mnist-worker-0 exited with code 137") in [
        (n.type, n.reason, n.message) for n in outcome.notices]


def test_externally_managed_gets_no_status() -> None:
    j: Job = with_defaults(job(PT, spec={"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}}))
    assert derive_status(j, [], NOW) is None


def test_xgboost_success_lists_running_even_when_never_seen() -> None:
    outcome = derive(XGB, [("Master", 0, "Succeeded")])
    assert summary(outcome.status.conditions) == [
        ("Created", "True", "XGBoostJobCreated"), ("Running", "False", "XGBoostJobRunning"),
        ("Succeeded", "True", "XGBoostJobSucceeded")]


@pytest.mark.parametrize(("file", "policy", "expected", "message"), [
    pytest.param(XGB, "OnFailure", ("Failed", "True", "XGBoostJobFailed"),
                 "XGBoostJob iris is failed because 1 Worker replica(s) failed.",
                 id="xgboost-only-exitcode-restarts"),
    pytest.param(JAX, "OnFailure", ("Restarting", "True", "JAXJobRestarting"),
                 "JAXJob spmd is restarting because 1 Worker replica(s) failed.",
                 id="jax-onfailure-restarts"),
    pytest.param(PADDLE, "ExitCode", ("Restarting", "True", "PaddleJobRestarting"),
                 "PaddleJob paddle-col is restarting because 1 Worker replica(s) failed.",
                 id="paddle-exitcode-137-restarts"),
])
def test_failed_worker_by_restart_policy(file: str, policy: str,
                                         expected: tuple[str, str, str], message: str) -> None:
    field = next(k for k in load(file)["spec"] if k.endswith("ReplicaSpecs"))
    key = next(k for k in load(file)["spec"][field] if k.lower() == "worker")
    pods = [("Worker", 0, "Running"), ("Worker", 1, "Failed", {"exit_code": 137})]
    if file == XGB:
        pods.insert(0, ("Master", 0, "Running"))
    outcome = derive(file, pods, spec={field: {key: {"restartPolicy": policy}}})
    assert last(outcome) == expected
    assert outcome.status.conditions[-1].message == message


@pytest.mark.parametrize(("file", "rtype", "selector"), [
    pytest.param(PADDLE_PS, "Worker", "training.kubeflow.org/job-name=paddle-ps,"
                 "training.kubeflow.org/operator-name=paddlejob-controller,"
                 "training.kubeflow.org/replica-type=worker", id="paddle"),
    pytest.param(JAX, "Worker", "training.kubeflow.org/job-name=spmd,"
                 "training.kubeflow.org/operator-name=jaxjob-controller,"
                 "training.kubeflow.org/replica-type=worker", id="jax"),
    pytest.param(XGB, "Worker", None, id="xgboost-has-no-scale-subresource"),
])
def test_scale_selector(file: str, rtype: str, selector: str | None) -> None:
    assert count_replicas(with_defaults(job(file)), [])[rtype].selector == selector


def _wire(active: int = 0, succeeded: int = 0, failed: int = 0,
          true: tuple[str, ...] = ("Created",)) -> dict[str, Any]:
    return {"conditions": [{"type": t, "status": "True"} for t in true],
            "replicaStatuses": {"Worker": {"active": active, "succeeded": succeeded,
                                           "failed": failed}}}


@pytest.mark.parametrize(("persisted", "derived", "backwards"), [
    pytest.param(_wire(), _wire(active=2), False, id="more-active"),
    pytest.param(_wire(active=2), _wire(active=1), True, id="fewer-active"),
    pytest.param(_wire(succeeded=1), _wire(succeeded=0), True, id="fewer-succeeded"),
    pytest.param(_wire(true=("Created", "Running")), _wire(), True, id="running-lost"),
    pytest.param(_wire(active=2, true=("Created", "Running")),
                 _wire(succeeded=2, true=("Created", "Succeeded")), True,
                 id="finishing-is-confirmed-too"),
    pytest.param({}, _wire(), False, id="first-status"),
    pytest.param(_wire(active=1), {"conditions": [], "replicaStatuses": {}}, True,
                 id="replica-type-gone"),
])
def test_regresses(persisted: dict[str, Any], derived: dict[str, Any], backwards: bool) -> None:
    assert regresses(persisted, derived) is backwards
