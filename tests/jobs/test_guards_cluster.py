"""The guards a job opts into by annotation, on the local cluster (the handlers driven in a loop
as events would drive them; kwok plays the kubelets, the real scheduler places the pods):
a pending timeout that fails or suspends a job an impossible nodeSelector holds Pending, a
whole-job restart on one pod's failure, a restart limit per replica type."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from functions.jobs.controller import RESOURCES
from functions.jobs.core import guards as g
from functions.jobs.core.planning import RESTARTS_ANNOTATION
from functions.jobs.core.restarts import RESTARTS_BY_TYPE
from functions.kube.client import KubeClient
from tests.jobs.driver import JobDriver, for_test, sample, specs_of

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
NOWHERE = {"example.com/no-such-node": "true"}


def guarded(kind: str, name: str, namespace: str, annotations: dict[str, str], *,
            node_selector: dict[str, str] | None = None, **run_policy: Any) -> Obj:
    job = for_test(sample(kind), name, namespace)
    job["metadata"]["annotations"] = annotations
    job["spec"].setdefault("runPolicy", {}).update(run_policy)
    if node_selector:
        for spec in specs_of(job).values():
            spec["template"].setdefault("spec", {})["nodeSelector"] = node_selector
    return job


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.mark.parametrize("kind", [pytest.param("PyTorchJob", id="pytorchjob"),
                                  pytest.param("TFJob", id="tfjob"),
                                  pytest.param("MPIJob", id="mpijob"),
                                  pytest.param("MPIJob-v1", id="mpijob-v1")])
def test_a_job_held_pending_times_out_and_fails(kube: KubeClient, crds: None, namespace: str,
                                                kind: str) -> None:
    job = guarded(kind, "held", namespace, {g.PENDING_TIMEOUT: "3s"}, node_selector=NOWHERE)
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.pods(), what="pods")
    deadline = (driver.get() or {})["metadata"]["annotations"].get(g.PENDING_DEADLINE)
    assert deadline is not None, "the due moment is recorded on the job"
    failed = driver.run_until(lambda: driver.condition("Failed"), timeout=30,
                              what="the pending timeout")
    assert failed["reason"] == "MPIJobPendingTimeout" if kind.startswith("MPIJob") else (
        f"{kind}PendingTimeout")
    assert "waited longer than its pending timeout of 3s" in failed["message"]
    assert "didn't match Pod's node affinity/selector" in failed["message"]
    status = driver.status()
    assert _time(status["completionTime"]) >= _time(deadline)
    reason = failed["reason"]
    assert any(r == reason for r, _ in driver.events())
    # the pods that never ran are removed; the due moment is forgotten
    driver.run_until(lambda: not driver.live_pods(), timeout=20, what="pending pods deleted")
    driver.run_until(lambda: g.PENDING_DEADLINE not in (
        (driver.get() or {})["metadata"].get("annotations") or {}), what="deadline forgotten")


def test_a_job_held_pending_is_suspended_and_resumes(kube: KubeClient, crds: None,
                                                     namespace: str) -> None:
    job = guarded("PyTorchJob", "requeued", namespace,
                  {g.PENDING_TIMEOUT: "3s", g.PENDING_TIMEOUT_ACTION: "Suspend"},
                  node_selector=NOWHERE)
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: (driver.get() or {})["spec"]["runPolicy"].get("suspend"),
                     timeout=30, what="suspended by its pending timeout")
    driver.run_until(lambda: driver.condition("Suspended") and not driver.live_pods(),
                     what="Suspended, pods gone")
    assert driver.condition("Failed") is None
    [message] = [m for r, m in driver.events() if r == "PendingTimeout"]
    assert message.startswith("PyTorchJob requeued is suspended and handed back to its queue")
    # the queue (here: the test) admits it again: new pods, a new clock
    kube.patch(RESOURCES["PyTorchJob"], "requeued", {"spec": {"runPolicy": {"suspend": False}}},
               namespace)
    driver.run_until(lambda: len(driver.live_pods()) == 2, what="pods again")
    driver.run_until(lambda: (driver.get() or {})["spec"]["runPolicy"].get("suspend"),
                     timeout=30, what="suspended again")
    assert len([r for r, _ in driver.events() if r == "PendingTimeout"]) >= 1


def _uids(driver: JobDriver) -> set[str]:
    return {p["metadata"]["uid"] for p in driver.live_pods()}


@pytest.mark.parametrize(("kind", "failing", "total"), [
    pytest.param("PyTorchJob", "whole-worker-0", 2, id="pytorchjob"),
    pytest.param("PaddleJob", "whole-worker-1", 2, id="paddlejob"),
    pytest.param("MPIJob-v1", "whole-worker-1", 3, id="mpijob-v1"),
])
def test_one_failed_pod_restarts_the_whole_job(kube: KubeClient, crds: None, namespace: str,
                                               kind: str, failing: str, total: int) -> None:
    job = guarded(kind, "whole", namespace, {g.RESTART_SCOPE: "Job"}, backoffLimit=3)
    if kind == "MPIJob-v1":  # training-operator restarts MPIJob pods under ExitCode only
        for spec in specs_of(job).values():
            spec["restartPolicy"] = "ExitCode"
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.all_running(total) and driver.condition("Running"),
                     what="running")
    before = _uids(driver)
    driver.finish_pod(failing, "fail", exit_code=137)
    driver.run_until(lambda: driver.condition("Restarting"), what="Restarting")
    driver.run_until(lambda: driver.all_running(total) and not (_uids(driver) & before)
                     and driver.condition("Running"), timeout=60,
                     what="every pod made again and running")
    annotations = (driver.get() or {})["metadata"]["annotations"]
    assert annotations[RESTARTS_ANNOTATION] == "1"
    assert annotations[RESTARTS_BY_TYPE] == "Worker=1"
    [message] = [m for r, m in driver.events() if r == "WholeJobRestart"]
    assert message.startswith(f"Restarting every pod of the job ({total} deleted, to be "
                              f"created again): {failing} failed (exit code 137); restart 1")
    conditions = [c for c, _ in driver.seen_conditions]
    assert "Failed" not in conditions


def test_the_restart_limit_of_a_replica_type_fails_the_job(kube: KubeClient, crds: None,
                                                           namespace: str) -> None:
    job = guarded("PyTorchJob", "limited", namespace, {g.RESTART_LIMITS: "Worker=1"},
                  backoffLimit=10)
    driver = JobDriver(kube, job)
    driver.create(job)
    for attempt in range(2):
        driver.run_until(lambda: driver.all_running(2), what=f"running ({attempt})")
        driver.finish_pod("limited-worker-0", "fail", exit_code=1)
        if attempt == 0:
            driver.run_until(lambda: RESTARTS_BY_TYPE in ((driver.get() or {})["metadata"]
                                                          .get("annotations") or {}),
                             what="the first restart counted")
            time.sleep(0.2)
    failed = driver.run_until(lambda: driver.condition("Failed"), what="the limit")
    assert failed["reason"] == "PyTorchJobRestartLimitExceeded"
    assert failed["message"] == ("PyTorchJob limited has failed because its Worker replicas "
                                 "needed more than 1 restart(s) "
                                 "(training.opendatahub.io/restart-limits)")
    assert (driver.get() or {})["metadata"]["annotations"][RESTARTS_BY_TYPE] == "Worker=1"
    assert datetime.now(UTC) >= _time(driver.status()["completionTime"])
