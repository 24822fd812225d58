from __future__ import annotations

import pytest

from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.model import parse_job
from tests.jobs.fixtures import job, load


@pytest.mark.parametrize(("file", "rtype", "replicas", "policy"), [
    pytest.param("tfjob-ps-worker-evaluator.yaml", "PS", 1, "Never", id="tf-never"),
    pytest.param("mxjob-train.yaml", "Server", 1, "Never", id="mx-never"),
    pytest.param("mpijob-pi.yaml", "Launcher", 1, "OnFailure", id="mpi-launcher-onfailure"),
    pytest.param("mpijob-pi.yaml", "Worker", 2, "Never", id="mpi-worker-never"),
    pytest.param("xgboostjob-master-workers.yaml", "Master", 1, "Never", id="xgboost-never"),
    pytest.param("paddlejob-ps.yaml", "Worker", 2, "OnFailure", id="paddle-onfailure"),
    pytest.param("paddlejob-collective.yaml", "Worker", 3, "Never",
                 id="paddle-lowercase-key-normalised"),
    pytest.param("jaxjob-workers.yaml", "Worker", 2, "Never", id="jax-never"),
])
def test_replica_defaults(file: str, rtype: str, replicas: int, policy: str) -> None:
    spec = with_defaults(job(file)).replica_specs[rtype]
    assert (spec.replicas, spec.restart_policy) == (replicas, policy)


def test_defaults_are_not_written_into_the_input() -> None:
    raw = load("pytorch-master-workers.yaml")
    del raw["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    del raw["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"]
    original = parse_job(raw)
    defaulted = with_defaults(original)
    assert defaulted.replica_specs["Worker"].replicas == 1
    assert defaulted.replica_specs["Worker"].restart_policy == "OnFailure"
    assert original.replica_specs["Worker"].replicas is None
    assert "ports" not in original.replica_specs["Worker"].containers[0]


def test_keys_are_normalised() -> None:
    raw = load("pytorch-master-workers.yaml")
    specs = raw["spec"]["pytorchReplicaSpecs"]
    specs["worker"] = specs.pop("Worker")
    specs["MASTER"] = specs.pop("Master")
    assert set(with_defaults(parse_job(raw)).replica_specs) == {"Master", "Worker"}


def test_existing_named_port_is_kept() -> None:
    ports = with_defaults(job("pytorch-elastic.yaml")).replica_specs["Worker"].containers[0][
        "ports"]
    assert ports == [{"name": "pytorchjob-port", "containerPort": 29400}]


def test_port_goes_to_first_container_without_default_name() -> None:
    raw = load("mxjob-train.yaml")
    raw["spec"]["mxReplicaSpecs"]["Server"]["template"]["spec"]["containers"][0]["name"] = "x"
    container = with_defaults(parse_job(raw)).replica_specs["Server"].containers[0]
    assert container["ports"] == [{"name": "mxjob-port", "containerPort": 9091}]


@pytest.mark.parametrize(("elastic", "expected"), [
    pytest.param({}, (2, 2), id="both-from-workers"),
    pytest.param({"minReplicas": 1}, (1, 1), id="max-copies-min"),
    pytest.param({"maxReplicas": 4}, (4, 4), id="min-copies-max"),
])
def test_elastic_defaults(elastic: dict[str, int], expected: tuple[int, int]) -> None:
    raw = load("pytorch-elastic.yaml")
    raw["spec"]["elasticPolicy"] = elastic
    policy = with_defaults(parse_job(raw)).spec.elastic_policy
    assert policy is not None
    assert (policy.min_replicas, policy.max_replicas) == expected


def test_run_policy_and_mpi_defaults() -> None:
    mpi = with_defaults(job("mpijob-pi.yaml"))
    assert mpi.spec.ssh_auth_mount_path == "/root/.ssh"
    assert mpi.spec.mpi_implementation == "OpenMPI"
    assert mpi.spec.launcher_creation_policy == "AtStartup"
    tf = with_defaults(job("tfjob-ps-worker-evaluator.yaml"))
    assert tf.run_policy.clean_pod_policy == "None"
    assert tf.run_policy.suspend is False
    assert tf.spec.success_policy == ""
