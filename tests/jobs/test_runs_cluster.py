"""The v1 kinds on the local cluster: create, run, succeed, fail, restart."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from functions.kube.client import KubeClient
from tests.jobs.driver import JobDriver, for_test, sample, specs_of

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]


def env_of(pod: Obj, container: str) -> dict[str, str]:
    for c in pod["spec"]["containers"]:
        if c["name"] == container:
            return {e["name"]: e.get("value", "") for e in c.get("env") or []}
    raise AssertionError(f"no container {container}")


def pytorch_env(pods: dict[str, Obj], name: str, namespace: str) -> None:
    master = env_of(pods[f"{name}-master-0"], "pytorch")
    worker = env_of(pods[f"{name}-worker-0"], "pytorch")
    assert (master["RANK"], worker["RANK"]) == ("0", "1")
    assert master["WORLD_SIZE"] == worker["WORLD_SIZE"] == "2"
    assert worker["MASTER_ADDR"] == worker["PET_MASTER_ADDR"] == f"{name}-master-0"
    assert worker["MASTER_PORT"] == "23456"
    init = pods[f"{name}-worker-0"]["spec"]["initContainers"]
    assert [c["name"] for c in init] == ["init-pytorch"]


def tf_env(pods: dict[str, Obj], name: str, namespace: str) -> None:
    config = json.loads(env_of(pods[f"{name}-worker-1"], "tensorflow")["TF_CONFIG"])
    assert config == {
        "cluster": {"ps": [f"{name}-ps-0.{namespace}.svc:2222"],
                    "worker": [f"{name}-worker-0.{namespace}.svc:2222",
                               f"{name}-worker-1.{namespace}.svc:2222"]},
        "task": {"type": "worker", "index": 1}, "environment": "cloud"}


def mx_env(pods: dict[str, Obj], name: str, namespace: str) -> None:
    worker = env_of(pods[f"{name}-worker-0"], "mxnet")
    assert worker["DMLC_ROLE"] == "worker"
    assert worker["DMLC_PS_ROOT_URI"] == f"{name}-scheduler-0"
    assert worker["DMLC_PS_ROOT_PORT"] == "9091"
    assert worker["DMLC_NUM_WORKER"] == "1"
    assert worker["DMLC_WORKER_ID"] == "0"


def xgboost_env(pods: dict[str, Obj], name: str, namespace: str) -> None:
    master = env_of(pods[f"{name}-master-0"], "xgboost")
    worker = env_of(pods[f"{name}-worker-1"], "xgboost")
    assert (master["RANK"], worker["RANK"]) == ("0", "2")
    assert master["WORLD_SIZE"] == worker["WORLD_SIZE"] == "3"
    assert worker["MASTER_ADDR"] == f"{name}-master-0"
    assert worker["MASTER_PORT"] == worker["WORKER_PORT"] == "9999"
    assert worker["WORKER_ADDRS"] == f"{name}-worker-0,{name}-worker-1"


def paddle_env(pods: dict[str, Obj], name: str, namespace: str) -> None:
    first = pods[f"{name}-worker-0"]["spec"]["containers"][0]["env"]
    assert {"name": "POD_IP_DUMMY",
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}} in first
    assert env_of(pods[f"{name}-worker-0"], "paddle")["PADDLE_MASTER"] == (
        "$(POD_IP_DUMMY):36543")
    other = env_of(pods[f"{name}-worker-1"], "paddle")
    assert other["PADDLE_MASTER"] == f"{name}-worker-0:36543"
    assert (other["PADDLE_NNODES"], other["PADDLE_JOB_ID"]) == ("2", name)


def jax_env(pods: dict[str, Obj], name: str, namespace: str) -> None:
    worker = env_of(pods[f"{name}-worker-1"], "jax")
    assert worker["COORDINATOR_ADDRESS"] == f"{name}-worker-0"
    assert worker["COORDINATOR_PORT"] == "6666"
    assert (worker["NUM_PROCESSES"], worker["PROCESS_ID"]) == ("2", "1")


@dataclass(frozen=True)
class Scenario:
    kind: str
    pods: tuple[str, ...]                 # suffixes after the job name
    running_message: Callable[[str, str], str]
    succeed_pods: tuple[str, ...]         # the pods whose success ends the job
    success_message: Callable[[str, str], str]
    clean_pod_policy: str
    left_after_success: tuple[str, ...]
    failing_type: str                     # replica type with restartPolicy ExitCode
    check_env: Callable[[dict[str, Obj], str, str], None]
    selector: bool                        # a scale subresource over the Workers
    master_pods: tuple[str, ...]          # the pods labelled job-role: master


SCENARIOS = [
    pytest.param(Scenario(
        "PyTorchJob", ("master-0", "worker-0"),
        lambda ns, n: f"PyTorchJob {n} is running.", ("master-0",),
        lambda ns, n: f"PyTorchJob {n} is successfully completed.", "All", (), "Worker",
        pytorch_env, True, ("master-0",)), id="pytorchjob"),
    pytest.param(Scenario(
        "TFJob", ("ps-0", "worker-0", "worker-1"),
        lambda ns, n: f"TFJob {ns}/{n} is running.", ("worker-0",),
        lambda ns, n: f"TFJob {ns}/{n} successfully completed.", "Running", ("worker-0",),
        "Worker", tf_env, False, ("worker-0",)), id="tfjob"),
    pytest.param(Scenario(
        "MXJob", ("scheduler-0", "server-0", "worker-0"),
        lambda ns, n: f"MXJob {n} is running.", ("scheduler-0",),
        lambda ns, n: f"MXJob {n} is successfully completed.", "All", (), "Worker",
        mx_env, False, ("server-0",)), id="mxjob"),
    pytest.param(Scenario(
        "XGBoostJob", ("master-0", "worker-0", "worker-1"),
        lambda ns, n: f"XGBoostJob {n} is running.", ("master-0",),
        lambda ns, n: f"XGBoostJob {n} is successfully completed.", "All", (), "Worker",
        xgboost_env, False, ("master-0",)), id="xgboostjob"),
    pytest.param(Scenario(
        "PaddleJob", ("worker-0", "worker-1"),
        lambda ns, n: f"PaddleJob {ns}/{n} is running.", ("worker-0", "worker-1"),
        lambda ns, n: f"PaddleJob {ns}/{n} successfully completed.", "Running",
        ("worker-0", "worker-1"), "Worker", paddle_env, True, ()), id="paddlejob"),
    pytest.param(Scenario(
        "JAXJob", ("worker-0", "worker-1"),
        lambda ns, n: f"JAXJob {ns}/{n} is running.", ("worker-0", "worker-1"),
        lambda ns, n: f"JAXJob {ns}/{n} successfully completed.", "All", (), "Worker",
        jax_env, True, ("worker-0",)), id="jaxjob"),
]


def start(kube: KubeClient, namespace: str, scenario: Scenario, name: str,
          **run_policy: Any) -> JobDriver:
    job = for_test(sample(scenario.kind), name, namespace)
    job["spec"].setdefault("runPolicy", {}).update(
        {"cleanPodPolicy": scenario.clean_pod_policy, **run_policy})
    specs_of(job)[scenario.failing_type]["restartPolicy"] = "ExitCode"
    driver = JobDriver(kube, job)
    driver.create(job)
    driver.run_until(lambda: driver.all_running(len(scenario.pods)), what="pods running")
    return driver


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_create_run_succeed(kube: KubeClient, crds: None, namespace: str,
                            scenario: Scenario) -> None:
    name = "job-a"
    driver = start(kube, namespace, scenario, name)
    job = driver.get()
    assert job is not None
    uid = job["metadata"]["uid"]
    owner = {"apiVersion": job["apiVersion"], "kind": scenario.kind, "name": name, "uid": uid,
             "controller": True, "blockOwnerDeletion": True}
    pods = {p["metadata"]["name"]: p for p in driver.live_pods()}
    assert sorted(pods) == sorted(f"{name}-{suffix}" for suffix in scenario.pods)
    for pod_name, pod in pods.items():
        rtype, index = pod_name[len(name) + 1:].rsplit("-", 1)
        labels = pod["metadata"]["labels"]
        assert labels["training.kubeflow.org/job-name"] == name
        assert labels["training.kubeflow.org/replica-type"] == rtype
        assert labels["training.kubeflow.org/replica-index"] == index
        assert pod["metadata"]["ownerReferences"] == [owner]
        is_master = pod_name[len(name) + 1:] in scenario.master_pods
        assert (labels.get("training.kubeflow.org/job-role") == "master") is is_master
    scenario.check_env(pods, name, namespace)
    services = {s["metadata"]["name"]: s for s in driver.services()}
    assert sorted(services) == sorted(pods)
    for svc in services.values():
        assert svc["spec"]["clusterIP"] == "None"
        assert svc["metadata"]["ownerReferences"] == [owner]

    driver.run_until(lambda: driver.condition("Running"), what="Running")
    running = driver.condition("Running")
    assert running is not None
    assert running["message"] == scenario.running_message(namespace, name)
    statuses = driver.status()["replicaStatuses"]
    assert sum(s.get("active", 0) for s in statuses.values()) == len(scenario.pods)
    assert ("selector" in statuses["Worker"]) is scenario.selector
    if scenario.selector:
        scale = kube.get(driver.res, name, namespace, subresource="scale")
        assert scale is not None
        assert scale["spec"]["replicas"] == scale["status"]["replicas"] == statuses["Worker"][
            "active"]
        assert scale["status"]["selector"] == statuses["Worker"]["selector"]
    writes = kube.request_count("create", "apply", "patch", "delete")
    driver.step()
    driver.step()
    assert kube.request_count("create", "apply", "patch", "delete") == writes, (
        "a running job with nothing to do costs no writes")

    for suffix in scenario.succeed_pods:
        driver.finish_pod(f"{name}-{suffix}", "succeed")
    driver.run_until(lambda: driver.condition("Succeeded"), what="Succeeded")
    status = driver.status()
    assert driver.condition("Succeeded")["message"] == (  # type: ignore[index]
        scenario.success_message(namespace, name))
    assert status["completionTime"]
    assert ("Running", "False") in [(t, s) for t, s, _ in driver.conditions()]
    left = tuple(f"{name}-{suffix}" for suffix in scenario.left_after_success)
    driver.run_until(lambda: sorted(p["metadata"]["name"] for p in driver.live_pods())
                     == sorted(left), what="cleanPodPolicy")
    assert sorted(s["metadata"]["name"] for s in driver.services()) == sorted(left)
    writes = kube.request_count("create", "apply", "patch", "delete")
    driver.step()
    driver.step()
    assert kube.request_count("create", "apply", "patch", "delete") == writes


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_permanent_exit_code_fails_job(kube: KubeClient, crds: None, namespace: str,
                                       scenario: Scenario) -> None:
    name = "job-b"
    driver = start(kube, namespace, scenario, name)
    driver.finish_pod(f"{name}-{scenario.failing_type.lower()}-0", "fail", exit_code=3)
    driver.run_until(lambda: driver.condition("Failed"), what="Failed")
    failed = driver.condition("Failed")
    assert failed is not None
    assert failed["reason"] == f"{scenario.kind}Failed"
    assert failed["message"] == (
        f'job "{name}" is failing because "{scenario.failing_type}" replica(s) failed.')
    assert driver.status()["completionTime"]
    assert ("ExitedWithCode", f"Pod: {namespace}.{name}-{scenario.failing_type.lower()}-0 "
                              "exited with code 3") in driver.events()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_exit_code_137_recreates_pod(kube: KubeClient, crds: None, namespace: str,
                                     scenario: Scenario) -> None:
    name = "job-c"
    driver = start(kube, namespace, scenario, name)
    victim = f"{name}-{scenario.failing_type.lower()}-0"
    first = driver.pod(victim)
    assert first is not None
    driver.finish_pod(victim, "fail", exit_code=137)

    def recreated() -> bool:
        pod = driver.pod(victim)
        return bool(pod and pod["metadata"]["uid"] != first["metadata"]["uid"]
                    and pod["status"].get("phase") == "Running")

    driver.run_until(recreated, what="pod recreated")
    assert ("Restarting", "True") in driver.seen_conditions
    assert not driver.condition("Failed")
    job = driver.get()
    assert job is not None
    assert job["metadata"]["annotations"]["training.opendatahub.io/restarts"] == "1"
    assert any(reason == f"{scenario.kind}Restarting" for reason, _ in driver.events())
