"""Framework environment variables: how each replica learns its rank and finds its peers.

Training code reads these (``torchrun`` reads ``PET_*``, TensorFlow reads ``TF_CONFIG``, MXNet
reads ``DMLC_*``, XGBoost's Rabit tracker ``MASTER_*``/``WORKER_*``, ``paddle.distributed.launch``
``PADDLE_*``, ``jax.distributed.initialize`` ``COORDINATOR_*``); the formulas and their order
match upstream so unchanged images run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from functions.jobs.core.defaults import port_of
from functions.jobs.core.frameworks import JAX, MXNET, PADDLE, PYTORCH, TENSORFLOW, XGBOOST
from functions.jobs.core.model import Job, Obj
from functions.jobs.core.settings import Settings

TF_TYPES = ("Chief", "Evaluator", "Master", "PS", "Worker")


def _var(name: str, value: str) -> Obj:
    return {"name": name, "value": value}


def inject(job: Job, replica_type: str, index: int, pod_spec: Obj, settings: Settings) -> None:
    """Append the framework's variables to the containers of ``pod_spec`` (in place)."""
    containers = pod_spec.get("containers") or []
    if job.framework == TENSORFLOW:
        if not is_distributed_tf(job):
            return
        config = tf_config(job, replica_type, index, settings.cluster_domain)
        for container in containers:
            if container.get("name") == job.framework.default_container:
                container["env"] = [*(container.get("env") or []), _var("TF_CONFIG", config)]
        return
    variables = ALL_CONTAINERS_ENV.get(job.kind)
    if variables is None:
        return
    extra = variables(job, replica_type, index)
    for container in containers:
        container["env"] = [*(container.get("env") or []), *extra]


# -- PyTorch ------------------------------------------------------------------------------------

def nproc_per_node_int(job: Job) -> int:
    value = job.spec.nproc_per_node
    if value is None or value in ("auto", "cpu", "gpu"):
        return 1
    try:
        return int(value)
    except ValueError:
        return 1


def pytorch_env(job: Job, replica_type: str, index: int) -> list[Obj]:
    out = [_var("PYTHONUNBUFFERED", "1")]
    if "Master" in job.replica_specs:
        port = str(port_of(job, "Master"))
        master = f"{job.name}-master-0"
        rank = index + 1 if replica_type == "Worker" else index
        out += [_var("MASTER_PORT", port), _var("PET_MASTER_PORT", port),
                _var("MASTER_ADDR", master), _var("PET_MASTER_ADDR", master),
                _var("WORLD_SIZE", str(job.total_replicas * nproc_per_node_int(job))),
                _var("RANK", str(rank)), _var("PET_NODE_RANK", str(rank))]
    if job.spec.nproc_per_node is not None:
        out.append(_var("PET_NPROC_PER_NODE", job.spec.nproc_per_node))
    elastic = job.spec.elastic_policy
    if elastic is None:
        out.append(_var("PET_NNODES", str(job.total_replicas)))
        return out
    host = elastic.rdzv_host or f"{job.name}-worker-0"
    port_num = elastic.rdzv_port if elastic.rdzv_port is not None else port_of(job, "Worker")
    out.append(_var("PET_RDZV_ENDPOINT", f"{host}:{port_num}"))
    out.append(_var("PET_RDZV_BACKEND", elastic.rdzv_backend or "c10d"))
    if elastic.min_replicas is not None and elastic.max_replicas is not None:
        out.append(_var("PET_NNODES", f"{elastic.min_replicas}:{elastic.max_replicas}"))
    else:
        out.append(_var("PET_NNODES", str(job.replicas("Worker"))))
    if elastic.max_restarts is not None:
        out.append(_var("PET_MAX_RESTARTS", str(elastic.max_restarts)))
    if elastic.n_proc_per_node is not None:
        out.append(_var("PET_NPROC_PER_NODE", str(elastic.n_proc_per_node)))
    if elastic.rdzv_id:
        out.append(_var("PET_RDZV_ID", elastic.rdzv_id))
    if elastic.rdzv_conf:
        out.append(_var("PET_RDZV_CONF", ",".join(f"{c.key}={c.value}"
                                                   for c in elastic.rdzv_conf)))
    if elastic.standalone:
        out.append(_var("PET_STANDALONE", ""))
    return out


# -- TensorFlow ---------------------------------------------------------------------------------

def is_distributed_tf(job: Job) -> bool:
    """More than one replica over the five TF types (an unset count counts as one)."""
    return sum(job.replicas(t) for t in TF_TYPES if t in job.replica_specs) != 1


def tf_cluster(job: Job, cluster_domain: str = "") -> dict[str, list[str]]:
    suffix = f".{cluster_domain}" if cluster_domain else ""
    cluster: dict[str, list[str]] = {}
    for rtype in job.replica_specs:
        rt = rtype.lower()
        port = port_of(job, rtype)
        cluster[rt] = [f"{job.name}-{rt}-{i}.{job.namespace}.svc{suffix}:{port}"
                       for i in range(job.replicas(rtype))]
    return cluster


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def tf_config(job: Job, replica_type: str, index: int, cluster_domain: str = "") -> str:
    """``TF_CONFIG`` as Go's encoding/json writes it (cluster keys sorted)."""
    cluster = tf_cluster(job, cluster_domain)
    rt = replica_type.lower()
    task = {"type": rt, "index": index}
    if not job.spec.enable_dynamic_worker:
        ordered = {k: cluster[k] for k in sorted(cluster)}
        return _json({"cluster": ordered, "task": task, "environment": "cloud"})
    sparse_workers: dict[str, str] = {}
    sparse_ps: list[str] | None = []
    if rt == "ps":
        sparse_ps = [cluster["ps"][index]]
    elif rt == "worker":
        sparse_ps = cluster.get("ps")
        sparse_workers[str(index)] = cluster[rt][index]
    return _json({"cluster": {"worker": sparse_workers, "ps": sparse_ps}, "task": task})


# -- MXNet --------------------------------------------------------------------------------------

TUNER_SERVER_KEY = "tuner-server-key"


def mx_config(job: Job, replica_type: str, index: int) -> str:
    cluster: dict[str, list[Obj]] = {}
    labels: dict[str, str] = {}
    for rtype, spec in job.replica_specs.items():
        rt = rtype.lower()
        port = port_of(job, rtype)
        cluster[rt] = [{"url": f"{job.name}-{rt}-{i}", "port": port}
                       for i in range(job.replicas(rtype))]
        annotations = (spec.template.get("metadata") or {}).get("annotations") or {}
        labels[rt] = str(annotations.get(TUNER_SERVER_KEY, ""))
    return _json({"cluster": {k: cluster[k] for k in sorted(cluster)},
                  "labels": {k: labels[k] for k in sorted(labels)},
                  "task": {"type": replica_type.lower(), "index": index}})


def mxnet_env(job: Job, replica_type: str, index: int) -> list[Obj]:
    has_scheduler = "Scheduler" in job.replica_specs
    out = [
        _var("MX_CONFIG", mx_config(job, replica_type, index)),
        _var("DMLC_PS_ROOT_PORT", str(port_of(job, "Scheduler") if has_scheduler else 0)),
        _var("DMLC_PS_ROOT_URI", f"{job.name}-scheduler-0" if has_scheduler else ""),
        _var("DMLC_NUM_SERVER", str(job.replicas("Server"))),
        _var("DMLC_NUM_WORKER", str(job.replicas("Worker"))),
        _var("DMLC_ROLE", replica_type.lower()),
        _var("DMLC_USE_KUBERNETES", "1"),
    ]
    if replica_type == "Worker":
        out.append(_var("DMLC_WORKER_ID", str(index)))
    return out


# -- XGBoost ------------------------------------------------------------------------------------

def xgboost_env(job: Job, replica_type: str, index: int) -> list[Obj]:
    """The Rabit tracker (and LightGBM) contract: the master's address, a rank that numbers
    workers after the master, and the workers' addresses when there is more than one pod."""
    total = job.total_replicas
    rank = index + (job.replicas("Master") if replica_type == "Worker" else 0)
    out = [_var("MASTER_PORT", str(port_of(job, "Master"))),
           _var("MASTER_ADDR", f"{job.name}-master-0"),
           _var("WORLD_SIZE", str(total)), _var("RANK", str(rank)),
           _var("PYTHONUNBUFFERED", "1")]
    if total > 1:
        out += [_var("WORKER_PORT", str(port_of(job, "Worker"))),
                _var("WORKER_ADDRS", ",".join(f"{job.name}-worker-{i}"
                                              for i in range(total - 1)))]
    return out


# -- PaddlePaddle -------------------------------------------------------------------------------

def paddle_env(job: Job, replica_type: str, index: int) -> list[Obj]:
    """``paddle.distributed.launch`` rendezvous: Master 0 (parameter-server mode) or Worker 0
    (collective mode, no Master) is the endpoint; that pod announces its own IP through a
    field reference, the others its Service name."""
    out = [_var("PYTHONUNBUFFERED", "1"), _var("PADDLE_JOB_ID", job.name),
           _var("PADDLE_NNODES", str(job.total_replicas))]
    ps_mode = "Master" in job.replica_specs
    endpoint_type = "Master" if ps_mode else "Worker"
    port = port_of(job, endpoint_type)
    if index == 0 and replica_type == endpoint_type:
        out += [{"name": "POD_IP_DUMMY",
                 "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                _var("PADDLE_MASTER", f"$(POD_IP_DUMMY):{port}")]
    else:
        out.append(_var("PADDLE_MASTER", f"{job.name}-{endpoint_type.lower()}-0:{port}"))
    if ps_mode:
        out.append(_var("PADDLE_SERVER_NUM" if replica_type == "Master"
                        else "PADDLE_TRAINER_NUM", "1"))
    return out


# -- JAX ----------------------------------------------------------------------------------------

def jax_env(job: Job, replica_type: str, index: int) -> list[Obj]:
    """``jax.distributed.initialize``: worker 0 is the coordinator; each process its index."""
    return [_var("PYTHONUNBUFFERED", "1"),
            _var("COORDINATOR_PORT", str(port_of(job, "Worker"))),
            _var("COORDINATOR_ADDRESS", f"{job.name}-worker-0"),
            _var("NUM_PROCESSES", str(job.total_replicas)),
            _var("PROCESS_ID", str(index))]


# The kinds whose variables go to every container of a pod (TFJob's TF_CONFIG goes to its
# default container only, and MPIJob's environment is built by functions.jobs.core.mpi).
ALL_CONTAINERS_ENV: dict[str, Callable[[Job, str, int], list[Obj]]] = {
    PYTORCH.kind: pytorch_env, MXNET.kind: mxnet_env, XGBOOST.kind: xgboost_env,
    PADDLE.kind: paddle_env, JAX.kind: jax_env,
}
