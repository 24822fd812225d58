from __future__ import annotations

import json
from typing import Any

import pytest

from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.env import (
    jax_env,
    mxnet_env,
    paddle_env,
    pytorch_env,
    tf_config,
    xgboost_env,
)
from tests.jobs.fixtures import job


def env_map(env: list[dict[str, str]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in env}


@pytest.mark.parametrize(("replica_type", "index", "expected"), [
    pytest.param("Master", 0, {"RANK": "0", "PET_NODE_RANK": "0"}, id="master-rank-0"),
    pytest.param("Worker", 0, {"RANK": "1", "PET_NODE_RANK": "1"}, id="worker-0-rank-1"),
    pytest.param("Worker", 1, {"RANK": "2", "PET_NODE_RANK": "2"}, id="worker-1-rank-2"),
])
def test_pytorch_rank(replica_type: str, index: int, expected: dict[str, str]) -> None:
    env = env_map(pytorch_env(with_defaults(job("pytorch-master-workers.yaml")),
                              replica_type, index))
    assert {k: env[k] for k in expected} == expected
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "mnist-master-0"
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "23456"
    assert env["WORLD_SIZE"] == "3"
    assert env["PET_NNODES"] == "3"
    assert env["PET_NPROC_PER_NODE"] == "auto"


def test_pytorch_order_of_variables() -> None:
    env = pytorch_env(with_defaults(job("pytorch-master-workers.yaml")), "Worker", 0)
    assert [e["name"] for e in env] == [
        "PYTHONUNBUFFERED", "MASTER_PORT", "PET_MASTER_PORT", "MASTER_ADDR", "PET_MASTER_ADDR",
        "WORLD_SIZE", "RANK", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_NNODES"]


@pytest.mark.parametrize(("nproc", "world"), [
    pytest.param("4", "12", id="numeric"),
    pytest.param("gpu", "3", id="gpu-counts-as-one"),
    pytest.param("cpu", "3", id="cpu-counts-as-one"),
])
def test_pytorch_world_size_uses_nproc(nproc: str, world: str) -> None:
    env = env_map(pytorch_env(with_defaults(job("pytorch-master-workers.yaml",
                                                spec={"nprocPerNode": nproc})), "Master", 0))
    assert env["WORLD_SIZE"] == world
    assert env["PET_NPROC_PER_NODE"] == nproc


def test_pytorch_elastic_without_master() -> None:
    env = pytorch_env(with_defaults(job("pytorch-elastic.yaml")), "Worker", 1)
    assert env == [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "PET_NPROC_PER_NODE", "value": "2"},
        {"name": "PET_RDZV_ENDPOINT", "value": "elastic-worker-0:29400"},
        {"name": "PET_RDZV_BACKEND", "value": "c10d"},
        {"name": "PET_NNODES", "value": "1:3"},
        {"name": "PET_MAX_RESTARTS", "value": "10"},
        {"name": "PET_RDZV_CONF", "value": "timeout=900"},
    ]


def test_pytorch_elastic_host_port_id_standalone() -> None:
    spec = {"elasticPolicy": {"rdzvHost": "etcd", "rdzvPort": 2379, "rdzvBackend": "etcd",
                              "rdzvId": "run-1", "standalone": True}}
    env = env_map(pytorch_env(with_defaults(job("pytorch-elastic.yaml", spec=spec)),
                              "Worker", 0))
    assert env["PET_RDZV_ENDPOINT"] == "etcd:2379"
    assert env["PET_RDZV_BACKEND"] == "etcd"
    assert env["PET_RDZV_ID"] == "run-1"
    assert env["PET_STANDALONE"] == ""


UPSTREAM_CLUSTER = ('{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc:2222"],'
                    '"ps":["test-tfjob-ps-0.ns3.svc:2222"],'
                    '"worker":["test-tfjob-worker-0.ns3.svc:2222"]},')


@pytest.mark.parametrize(("replica_type", "index", "domain", "expected"), [
    pytest.param("Worker", 0, "",
                 UPSTREAM_CLUSTER + '"task":{"type":"worker","index":0},"environment":"cloud"}',
                 id="upstream-cluster-spec-worker"),
    pytest.param("Evaluator", 0, "",
                 UPSTREAM_CLUSTER
                 + '"task":{"type":"evaluator","index":0},"environment":"cloud"}',
                 id="evaluator-task"),
    pytest.param("PS", 0, "cluster.example",
                 '{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc.cluster.example:2222"'
                 '],"ps":["test-tfjob-ps-0.ns3.svc.cluster.example:2222"],'
                 '"worker":["test-tfjob-worker-0.ns3.svc.cluster.example:2222"]},'
                 '"task":{"type":"ps","index":0},"environment":"cloud"}',
                 id="custom-cluster-domain"),
])
def test_tf_config(replica_type: str, index: int, domain: str, expected: str) -> None:
    assert tf_config(with_defaults(job("tfjob-ps-worker-evaluator.yaml")), replica_type, index,
                     domain) == expected


@pytest.mark.parametrize(("replica_type", "index", "expected"), [
    pytest.param("Worker", 0, {"cluster": {"worker": {"0": "test-tfjob-worker-0.ns3.svc:2222"},
                                           "ps": ["test-tfjob-ps-0.ns3.svc:2222"]},
                               "task": {"type": "worker", "index": 0}}, id="worker"),
    pytest.param("PS", 0, {"cluster": {"worker": {}, "ps": ["test-tfjob-ps-0.ns3.svc:2222"]},
                           "task": {"type": "ps", "index": 0}}, id="ps"),
])
def test_tf_config_sparse(replica_type: str, index: int, expected: dict[str, object]) -> None:
    tf = with_defaults(job("tfjob-ps-worker-evaluator.yaml",
                           spec={"enableDynamicWorker": True}))
    assert json.loads(tf_config(tf, replica_type, index)) == expected


def test_tf_config_uses_replica_port() -> None:
    tf = with_defaults(job("tfjob-chief-workers.yaml"))
    config = json.loads(tf_config(tf, "Chief", 0))
    assert config["cluster"] == {
        "chief": ["dist-mnist-chief-0.team-b.svc:2222"],
        "worker": ["dist-mnist-worker-0.team-b.svc:3333", "dist-mnist-worker-1.team-b.svc:3333"]}


@pytest.mark.parametrize(("replica_type", "index", "extra"), [
    pytest.param("Worker", 1, {"DMLC_ROLE": "worker", "DMLC_WORKER_ID": "1"}, id="worker"),
    pytest.param("Server", 0, {"DMLC_ROLE": "server"}, id="server"),
    pytest.param("Scheduler", 0, {"DMLC_ROLE": "scheduler"}, id="scheduler"),
])
def test_mxnet_env(replica_type: str, index: int, extra: dict[str, str]) -> None:
    mx = with_defaults(job("mxjob-train.yaml"))
    env = env_map(mxnet_env(mx, replica_type, index))
    assert {k: env[k] for k in extra} == extra
    assert ("DMLC_WORKER_ID" in env) is (replica_type == "Worker")
    assert env["DMLC_PS_ROOT_URI"] == "mxnet-job-scheduler-0"
    assert env["DMLC_PS_ROOT_PORT"] == "9091"
    assert env["DMLC_NUM_SERVER"] == "1"
    assert env["DMLC_NUM_WORKER"] == "2"
    assert env["DMLC_USE_KUBERNETES"] == "1"
    config = json.loads(env["MX_CONFIG"])
    assert config["task"] == {"type": replica_type.lower(), "index": index}
    assert config["cluster"]["worker"] == [{"url": "mxnet-job-worker-0", "port": 9091},
                                           {"url": "mxnet-job-worker-1", "port": 9091}]


def var(name: str, value: str) -> dict[str, object]:
    return {"name": name, "value": value}


POD_IP = {"name": "POD_IP_DUMMY", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
XGB_HEAD = [var("MASTER_PORT", "9999"), var("MASTER_ADDR", "iris-master-0"),
            var("WORLD_SIZE", "3")]
XGB_TAIL = [var("PYTHONUNBUFFERED", "1"), var("WORKER_PORT", "9000"),
            var("WORKER_ADDRS", "iris-worker-0,iris-worker-1")]
PADDLE_PS = [var("PYTHONUNBUFFERED", "1"), var("PADDLE_JOB_ID", "paddle-ps"),
             var("PADDLE_NNODES", "3")]
PADDLE_COL = [var("PYTHONUNBUFFERED", "1"), var("PADDLE_JOB_ID", "paddle-col"),
              var("PADDLE_NNODES", "3")]


@pytest.mark.parametrize(("file", "variables", "replica_type", "index", "expected"), [
    pytest.param("xgboostjob-master-workers.yaml", xgboost_env, "Master", 0,
                 [*XGB_HEAD, var("RANK", "0"), *XGB_TAIL], id="xgboost-master"),
    pytest.param("xgboostjob-master-workers.yaml", xgboost_env, "Worker", 1,
                 [*XGB_HEAD, var("RANK", "2"), *XGB_TAIL], id="xgboost-worker-ranked-after-master"),
    pytest.param("paddlejob-ps.yaml", paddle_env, "Master", 0,
                 [*PADDLE_PS, POD_IP, var("PADDLE_MASTER", "$(POD_IP_DUMMY):36543"),
                  var("PADDLE_SERVER_NUM", "1")], id="paddle-ps-master-announces-its-ip"),
    pytest.param("paddlejob-ps.yaml", paddle_env, "Worker", 0,
                 [*PADDLE_PS, var("PADDLE_MASTER", "paddle-ps-master-0:36543"),
                  var("PADDLE_TRAINER_NUM", "1")], id="paddle-ps-worker"),
    pytest.param("paddlejob-collective.yaml", paddle_env, "Worker", 0,
                 [*PADDLE_COL, POD_IP, var("PADDLE_MASTER", "$(POD_IP_DUMMY):37777")],
                 id="paddle-collective-worker0-is-the-endpoint"),
    pytest.param("paddlejob-collective.yaml", paddle_env, "Worker", 2,
                 [*PADDLE_COL, var("PADDLE_MASTER", "paddle-col-worker-0:37777")],
                 id="paddle-collective-worker"),
    pytest.param("jaxjob-workers.yaml", jax_env, "Worker", 1,
                 [var("PYTHONUNBUFFERED", "1"), var("COORDINATOR_PORT", "6666"),
                  var("COORDINATOR_ADDRESS", "spmd-worker-0"), var("NUM_PROCESSES", "2"),
                  var("PROCESS_ID", "1")], id="jax-worker"),
])
def test_framework_env(file: str, variables: Any, replica_type: str, index: int,
                       expected: list[dict[str, object]]) -> None:
    assert variables(with_defaults(job(file)), replica_type, index) == expected


def test_xgboost_single_master_has_no_worker_variables() -> None:
    single = with_defaults(job("xgboostjob-master-workers.yaml",
                               spec={"xgbReplicaSpecs": {"Worker": {"replicas": 0}}}))
    env = env_map(xgboost_env(single, "Master", 0))
    assert (env["WORLD_SIZE"], env["RANK"]) == ("1", "0")
    assert "WORKER_ADDRS" not in env
    assert "WORKER_PORT" not in env
