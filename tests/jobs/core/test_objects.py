from __future__ import annotations

import pytest

from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.objects import desired_pod, desired_service, object_name
from functions.jobs.core.settings import Settings
from tests.jobs.fixtures import job, load

OWNER = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "mnist",
         "uid": "1b0e4c52-8a7e-4a43-9d53-0d7f1c3a9e01", "controller": True,
         "blockOwnerDeletion": True}


@pytest.mark.parametrize(("job_name", "rtype", "index", "expected"), [
    pytest.param("mnist", "Master", 0, "mnist-master-0", id="master"),
    pytest.param("mnist", "Worker", 2, "mnist-worker-2", id="worker"),
    pytest.param("tfjob", "PS", 1, "tfjob-ps-1", id="ps-lowercase"),
    pytest.param("a/b", "Worker", 0, "a-b-worker-0", id="slash-replaced"),
])
def test_object_name(job_name: str, rtype: str, index: int, expected: str) -> None:
    assert object_name(job_name, rtype, index) == expected


@pytest.mark.parametrize(("file", "rtype", "index", "role"), [
    pytest.param("pytorch-master-workers.yaml", "Master", 0, "master", id="pytorch-master"),
    pytest.param("pytorch-master-workers.yaml", "Worker", 0, None, id="pytorch-worker"),
    pytest.param("pytorch-elastic.yaml", "Worker", 0, "master", id="pytorch-worker0-no-master"),
    pytest.param("pytorch-elastic.yaml", "Worker", 1, None, id="pytorch-worker1-no-master"),
    pytest.param("tfjob-chief-workers.yaml", "Chief", 0, "master", id="tf-chief"),
    pytest.param("tfjob-ps-worker-evaluator.yaml", "Worker", 0, "master", id="tf-worker0"),
    pytest.param("tfjob-ps-worker-evaluator.yaml", "PS", 0, None, id="tf-ps"),
    pytest.param("mxjob-train.yaml", "Server", 0, "master", id="mx-server"),
    pytest.param("mxjob-train.yaml", "Worker", 0, None, id="mx-worker"),
    pytest.param("xgboostjob-master-workers.yaml", "Master", 0, "master", id="xgboost-master"),
    pytest.param("xgboostjob-master-workers.yaml", "Worker", 0, None, id="xgboost-worker0"),
    pytest.param("paddlejob-ps.yaml", "Master", 0, "master", id="paddle-master"),
    pytest.param("paddlejob-collective.yaml", "Worker", 0, None,
                 id="paddle-collective-worker0-is-no-master"),
    pytest.param("jaxjob-workers.yaml", "Worker", 0, "master", id="jax-worker0"),
    pytest.param("jaxjob-workers.yaml", "Worker", 1, None, id="jax-worker1"),
])
def test_pod_labels(file: str, rtype: str, index: int, role: str | None) -> None:
    j = with_defaults(job(file))
    pod, _ = desired_pod(j, rtype, index, Settings())
    labels = pod["metadata"]["labels"]
    assert labels["training.kubeflow.org/operator-name"] == j.framework.operator_name
    assert labels["training.kubeflow.org/job-name"] == j.name
    assert labels["training.kubeflow.org/replica-type"] == rtype.lower()
    assert labels["training.kubeflow.org/replica-index"] == str(index)
    assert labels.get("training.kubeflow.org/job-role") == role


def test_pytorch_master_pod() -> None:
    pod, notices = desired_pod(with_defaults(job("pytorch-master-workers.yaml")), "Master", 0,
                               Settings())
    assert notices == []
    meta = pod["metadata"]
    assert meta["name"] == "mnist-master-0"
    assert meta["namespace"] == "team-a"
    assert meta["ownerReferences"] == [OWNER]
    assert meta["labels"]["team"] == "vision"
    assert meta["annotations"] == {"sidecar.istio.io/inject": "false"}
    spec = pod["spec"]
    assert spec["restartPolicy"] == "OnFailure"
    assert "initContainers" not in spec
    container = spec["containers"][0]
    assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
    assert container["env"][0] == {"name": "LOG_LEVEL", "value": "info"}
    assert container["env"][1] == {"name": "PYTHONUNBUFFERED", "value": "1"}


def test_pytorch_worker_waits_for_master() -> None:
    pod, _ = desired_pod(with_defaults(job("pytorch-master-workers.yaml")), "Worker", 1,
                         Settings(init_container_image="busybox:1", init_container_max_tries=5))
    init = pod["spec"]["initContainers"][0]
    assert init["name"] == "init-pytorch"
    assert init["image"] == "busybox:1"
    assert init["command"][-1].startswith("err=1;for i in $(seq 5); do if nslookup "
                                          "mnist-master-0; then")


def test_template_is_not_modified() -> None:
    j = with_defaults(job("pytorch-master-workers.yaml"))
    before = j.replica_specs["Master"].template
    desired_pod(j, "Master", 0, Settings())
    assert "env" in before["spec"]["containers"][0]
    assert len(before["spec"]["containers"][0]["env"]) == 1


@pytest.mark.parametrize(("policy", "pod_policy"), [
    pytest.param("ExitCode", "Never", id="exitcode-becomes-never"),
    pytest.param("Always", "Always", id="always"),
    pytest.param("Never", "Never", id="never"),
])
def test_restart_policy_mapping(policy: str, pod_policy: str) -> None:
    j = with_defaults(job("tfjob-chief-workers.yaml",
                          spec={"tfReplicaSpecs": {"Worker": {"restartPolicy": policy}}}))
    pod, _ = desired_pod(j, "Worker", 0, Settings())
    assert pod["spec"]["restartPolicy"] == pod_policy


def test_template_restart_policy_is_overwritten_with_warning() -> None:
    raw = load("tfjob-chief-workers.yaml")
    raw["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["restartPolicy"] = "Always"
    from functions.jobs.core.model import parse_job
    pod, notices = desired_pod(with_defaults(parse_job(raw)), "Chief", 0, Settings())
    assert pod["spec"]["restartPolicy"] == "Never"
    assert [n.reason for n in notices] == ["SetPodTemplateRestartPolicy"]


def test_tf_config_only_in_tensorflow_container() -> None:
    raw = load("tfjob-chief-workers.yaml")
    raw["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": "busybox"})
    from functions.jobs.core.model import parse_job
    pod, _ = desired_pod(with_defaults(parse_job(raw)), "Chief", 0, Settings())
    tensorflow, sidecar = pod["spec"]["containers"]
    assert [e["name"] for e in tensorflow["env"]] == ["TF_CONFIG"]
    assert "env" not in sidecar


def test_single_replica_tfjob_has_no_tf_config() -> None:
    raw = load("tfjob-chief-workers.yaml")
    del raw["spec"]["tfReplicaSpecs"]["Worker"]
    from functions.jobs.core.model import parse_job
    pod, _ = desired_pod(with_defaults(parse_job(raw)), "Chief", 0, Settings())
    assert "env" not in pod["spec"]["containers"][0]


@pytest.mark.parametrize(("file", "rtype", "policy", "first_env", "port"), [
    pytest.param("xgboostjob-master-workers.yaml", "Master", "Never", "MASTER_PORT",
                 {"name": "xgboostjob-port", "containerPort": 9999}, id="xgboost"),
    pytest.param("paddlejob-ps.yaml", "Worker", "OnFailure", "PYTHONUNBUFFERED",
                 {"name": "master", "containerPort": 36543}, id="paddle"),
    pytest.param("jaxjob-workers.yaml", "Worker", "Never", "PYTHONUNBUFFERED",
                 {"name": "jaxjob-port", "containerPort": 6666}, id="jax"),
])
def test_framework_pod(file: str, rtype: str, policy: str, first_env: str,
                       port: dict[str, object]) -> None:
    """Default restart policy, the framework port on its default container only, and the
    framework variables in every container (sidecars included, as upstream does)."""
    j = with_defaults(job(file))
    pod, notices = desired_pod(j, rtype, 0, Settings())
    assert notices == []
    assert pod["spec"]["restartPolicy"] == policy
    main, *others = pod["spec"]["containers"]
    assert main["name"] == j.framework.default_container
    assert main["ports"] == [port]
    assert main["env"][0]["name"] == first_env
    for container in others:
        assert "ports" not in container
        assert container["env"] == main["env"]
    assert "initContainers" not in pod["spec"]


def test_headless_service() -> None:
    svc = desired_service(with_defaults(job("tfjob-chief-workers.yaml")), "Worker", 1)
    labels = {"training.kubeflow.org/operator-name": "tfjob-controller",
              "training.kubeflow.org/job-name": "dist-mnist",
              "training.kubeflow.org/replica-type": "worker",
              "training.kubeflow.org/replica-index": "1"}
    assert svc["metadata"]["name"] == "dist-mnist-worker-1"
    assert svc["metadata"]["labels"] == labels
    assert svc["spec"] == {"clusterIP": "None", "selector": labels,
                           "ports": [{"name": "tfjob-port", "port": 3333}]}


@pytest.mark.parametrize(("settings", "template_scheduler", "scheduler", "labels",
                          "annotations", "warned"), [
    pytest.param(Settings(gang_scheduler="volcano"), None, "volcano", {},
                 {"scheduling.k8s.io/group-name": "mnist", "volcano.sh/task-spec": "worker"},
                 False, id="volcano"),
    pytest.param(Settings(gang_scheduler="scheduler-plugins"), None,
                 "scheduler-plugins-scheduler", {"scheduling.x-k8s.io/pod-group": "mnist"}, {},
                 False, id="scheduler-plugins"),
    pytest.param(Settings(gang_scheduler="volcano"), "custom", "custom", {},
                 {"scheduling.k8s.io/group-name": "mnist", "volcano.sh/task-spec": "worker"},
                 True, id="foreign-scheduler-kept"),
    pytest.param(Settings(), None, None, {}, {}, False, id="no-gang"),
])
def test_gang_decorations(settings: Settings, template_scheduler: str | None,
                          scheduler: str | None, labels: dict[str, str],
                          annotations: dict[str, str], warned: bool) -> None:
    raw = load("pytorch-master-workers.yaml")
    if template_scheduler:
        raw["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = (
            template_scheduler)
    from functions.jobs.core.model import parse_job
    pod, notices = desired_pod(with_defaults(parse_job(raw)), "Worker", 0, settings)
    assert pod["spec"].get("schedulerName") == scheduler
    assert pod["metadata"].get("annotations", {}) == annotations
    extra = {k: v for k, v in pod["metadata"]["labels"].items()
             if not k.startswith("training.kubeflow.org/")}
    assert extra == labels
    assert [n.reason for n in notices] == (["SetPodTemplateSchedulerName"] if warned else [])


@pytest.mark.parametrize(("file", "rtype", "ports"), [
    pytest.param("xgboostjob-master-workers.yaml", "Worker",
                 [{"name": "xgboostjob-port", "port": 9000}], id="xgboost-own-port"),
    pytest.param("paddlejob-ps.yaml", "Master", [{"name": "master", "port": 36543}],
                 id="paddle"),
    pytest.param("jaxjob-workers.yaml", "Worker", [{"name": "jaxjob-port", "port": 6666}],
                 id="jax"),
])
def test_framework_service_ports(file: str, rtype: str, ports: list[dict[str, object]]) -> None:
    svc = desired_service(with_defaults(job(file)), rtype, 0)
    assert svc["spec"]["ports"] == ports
    assert svc["spec"]["clusterIP"] == "None"
