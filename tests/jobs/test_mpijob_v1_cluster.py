"""MPIJob kubeflow.org/v1 (training-operator 1.9) on the local cluster: created through v1,
run with v1 semantics next to v2beta1 MPIJobs by the same CRD and controller."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from devstack.cluster import kwok
from functions.jobs.core.flavour import ANNOTATION, spec_api_version
from functions.jobs.core.frameworks import LABEL_JOB_ROLE
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from tests.jobs.driver import JobDriver

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
MPIJOBS_V1 = Resource("kubeflow.org", "v1", "mpijobs", "MPIJob")
IMAGE = "mpioperator/mpi-pi:openmpi"


def v1_job(namespace: str, name: str, *, workers: int = 2, finish: bool = False,
           worker_policy: str = "Never", **run_policy: object) -> Obj:
    """An MPIJob as training-operator 1.9 users write it: container ``mpi``, kubectl-exec
    workers. With ``finish`` the launcher succeeds after a short run."""
    labels = {kwok.RESULT_LABEL: "succeed"} if finish else {}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "MPIJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "slotsPerWorker": 2, "mainContainer": "mpi", "cleanPodPolicy": "Running",
            "runPolicy": dict(run_policy),
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {
                    "metadata": {"labels": labels,
                                 "annotations": {kwok.DELAY_ANNOTATION: "2s"}},
                    "spec": {"containers": [{"name": "mpi", "image": IMAGE,
                                             "command": ["mpirun", "/home/mpiuser/pi"]}]}}},
                "Worker": {"replicas": workers, "restartPolicy": worker_policy, "template": {
                    "spec": {"containers": [{"name": "mpi", "image": IMAGE}]}}}}}}


def start(kube: KubeClient, job: Obj) -> JobDriver:
    """Created through v1 (as the Kubeflow SDK does); the driver reads through v2beta1."""
    driver = JobDriver(kube, job)
    driver.created = kube.create(job, res=MPIJOBS_V1)
    return driver


def workers(driver: JobDriver) -> list[Obj]:
    return [p for p in driver.live_pods()
            if p["metadata"]["labels"].get(LABEL_JOB_ROLE) != "master"]


def test_v1_mpijob_objects_and_success(kube: KubeClient, crds: None, namespace: str) -> None:
    driver = start(kube, v1_job(namespace, "pi", finish=True))
    uid = driver.created["metadata"]["uid"]
    driver.run_until(lambda: driver.pod("pi-launcher"), what="the launcher pod")

    config = kube.get(resources.CONFIGMAPS, "pi-config", namespace)
    assert config is not None
    assert config["data"]["hostfile"] == "pi-worker-0 slots=2\npi-worker-1 slots=2\n"
    assert config["data"]["kubexec.sh"].endswith(
        '/opt/kube/kubectl exec ${POD_NAME} --container mpi -- /bin/sh -c "$*"')
    role = kube.get(resources.ROLES, "pi-launcher", namespace)
    assert role is not None and role["rules"][1] == {
        "apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"],
        "resourceNames": ["pi-worker-0", "pi-worker-1"]}
    binding = kube.get(resources.ROLEBINDINGS, "pi-launcher", namespace)
    assert binding is not None and binding["subjects"][0]["name"] == "pi-launcher"
    account = kube.get(resources.SERVICEACCOUNTS, "pi-launcher", namespace)
    assert account is not None
    for obj in (config, role, binding, account):
        [owner] = obj["metadata"]["ownerReferences"]
        assert (owner["apiVersion"], owner["kind"], owner["uid"]) == (
            "kubeflow.org/v1", "MPIJob", uid)
    assert driver.services() == []

    launcher = driver.pod("pi-launcher")
    assert launcher is not None
    labels = launcher["metadata"]["labels"]
    assert (labels["training.kubeflow.org/operator-name"], labels[LABEL_JOB_ROLE],
            labels["training.kubeflow.org/replica-type"]) == (
        "mpijob-controller", "master", "launcher")
    assert launcher["spec"]["serviceAccountName"] == "pi-launcher"
    assert [c["name"] for c in launcher["spec"]["initContainers"]] == ["kubectl-delivery"]
    env = {v["name"]: v.get("value") for v in launcher["spec"]["containers"][0]["env"]}
    assert env["OMPI_MCA_plm_rsh_agent"] == "/etc/mpi/kubexec.sh"
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    worker = driver.pod("pi-worker-1")
    assert worker is not None
    assert worker["spec"]["containers"][0]["command"] == ["sleep"]
    assert worker["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "1"

    driver.run_until(lambda: driver.condition("Succeeded"), what="Succeeded")
    succeeded = driver.condition("Succeeded")
    assert succeeded is not None
    assert (succeeded["reason"], succeeded["message"]) == (
        "MPIJobSucceeded", "MPIJob pi is successfully completed.")
    assert [c[0] for c in driver.conditions()] == ["Created", "Running", "Succeeded"]
    status = driver.status()
    assert status["replicaStatuses"]["Launcher"] == {"active": 0, "succeeded": 1, "failed": 0}
    assert status["completionTime"]
    # The v1-only fields survived storage in v2beta1, and v1 reads what v2beta1 reads.
    through_v1 = kube.get(MPIJOBS_V1, "pi", namespace)
    assert through_v1 is not None
    assert (through_v1["spec"]["mainContainer"], through_v1["spec"]["cleanPodPolicy"]) == (
        "mpi", "Running")
    assert through_v1["status"]["conditions"] == status["conditions"]
    assert through_v1["metadata"]["annotations"][ANNOTATION] == "kubeflow.org/v1"
    # cleanPodPolicy Running (the deprecated top-level field): the idle workers go.
    driver.run_until(lambda: not workers(driver), what="running workers cleaned up")
    assert driver.pod("pi-launcher") is not None


def test_v1_discover_hosts_lists_running_workers(kube: KubeClient, crds: None,
                                                 namespace: str) -> None:
    driver = start(kube, v1_job(namespace, "held"))
    driver.run_until(lambda: driver.all_running(3), what="launcher and workers running")
    driver.run_until(lambda: (kube.get(resources.CONFIGMAPS, "held-config", namespace)
                              or {}).get("data", {}).get("discover_hosts.sh") ==
                     "#!/bin/sh\necho held-worker-0:2\necho held-worker-1:2\n",
                     what="discover_hosts.sh")
    running = driver.condition("Running")
    assert running is not None and running["message"] == "MPIJob held is running."
    assert driver.status()["replicaStatuses"]["Worker"]["active"] == 2


def test_v1_worker_failures(kube: KubeClient, crds: None, namespace: str) -> None:
    """ExitCode: a retryable code recreates the worker, a permanent one fails the job."""
    driver = start(kube, v1_job(namespace, "ec", worker_policy="ExitCode"))
    driver.run_until(lambda: driver.all_running(3), what="running")
    first = driver.pod("ec-worker-0")
    assert first is not None
    driver.finish_pod("ec-worker-0", "fail", exit_code=137)

    def recreated() -> bool:
        pod = driver.pod("ec-worker-0")
        return bool(pod and pod["metadata"]["uid"] != first["metadata"]["uid"]
                    and pod["status"].get("phase") == "Running")

    driver.run_until(recreated, what="worker recreated")
    assert ("Restarting", "True") in driver.seen_conditions
    driver.finish_pod("ec-worker-1", "fail", exit_code=2)
    driver.run_until(lambda: driver.condition("Failed"), what="Failed")
    failed = driver.condition("Failed")
    assert failed is not None
    assert failed["message"] == 'job "ec" is failing because "Worker" replica(s) failed.'


def test_v1_worker_failure_with_never_fails_the_job(kube: KubeClient, crds: None,
                                                    namespace: str) -> None:
    driver = start(kube, v1_job(namespace, "nv", workers=1))
    driver.run_until(lambda: driver.all_running(2), what="running")
    driver.finish_pod("nv-worker-0", "fail", exit_code=1)
    driver.run_until(lambda: driver.condition("Failed"), what="Failed")
    failed = driver.condition("Failed")
    assert failed is not None
    assert (failed["reason"], failed["message"]) == (
        "MPIJobMPIJobFailed", "MPIJob nv is failed because 1 Worker replica(s) failed.")
    assert driver.status()["completionTime"]


def test_v1_suspend_resume(kube: KubeClient, crds: None, namespace: str) -> None:
    driver = start(kube, v1_job(namespace, "sus", suspend=True))
    driver.run_until(lambda: driver.condition("Suspended"), what="Suspended")
    for _ in range(3):
        driver.step()
    assert driver.pods() == []
    assert "startTime" not in driver.status()
    assert driver.conditions() == [("Created", "True", "MPIJobCreated"),
                                   ("Suspended", "True", "MPIJobSuspended")]
    kube.patch(MPIJOBS_V1, "sus", {"spec": {"runPolicy": {"suspend": False}}}, namespace)
    driver.run_until(lambda: driver.condition("Running") and driver.all_running(3),
                     what="resumed")
    assert driver.conditions() == [("Created", "True", "MPIJobCreated"),
                                   ("Suspended", "False", "MPIJobResumed"),
                                   ("Running", "True", "MPIJobRunning")]
    assert driver.status()["startTime"]


def test_v1_ttl_and_active_deadline(kube: KubeClient, crds: None, namespace: str) -> None:
    """v1 semantics, not mpi-operator's: the TTL deletes the MPIJob itself, and the active
    deadline fails the job from its startTime."""
    ads = start(kube, v1_job(namespace, "ads", activeDeadlineSeconds=3, cleanPodPolicy="All"))
    ttl = start(kube, v1_job(namespace, "ttl", finish=True, ttlSecondsAfterFinished=2))
    ads.run_until(lambda: ads.condition("Running"), what="Running")
    ads.run_until(lambda: ads.condition("Failed"), timeout=20, what="deadline")
    failed = ads.condition("Failed")
    assert failed is not None and failed["message"] == (
        "Job ads has failed because it was active longer than specified deadline")
    ads.run_until(lambda: not ads.live_pods(), what="cleanPodPolicy All")
    ttl.run_until(lambda: ttl.condition("Succeeded"), what="Succeeded")
    completed = datetime.fromisoformat(ttl.status()["completionTime"].replace("Z", "+00:00"))
    ttl.run_until(lambda: ttl.get() is None, timeout=20, what="job deleted by TTL")
    assert 2.0 <= (datetime.now(UTC) - completed).total_seconds() <= 10.0
    assert ("SuccessfulDeleteJob", "Deleted job: ttl") in ttl.events()


def test_v1_flavour_holds_when_a_queue_and_the_author_write_later(
        kube: KubeClient, crds: None, namespace: str) -> None:
    """The real API server's managedFields: a queue writes the spec through v2beta1, then the
    author writes again through v1, which moves the author's entry time past the queue's. The
    earliest-writer rule alone would now say v2beta1; the pin keeps the job a v1 MPIJob."""
    job = v1_job(namespace, "kept")
    driver = JobDriver(kube, job)
    driver.created = kube.create(job, res=MPIJOBS_V1, field_manager="author")
    driver.run_until(lambda: driver.pod("kept-launcher"), what="the launcher pod")
    assert (driver.get() or {})["metadata"]["annotations"][ANNOTATION] == "kubeflow.org/v1"
    time.sleep(1.1)  # managedFields times have a resolution of one second
    kube.patch(driver.res, "kept", {"spec": {"runPolicy": {"backoffLimit": 3}}}, namespace,
               field_manager="queue")
    time.sleep(1.1)
    kube.patch(MPIJOBS_V1, "kept", {"spec": {"slotsPerWorker": 1}}, namespace,
               field_manager="author")
    stored = driver.get() or {}
    unpinned = {**stored, "metadata": {k: v for k, v in stored["metadata"].items()
                                       if k != "annotations"}}
    assert spec_api_version(unpinned) == "kubeflow.org/v2beta1"
    for _ in range(5):
        driver.step()
    assert driver.services() == [], "no mpi-operator Service"
    assert kube.get(resources.SECRETS, "kept-ssh", namespace) is None
    assert kube.get(resources.JOBS, "kept-launcher", namespace) is None
    config = kube.get(resources.CONFIGMAPS, "kept-config", namespace) or {}
    assert config["data"]["hostfile"] == "kept-worker-0 slots=1\nkept-worker-1 slots=1\n"


@pytest.mark.parametrize(("change", "message"), [
    pytest.param(lambda j: j["spec"]["mpiReplicaSpecs"].pop("Launcher"),
                 "an MPIJob needs a Launcher replica spec", id="no-launcher"),
    pytest.param(lambda j: j["spec"]["mpiReplicaSpecs"]["Launcher"].update(replicas=2),
                 "Launcher replicas must be 1", id="two-launchers"),
    pytest.param(lambda j: j["spec"]["mpiReplicaSpecs"]["Launcher"].update(replicas=0),
                 "Launcher replicas must be 1", id="no-launcher-replica"),
    pytest.param(lambda j: j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"][0].update(image=""), "needs a non-empty image", id="empty-image"),
    pytest.param(lambda j: j["spec"].update(cleanPodPolicy="Sometimes"), "Unsupported value",
                 id="bad-clean-pod-policy"),
    pytest.param(lambda j: j["spec"]["runPolicy"].update(managedBy="example.com/other"),
                 "spec.runPolicy.managedBy must be one of", id="bad-manager"),
])
def test_v1_invalid_mpijob_is_rejected(kube: KubeClient, crds: None, namespace: str,
                                       change: Any, message: str) -> None:
    job = v1_job(namespace, "bad")
    change(job)
    with pytest.raises(ApiError) as caught:
        kube.create(job, res=MPIJOBS_V1)
    assert caught.value.status == 422
    assert message in caught.value.message
    assert kube.get(MPIJOBS_V1, "bad", namespace) is None
