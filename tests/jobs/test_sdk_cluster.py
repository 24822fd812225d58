"""The official Kubeflow Training SDK (``kubeflow-training`` 1.9) against our controllers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubeflow.training import (  # type: ignore[import-untyped]
    KubeflowOrgV1JAXJob,
    KubeflowOrgV1JAXJobSpec,
    KubeflowOrgV1MPIJob,
    KubeflowOrgV1MPIJobSpec,
    KubeflowOrgV1PaddleJob,
    KubeflowOrgV1PaddleJobSpec,
    KubeflowOrgV1PyTorchJob,
    KubeflowOrgV1PyTorchJobSpec,
    KubeflowOrgV1ReplicaSpec,
    KubeflowOrgV1RunPolicy,
    KubeflowOrgV1TFJob,
    KubeflowOrgV1TFJobSpec,
    KubeflowOrgV1XGBoostJob,
    KubeflowOrgV1XGBoostJobSpec,
    TrainingClient,
)
from kubernetes import client as k8s

from devstack.cluster import kwok
from functions.kube.client import KubeClient
from tests.jobs.driver import JobDriver

pytestmark = pytest.mark.cluster


def template(container: str, *, finish: bool) -> Any:
    labels = {kwok.RESULT_LABEL: "succeed"} if finish else {}
    return k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(labels=labels, annotations={kwok.DELAY_ANNOTATION: "3s"}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(
            name=container, image="docker.io/kubeflowkatib/pytorch-mnist-cpu:v1beta1-21320b6",
            command=["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"])]))


class Background:
    """Calls the handlers for one job until stopped, as events and resyncs would."""

    def __init__(self, driver: JobDriver) -> None:
        self.driver = driver
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                if self.driver.get() is not None:
                    self.driver.step()
            except Exception as exc:
                self.errors.append(exc)
                return
            self.stop.wait(0.3)


@pytest.fixture
def sdk(cluster: Any) -> TrainingClient:
    return TrainingClient(config_file=str(cluster.kubeconfig))


@pytest.fixture
def handlers(kube: KubeClient, namespace: str) -> Iterator[list[Background]]:
    started: list[Background] = []
    yield started
    for runner in started:
        runner.stop.set()
        runner.thread.join(timeout=10)


def drive(kube: KubeClient, handlers: list[Background], kind: str, name: str,
          namespace: str) -> Background:
    runner = Background(JobDriver(kube, {"kind": kind, "metadata": {"name": name,
                                                                    "namespace": namespace}}))
    runner.thread.start()
    handlers.append(runner)
    return runner


def test_sdk_pytorchjob_reaches_succeeded(kube: KubeClient, crds: None, namespace: str,
                                          sdk: TrainingClient,
                                          handlers: list[Background]) -> None:
    job = KubeflowOrgV1PyTorchJob(
        api_version="kubeflow.org/v1", kind="PyTorchJob",
        metadata=k8s.V1ObjectMeta(name="sdk-mnist", namespace=namespace),
        spec=KubeflowOrgV1PyTorchJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy="None"),
            pytorch_replica_specs={
                "Master": KubeflowOrgV1ReplicaSpec(
                    replicas=1, restart_policy="OnFailure",
                    template=template("pytorch", finish=True)),
                "Worker": KubeflowOrgV1ReplicaSpec(
                    replicas=1, restart_policy="OnFailure",
                    template=template("pytorch", finish=False)),
            }))
    sdk.create_job(job, namespace=namespace)
    runner = drive(kube, handlers, "PyTorchJob", "sdk-mnist", namespace)

    sdk.wait_for_job_conditions("sdk-mnist", namespace, job_kind="PyTorchJob",
                                expected_conditions={"Running"}, wait_timeout=60,
                                polling_interval=1)
    assert sorted(sdk.get_job_pod_names("sdk-mnist", namespace)) == [
        "sdk-mnist-master-0", "sdk-mnist-worker-0"]
    assert sdk.get_job_pod_names("sdk-mnist", namespace, is_master=True) == [
        "sdk-mnist-master-0"]
    done = sdk.wait_for_job_conditions("sdk-mnist", namespace, job_kind="PyTorchJob",
                                       wait_timeout=60, polling_interval=1)
    assert runner.errors == []
    assert sdk.is_job_succeeded("sdk-mnist", namespace, job_kind="PyTorchJob")
    assert done.status.completion_time is not None
    assert done.status.replica_statuses["Master"].succeeded == 1
    assert [c.type for c in sdk.get_job_conditions("sdk-mnist", namespace)][-1] == "Succeeded"
    listed = sdk.list_jobs(namespace, job_kind="PyTorchJob")
    assert [j.metadata.name for j in listed] == ["sdk-mnist"]
    fetched = sdk.get_job("sdk-mnist", namespace, job_kind="PyTorchJob")
    assert fetched.spec.pytorch_replica_specs["Worker"].replicas == 1
    sdk.delete_job("sdk-mnist", namespace, job_kind="PyTorchJob")
    assert sdk.list_jobs(namespace, job_kind="PyTorchJob") == []


def test_sdk_tfjob_reaches_succeeded(kube: KubeClient, crds: None, namespace: str,
                                     sdk: TrainingClient, handlers: list[Background]) -> None:
    job = KubeflowOrgV1TFJob(
        api_version="kubeflow.org/v1", kind="TFJob",
        metadata=k8s.V1ObjectMeta(name="sdk-tf", namespace=namespace),
        spec=KubeflowOrgV1TFJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy="All"),
            tf_replica_specs={
                "Worker": KubeflowOrgV1ReplicaSpec(
                    replicas=2, template=template("tensorflow", finish=True)),
            }))
    sdk.create_job(job, namespace=namespace)
    runner = drive(kube, handlers, "TFJob", "sdk-tf", namespace)
    done = sdk.wait_for_job_conditions("sdk-tf", namespace, job_kind="TFJob", wait_timeout=60,
                                       polling_interval=1)
    assert runner.errors == []
    assert sdk.is_job_succeeded("sdk-tf", namespace, job_kind="TFJob")
    assert done.status.conditions[-1].message == f"TFJob {namespace}/sdk-tf successfully completed."


def _xgboost(name: str, namespace: str) -> Any:
    return KubeflowOrgV1XGBoostJob(
        api_version="kubeflow.org/v1", kind="XGBoostJob",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        spec=KubeflowOrgV1XGBoostJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy="None"),
            xgb_replica_specs={
                "Master": KubeflowOrgV1ReplicaSpec(
                    replicas=1, restart_policy="Never", template=template("xgboost", finish=True)),
                "Worker": KubeflowOrgV1ReplicaSpec(
                    replicas=1, restart_policy="Never",
                    template=template("xgboost", finish=False)),
            }))


def _paddle(name: str, namespace: str) -> Any:
    return KubeflowOrgV1PaddleJob(
        api_version="kubeflow.org/v1", kind="PaddleJob",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        spec=KubeflowOrgV1PaddleJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy="None"),
            paddle_replica_specs={
                "Master": KubeflowOrgV1ReplicaSpec(
                    replicas=1, template=template("paddle", finish=True)),
                "Worker": KubeflowOrgV1ReplicaSpec(
                    replicas=1, template=template("paddle", finish=False)),
            }))


def _jax(name: str, namespace: str) -> Any:
    return KubeflowOrgV1JAXJob(
        api_version="kubeflow.org/v1", kind="JAXJob",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        spec=KubeflowOrgV1JAXJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy="None"),
            jax_replica_specs={
                "Worker": KubeflowOrgV1ReplicaSpec(
                    replicas=2, template=template("jax", finish=True)),
            }))


def _mpi(name: str, namespace: str) -> Any:
    """The SDK writes MPIJobs through kubeflow.org/v1: training-operator semantics (a
    launcher pod, kubectl-exec workers), served next to v2beta1 by the same CRD."""
    return KubeflowOrgV1MPIJob(
        api_version="kubeflow.org/v1", kind="MPIJob",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        spec=KubeflowOrgV1MPIJobSpec(
            slots_per_worker=1, run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy="Running"),
            mpi_replica_specs={
                "Launcher": KubeflowOrgV1ReplicaSpec(
                    replicas=1, template=template("mpi", finish=True)),
                "Worker": KubeflowOrgV1ReplicaSpec(
                    replicas=2, template=template("mpi", finish=False)),
            }))


@dataclass(frozen=True)
class SdkKind:
    kind: str
    build: Callable[[str, str], Any]
    pods: tuple[str, ...]            # suffixes after the job name
    master: tuple[str, ...]          # the pods the SDK's is_master finds
    succeeded: str                   # the replica type whose succeeded count reaches its size
    message: Callable[[str, str], str]


@pytest.mark.parametrize("case", [
    pytest.param(SdkKind("XGBoostJob", _xgboost, ("master-0", "worker-0"), ("master-0",),
                         "Master", lambda ns, n: f"XGBoostJob {n} is successfully completed."),
                 id="xgboostjob"),
    pytest.param(SdkKind("PaddleJob", _paddle, ("master-0", "worker-0"), ("master-0",),
                         "Master", lambda ns, n: f"PaddleJob {n} is successfully completed."),
                 id="paddlejob"),
    pytest.param(SdkKind("MPIJob", _mpi, ("launcher", "worker-0", "worker-1"), ("launcher",),
                         "Launcher", lambda ns, n: f"MPIJob {n} is successfully completed."),
                 id="mpijob"),
    pytest.param(SdkKind("JAXJob", _jax, ("worker-0", "worker-1"), ("worker-0",), "Worker",
                         lambda ns, n: f"JAXJob {ns}/{n} successfully completed."),
                 id="jaxjob"),
])
def test_sdk_job_lifecycle(kube: KubeClient, crds: None, namespace: str, sdk: TrainingClient,
                           handlers: list[Background], case: SdkKind) -> None:
    """create, get, list, wait for Running and Succeeded, pod names, the logs error path (the
    fake nodes serve no logs), delete: what the SDK's TrainingClient offers for each kind."""
    name = f"sdk-{case.kind.lower()}"
    sdk.create_job(case.build(name, namespace), namespace=namespace)
    runner = drive(kube, handlers, case.kind, name, namespace)
    sdk.wait_for_job_conditions(name, namespace, job_kind=case.kind,
                                expected_conditions={"Running"}, wait_timeout=60,
                                polling_interval=1)
    assert sorted(sdk.get_job_pod_names(name, namespace)) == [f"{name}-{p}" for p in case.pods]
    assert sdk.get_job_pod_names(name, namespace, is_master=True) == [
        f"{name}-{p}" for p in case.master]
    done = sdk.wait_for_job_conditions(name, namespace, job_kind=case.kind, wait_timeout=60,
                                       polling_interval=1)
    assert runner.errors == []
    assert sdk.is_job_succeeded(name, namespace, job_kind=case.kind)
    assert done.status.conditions[-1].message == case.message(namespace, name)
    assert done.status.completion_time is not None
    replicas = sum(1 for p in case.pods if p.startswith(case.succeeded.lower()))
    assert done.status.replica_statuses[case.succeeded].succeeded == replicas
    assert [j.metadata.name for j in sdk.list_jobs(namespace, job_kind=case.kind)] == [name]
    assert sdk.get_job(name, namespace, job_kind=case.kind).metadata.name == name
    with pytest.raises(RuntimeError, match="Failed to read logs for pod"):
        sdk.get_job_logs(name, namespace, job_kind=case.kind)
    sdk.delete_job(name, namespace, job_kind=case.kind)
    assert sdk.list_jobs(namespace, job_kind=case.kind) == []
