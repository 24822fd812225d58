from __future__ import annotations

import base64
from typing import Any

import pytest

from functions.jobs.core import mpi
from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.mpi_plan import WORKERS_READY_RECHECK_SECONDS
from functions.jobs.core.mpi_status import derive_mpi_status
from functions.jobs.core.plan import gc_plan, reconcile_plan
from functions.jobs.core.planning import Observed
from functions.jobs.core.pods import name_of
from functions.jobs.core.settings import Settings
from tests.jobs.fixtures import NOW, condition, job, stamp, summary

FILE = "mpijob-pi.yaml"
KEYS = mpi.SSHKeys(b"-----BEGIN EC PRIVATE KEY-----\nx\n-----END EC PRIVATE KEY-----\n",
                   b"ecdsa-sha2-nistp521 AAAA\n")


@pytest.mark.parametrize(("spec", "domain", "expected"), [
    pytest.param({}, "", "pi-worker-0.pi.team-d.svc slots=2\npi-worker-1.pi.team-d.svc slots=2\n",
                 id="openmpi"),
    pytest.param({"mpiImplementation": "Intel"}, "",
                 "pi-worker-0.pi.team-d.svc:2\npi-worker-1.pi.team-d.svc:2\n", id="intel"),
    pytest.param({"runLauncherAsWorker": True}, "cluster.local",
                 "pi-launcher.pi.team-d.svc.cluster.local slots=2\n"
                 "pi-worker-0.pi.team-d.svc.cluster.local slots=2\n"
                 "pi-worker-1.pi.team-d.svc.cluster.local slots=2\n",
                 id="launcher-as-worker-with-domain"),
])
def test_hostfile(spec: dict[str, Any], domain: str, expected: str) -> None:
    assert mpi.hostfile(with_defaults(job(FILE, spec=spec)), domain) == expected


def test_discover_hosts_lists_running_workers_sorted() -> None:
    d = with_defaults(job(FILE))
    assert mpi.discover_hosts(d, ["pi-worker-1", "pi-worker-0"]) == (
        "#!/bin/sh\necho pi-worker-0.pi.team-d.svc\necho pi-worker-1.pi.team-d.svc\n")


def test_secret_and_service() -> None:
    d = with_defaults(job(FILE))
    secret = mpi.ssh_secret(d, KEYS)
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert base64.b64decode(secret["data"]["ssh-publickey"]) == KEYS.public_openssh
    assert secret["metadata"]["name"] == "pi-ssh"
    svc = mpi.service(d)
    assert svc["spec"] == {"clusterIP": "None", "publishNotReadyAddresses": False,
                           "selector": {"training.kubeflow.org/operator-name": "mpi-operator",
                                        "training.kubeflow.org/job-name": "pi"}}


def test_worker_pod() -> None:
    worker = mpi.worker_pod(with_defaults(job(FILE)), 1, Settings())
    assert worker["metadata"]["name"] == "pi-worker-1"
    assert worker["metadata"]["labels"] == {
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "pi", "training.kubeflow.org/job-role": "worker",
        "training.kubeflow.org/replica-index": "1"}
    spec = worker["spec"]
    assert (spec["hostname"], spec["subdomain"], spec["restartPolicy"]) == (
        "pi-worker-1", "pi", "Never")
    main = spec["containers"][0]
    assert main["command"] == ["/usr/sbin/sshd", "-De"]
    assert main["env"] == [{"name": "K_MPI_JOB_ROLE", "value": "worker"}]
    assert main["volumeMounts"] == [{"name": "ssh-auth", "mountPath": "/root/.ssh"}]
    assert spec["volumes"][0]["secret"]["defaultMode"] == 0o600


def test_service_carries_the_job_name_label() -> None:
    found = mpi.service(with_defaults(job(FILE)))
    assert found["metadata"]["labels"]["training.kubeflow.org/job-name"] == "pi"
    assert found["metadata"]["labels"]["app"] == "pi"


def test_launcher_job() -> None:
    launcher = mpi.launcher_job(with_defaults(job(FILE)), Settings())
    assert launcher["metadata"]["labels"]["training.kubeflow.org/job-name"] == "pi"
    spec = launcher["spec"]
    assert launcher["metadata"]["name"] == "pi-launcher"
    assert (spec["backoffLimit"], spec["ttlSecondsAfterFinished"], spec["suspend"]) == (
        3, 60, False)
    assert spec["podReplacementPolicy"] == "Failed"
    pod_spec = spec["template"]["spec"]
    assert pod_spec["restartPolicy"] == "OnFailure"
    assert spec["template"]["metadata"]["labels"]["training.kubeflow.org/job-role"] == (
        "launcher")
    env = {e["name"]: e["value"] for e in pod_spec["containers"][0]["env"]}
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["OMPI_MCA_orte_set_default_slots"] == "2"
    assert env["NVIDIA_VISIBLE_DEVICES"] == ""
    assert {v["name"] for v in pod_spec["volumes"]} == {"ssh-auth", "mpi-job-config"}


@pytest.mark.parametrize(("settings", "scheduler", "annotations", "label"), [
    pytest.param(Settings(), None, None, None, id="no-gang-scheduler"),
    pytest.param(Settings(gang_scheduler="volcano"), "volcano",
                 {"scheduling.k8s.io/group-name": "pi"}, None, id="volcano"),
    pytest.param(Settings(gang_scheduler="scheduler-plugins",
                          gang_scheduler_name="coscheduler"), "coscheduler", None, "pi",
                 id="scheduler-plugins"),
])
def test_gang_decoration_of_workers_and_launcher(settings: Settings, scheduler: str | None,
                                                 annotations: dict[str, str] | None,
                                                 label: str | None) -> None:
    d = with_defaults(job(FILE))
    d.replica_specs["Worker"].template.setdefault("spec", {})["schedulerName"] = "other"
    worker = mpi.worker_pod(d, 0, settings)
    launcher = mpi.launcher_job(d, settings)["spec"]["template"]
    for meta, spec, template_scheduler in ((worker["metadata"], worker["spec"], "other"),
                                           (launcher["metadata"], launcher["spec"], None)):
        assert spec.get("schedulerName") == (scheduler or template_scheduler)
        assert meta.get("annotations") == annotations
        assert meta["labels"].get("scheduling.x-k8s.io/pod-group") == label


def _worker(index: int, phase: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"pi-worker-{index}", "uid": f"w{index}", "labels": {
        "training.kubeflow.org/job-role": "worker",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": str(index)}},
        "status": {"phase": phase, **extra}}


def _launcher_pod(phase: str) -> dict[str, Any]:
    return {"metadata": {"name": "pi-launcher-abc", "creationTimestamp": stamp(),
                         "labels": {"training.kubeflow.org/job-role": "launcher"}},
            "status": {"phase": phase, "reason": "Error", "message": "mpirun exited"}}


def _batch(conditions: list[dict[str, str]], **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "pi-launcher", "uid": "l1"},
            "spec": {"suspend": False}, "status": {"conditions": conditions, **status}}


@pytest.mark.parametrize(("workers", "launcher", "launcher_pods", "expected"), [
    pytest.param([_worker(0, "Running"), _worker(1, "Running")], _batch([]),
                 [_launcher_pod("Running")], ("Running", "True", "MPIJobRunning"),
                 id="running"),
    pytest.param([_worker(0, "Running"), _worker(1, "Pending")], _batch([]),
                 [_launcher_pod("Running")], ("Created", "True", "MPIJobCreated"),
                 id="not-all-workers-running"),
    pytest.param([], _batch([{"type": "Complete", "status": "True"}],
                            completionTime=stamp(-3)), [],
                 ("Succeeded", "True", "MPIJobSucceeded"), id="succeeded"),
    pytest.param([], _batch([{"type": "Failed", "status": "True",
                              "reason": "BackoffLimitExceeded",
                              "message": "Job has reached the specified backoff limit"}],
                            failed=4), [_launcher_pod("Failed")],
                 ("Failed", "True", "BackoffLimitExceeded/Error"), id="launcher-failed"),
    pytest.param([_worker(0, "Failed", reason="Evicted"), _worker(1, "Running")], _batch([]),
                 [], ("Failed", "True", "MPIJobEvicted"), id="evicted"),
])
def test_mpi_status(workers: list[dict[str, Any]], launcher: dict[str, Any],
                    launcher_pods: list[dict[str, Any]], expected: tuple[str, str, str]) -> None:
    outcome = derive_mpi_status(with_defaults(job(FILE)), workers, launcher, launcher_pods, NOW)
    assert outcome is not None
    assert summary(outcome.status.conditions)[-1] == expected


def test_mpi_status_messages() -> None:
    d = with_defaults(job(FILE))
    done = derive_mpi_status(d, [], _batch([{"type": "Complete", "status": "True"}],
                                           completionTime=stamp(-3)), [], NOW)
    assert done is not None
    assert summary(done.status.conditions) == [("Created", "True", "MPIJobCreated"),
                                               ("Running", "False", "MPIJobRunning"),
                                               ("Succeeded", "True", "MPIJobSucceeded")]
    assert done.status.conditions[0].message == "MPIJob team-d/pi is created."
    assert done.status.conditions[1].message == (
        "MPIJob team-d/pi is finished but Running condition was never set.")
    assert done.status.conditions[2].message == "MPIJob team-d/pi successfully completed."
    assert done.status.completion_time == stamp(-3)
    assert done.status.replica_statuses["Launcher"].succeeded == 1
    failed = derive_mpi_status(d, [], _batch([{"type": "Failed", "status": "True",
                                               "reason": "BackoffLimitExceeded",
                                               "message": "Job has reached the specified "
                                                          "backoff limit"}]),
                               [_launcher_pod("Failed")], NOW)
    assert failed is not None
    assert failed.status.condition("Failed") is not None
    assert failed.status.conditions[-1].message == (
        "Job has reached the specified backoff limit: mpirun exited")


def test_mpi_suspend_and_resume() -> None:
    suspended = derive_mpi_status(with_defaults(job(FILE, spec={"runPolicy": {"suspend": True}})),
                                  [], None, [], NOW)
    assert suspended is not None
    assert summary(suspended.status.conditions) == [
        ("Created", "True", "MPIJobCreated"), ("Suspended", "True", "MPIJobSuspended"),
        ("Running", "False", "MPIJobSuspended")]
    assert suspended.status.start_time is None
    resumed = derive_mpi_status(with_defaults(job(FILE, status=suspended.status.to_dict())),
                                [], None, [], NOW)
    assert resumed is not None
    assert resumed.status.condition("Suspended") is not None
    assert summary(resumed.status.conditions)[-1] == ("Suspended", "False", "MPIJobResumed")
    assert resumed.status.start_time == stamp()


def test_mpi_reconcile_plan_creates_everything_then_nothing() -> None:
    observed = Observed(job=job(FILE))
    plan = reconcile_plan(observed, NOW, Settings(), KEYS)
    assert sorted((o["kind"], name_of(o)) for o in plan.creates) == [
        ("ConfigMap", "pi-config"), ("Job", "pi-launcher"), ("Pod", "pi-worker-0"),
        ("Pod", "pi-worker-1"), ("Secret", "pi-ssh"), ("Service", "pi")]
    by_kind = {o["kind"]: o for o in plan.creates}
    observed.services = [by_kind["Service"]]
    observed.config_map = by_kind["ConfigMap"]
    observed.secret = by_kind["Secret"]
    observed.launcher = by_kind["Job"]
    observed.pods = [o for o in plan.creates if o["kind"] == "Pod"]
    assert reconcile_plan(observed, NOW, Settings(), None).empty


def _ready_worker(index: int, ready: bool) -> dict[str, Any]:
    return _worker(index, "Running",
                   conditions=[{"type": "Ready", "status": "True" if ready else "False"}])


@pytest.mark.parametrize(("workers", "launcher", "requeue"), [
    pytest.param([], False, WORKERS_READY_RECHECK_SECONDS, id="no-worker-yet"),
    pytest.param([(0, True), (1, False)], False, WORKERS_READY_RECHECK_SECONDS,
                 id="one-worker-not-ready"),
    pytest.param([(0, True), (1, True)], True, None, id="every-worker-ready"),
])
def test_mpi_wait_for_workers_ready(workers: list[tuple[int, bool]], launcher: bool,
                                    requeue: float | None) -> None:
    """A worker's readiness changes no job status, so reconcile, which is sent no pod
    updates, looks again while its launcher waits for the workers."""
    observed = Observed(job=job(FILE, spec={"launcherCreationPolicy": "WaitForWorkersReady"}),
                        pods=[_ready_worker(i, ready) for i, ready in workers])
    plan = reconcile_plan(observed, NOW, Settings(), KEYS)
    assert ("Job" in {o["kind"] for o in plan.creates}) is launcher
    assert plan.requeue_after == requeue


def test_mpi_suspend_suspends_launcher_and_deletes_workers() -> None:
    observed = Observed(job=job(FILE, spec={"runPolicy": {"suspend": True}}),
                        pods=[_worker(0, "Running"), _worker(1, "Succeeded")],
                        launcher=_batch([]))
    plan = reconcile_plan(observed, NOW, Settings(), None)
    assert [name_of(o) for o in plan.deletes] == ["pi-worker-0"]
    assert plan.applies[0]["spec"] == {"suspend": True}
    assert plan.creates == []


def test_mpi_created_suspended_gets_a_suspended_launcher_job_only() -> None:
    observed = Observed(job=job(FILE, spec={"runPolicy": {"suspend": True}}))
    plan = reconcile_plan(observed, NOW, Settings(), KEYS)
    [launcher] = plan.creates
    assert (launcher["kind"], name_of(launcher), launcher["spec"]["suspend"]) == (
        "Job", "pi-launcher", True)
    assert plan.deletes == [] and plan.applies == []
    observed.launcher = launcher
    assert reconcile_plan(observed, NOW, Settings(), KEYS).empty


@pytest.mark.parametrize(("template", "expected"), [
    pytest.param({}, {"metadata": {"labels": {
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "pi", "training.kubeflow.org/job-role": "launcher"}},
        "spec": {}}, id="nothing-to-sync"),
    pytest.param({"metadata": {"labels": {"kueue.x-k8s.io/podset": "launcher"},
                               "annotations": {"a": "b"}},
                  "spec": {"nodeSelector": {"flavor": "spot"},
                           "tolerations": [{"key": "spot", "operator": "Exists"}],
                           "schedulingGates": [{"name": "example.com/gate"}]}},
                 {"metadata": {"labels": {
                     "kueue.x-k8s.io/podset": "launcher",
                     "training.kubeflow.org/operator-name": "mpi-operator",
                     "training.kubeflow.org/job-name": "pi",
                     "training.kubeflow.org/job-role": "launcher"},
                     "annotations": {"a": "b"}},
                  "spec": {"nodeSelector": {"flavor": "spot"},
                           "tolerations": [{"key": "spot", "operator": "Exists"}],
                           "schedulingGates": [{"name": "example.com/gate"}]}},
                 id="admitted-by-a-queue"),
])
def test_mpi_resume_syncs_the_launcher_scheduling_directives(
        template: dict[str, Any], expected: dict[str, Any]) -> None:
    j = job(FILE, spec={"mpiReplicaSpecs": {"Launcher": {"template": template}}})
    suspended = {**_batch([]), "spec": {"suspend": True}}
    observed = Observed(job=j, launcher=suspended, pods=[_worker(0, "Running"),
                                                         _worker(1, "Running")])
    plan = reconcile_plan(observed, NOW, Settings(), None)
    [resume] = [o for o in plan.applies if o["kind"] == "Job"]
    assert resume["spec"] == {"suspend": False, "template": expected}


def test_mpi_clean_pod_policy_spares_the_launcher_pod() -> None:
    observed = Observed(job=job(FILE, spec={"runPolicy": {"cleanPodPolicy": "All"}}, status={
        "conditions": [condition("Created", reason="MPIJobCreated"),
                       condition("Succeeded", reason="MPIJobSucceeded")]}),
        pods=[_worker(0, "Succeeded"), _worker(1, "Running"), _launcher_pod("Succeeded")])
    assert [name_of(o) for o in gc_plan(observed, [], NOW).deletes] == [
        "pi-worker-0", "pi-worker-1"]


def test_mpi_finished_creates_nothing() -> None:
    observed = Observed(job=job(FILE, status={"conditions": [
        condition("Created", reason="MPIJobCreated"),
        condition("Succeeded", reason="MPIJobSucceeded")]}))
    assert reconcile_plan(observed, NOW, Settings(), KEYS).empty
