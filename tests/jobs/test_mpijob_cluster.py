"""MPIJob v2beta1 on the local cluster: SSH secret, hostfile, workers, launcher batch Job."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from functions.jobs.core.frameworks import LABEL_JOB_ROLE
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.jobs.driver import JobDriver, for_test, sample, specs_of

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]


def mpijob(namespace: str, name: str, *, hold_launcher: bool = False) -> Obj:
    job = for_test(sample("MPIJob"), name, namespace)
    if hold_launcher:
        # The launcher pod cannot be scheduled, so the launcher Job never finishes.
        specs_of(job)["Launcher"]["template"]["spec"]["nodeSelector"] = {"no-such-node": "x"}
    return job


def workers(driver: JobDriver) -> list[Obj]:
    return [p for p in driver.live_pods()
            if p["metadata"]["labels"].get(LABEL_JOB_ROLE) == "worker"]


def test_mpijob_runs_to_success(kube: KubeClient, crds: None, namespace: str) -> None:
    job = mpijob(namespace, "pi")
    driver = JobDriver(kube, job)
    created = driver.create(job)
    uid = created["metadata"]["uid"]
    driver.run_until(lambda: driver.condition("Succeeded"), what="Succeeded")

    svc = kube.get(resources.SERVICES, "pi", namespace)
    assert svc is not None
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"training.kubeflow.org/operator-name": "mpi-operator",
                                       "training.kubeflow.org/job-name": "pi"}
    config = kube.get(resources.CONFIGMAPS, "pi-config", namespace)
    assert config is not None
    assert config["data"]["hostfile"] == (f"pi-worker-0.pi.{namespace}.svc slots=1\n"
                                          f"pi-worker-1.pi.{namespace}.svc slots=1\n")
    secret = kube.get(resources.SECRETS, "pi-ssh", namespace)
    assert secret is not None
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert base64.b64decode(secret["data"]["ssh-privatekey"]).startswith(
        b"-----BEGIN EC PRIVATE KEY-----")
    assert base64.b64decode(secret["data"]["ssh-publickey"]).startswith(b"ecdsa-sha2-nistp521 ")
    launcher = kube.get(resources.JOBS, "pi-launcher", namespace)
    assert launcher is not None
    assert launcher["metadata"]["ownerReferences"][0]["uid"] == uid
    assert launcher["spec"]["ttlSecondsAfterFinished"] == 60

    succeeded = driver.condition("Succeeded")
    assert succeeded is not None
    assert succeeded["reason"] == "MPIJobSucceeded"
    assert succeeded["message"] == f"MPIJob {namespace}/pi successfully completed."
    status = driver.status()
    assert status["completionTime"]
    assert status["replicaStatuses"]["Launcher"]["succeeded"] == 1
    running = [c for c in status["conditions"] if c["type"] == "Running"]
    assert running and (running[0]["status"] == "False")
    assert running[0]["message"] in (
        f"MPIJob {namespace}/pi is running.",
        f"MPIJob {namespace}/pi is finished but Running condition was never set.")
    assert driver.conditions()[-1][0] == "Succeeded"
    driver.run_until(lambda: not workers(driver), what="running workers cleaned up")


def test_mpijob_objects_and_running_workers(kube: KubeClient, crds: None,
                                            namespace: str) -> None:
    job = mpijob(namespace, "held", hold_launcher=True)
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: len(workers(driver)) == 2 and all(
        p["status"].get("phase") == "Running" for p in workers(driver)), what="workers")
    pod = next(p for p in workers(driver) if p["metadata"]["name"] == "held-worker-1")
    assert pod["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "1"
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("held-worker-1", "held")
    main = pod["spec"]["containers"][0]
    assert {"name": "K_MPI_JOB_ROLE", "value": "worker"} in main["env"]
    assert {"name": "ssh-auth", "mountPath": "/home/mpiuser/.ssh"} in main["volumeMounts"]
    driver.run_until(lambda: "held-worker-1.held" in (kube.get(
        resources.CONFIGMAPS, "held-config", namespace) or {}).get("data", {}).get(
        "discover_hosts.sh", ""), what="discover_hosts.sh lists running workers")
    statuses = driver.status()["replicaStatuses"]
    assert statuses["Worker"]["active"] == 2
    assert statuses["Launcher"]["active"] == 0


def test_mpijob_worker_exit_codes(kube: KubeClient, crds: None, namespace: str) -> None:
    job = mpijob(namespace, "ec", hold_launcher=True)
    specs_of(job)["Worker"]["restartPolicy"] = "ExitCode"
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: len(workers(driver)) == 2 and all(
        p["status"].get("phase") == "Running" for p in workers(driver)), what="workers")
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


def launcher_pods(driver: JobDriver) -> list[Obj]:
    return [p for p in driver.pods()
            if p["metadata"]["labels"].get(LABEL_JOB_ROLE) == "launcher"]


def test_mpijob_created_suspended_then_admitted_like_kueue_does(
        kube: KubeClient, crds: None, namespace: str) -> None:
    """Created suspended: the launcher Job exists, suspended, and nothing runs. A queue then
    admits it by writing the node selector and tolerations of the flavour it chose onto the
    MPIJob and un-suspending it in one update: the launcher Job resumes with them."""
    job = mpijob(namespace, "queued")
    job["spec"]["runPolicy"].update({"suspend": True, "cleanPodPolicy": "All"})
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: kube.get(resources.JOBS, "queued-launcher", namespace),
                     what="the launcher Job")
    for _ in range(3):
        driver.step()
    launcher = kube.get(resources.JOBS, "queued-launcher", namespace)
    assert launcher is not None and launcher["spec"]["suspend"] is True
    assert driver.pods() == []
    assert driver.condition("Suspended") is not None
    assert "startTime" not in driver.status()

    flavour = {"nvidia.com/gpu.present": "true"}
    toleration = {"key": "example.com/reserved", "operator": "Exists", "effect": "NoSchedule"}
    kube.patch(driver.res, "queued", {"spec": {
        "runPolicy": {"suspend": False},
        "mpiReplicaSpecs": {"Launcher": {"template": {
            "metadata": {"labels": {"kueue.x-k8s.io/podset": "launcher"}},
            "spec": {"nodeSelector": flavour, "tolerations": [toleration]}}}}}}, namespace)
    driver.run_until(lambda: not (kube.get(resources.JOBS, "queued-launcher", namespace)
                                  or {}).get("spec", {}).get("suspend"), what="resumed")
    template = (kube.get(resources.JOBS, "queued-launcher", namespace) or {})["spec"]["template"]
    assert template["spec"]["nodeSelector"] == flavour
    assert template["spec"]["tolerations"] == [toleration]
    assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "launcher"
    assert driver.status()["startTime"]
    assert ("Suspended", "False") in driver.seen_conditions

    driver.run_until(lambda: driver.condition("Succeeded"), what="Succeeded")
    [pod] = launcher_pods(driver)
    assert pod["spec"]["nodeName"].startswith("kwok-gpu-")
    driver.run_until(lambda: not workers(driver), what="workers cleaned up (cleanPodPolicy All)")
    for _ in range(3):
        driver.step()
    [kept] = launcher_pods(driver)
    assert kept["metadata"]["uid"] == pod["metadata"]["uid"]
    assert not kept["metadata"].get("deletionTimestamp"), "the launcher pod keeps the log"
