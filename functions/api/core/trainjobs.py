"""Kubeflow Trainer v2 TrainJobs for the API: a :class:`TrainJobRequest` into a TrainJob, and
what a TrainJob's status and pods say back.

A TrainJob names a ClusterTrainingRuntime (``spec.runtimeRef``) and overrides the runtime's
trainer with ``spec.trainer`` (image, command, args, env, numNodes, resourcesPerNode); the
request's labels also go onto the trainer nodes' pods, as onto the pods of the v1 kinds,
through a runtime patch of this service's own (``spec.runtimePatches``). The
upstream controller makes a JobSet of it; its child Jobs are counted in ``status.jobsStatus``
and its pods carry the JobSet's labels. Like the v1 kinds, it is created suspended
(``spec.suspend``) and labelled for the queue.
"""

from __future__ import annotations

from typing import Any

from functions.api.core import queue
from functions.api.core.kinds import TRAINER_API_VERSION, TRAINJOB_KIND
from functions.api.core.models import ReplicaCounts, ResourceRequest, TrainJobRequest

Obj = dict[str, Any]
RUNTIME_KIND = "ClusterTrainingRuntime"
RUNTIME_GROUP = "trainer.kubeflow.org"
# The JobSet's replicated job that runs the trainer in the upstream runtimes, and its container.
TRAINER_REPLICA = "node"
LABEL_JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
LABEL_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# who owns the runtime patch that labels the trainer nodes' pods
PATCH_MANAGER = "training.opendatahub.io/api"


def container_resources(resources: ResourceRequest, *, gpus: bool = True) -> Obj:
    """A container's ``resources`` from a request (memory and GPUs are limits too; GPUs left
    out where ``gpus`` is false); empty when nothing is asked."""
    requests: Obj = {}
    limits: Obj = {}
    if resources.cpu:
        requests["cpu"] = resources.cpu
    if resources.memory:
        requests["memory"] = limits["memory"] = resources.memory
    if gpus and resources.gpus:
        requests[queue.GPU_RESOURCE] = limits[queue.GPU_RESOURCE] = resources.gpus
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def build(request: TrainJobRequest, namespace: str, metadata: Obj) -> Obj:
    """The TrainJob for ``request``, suspended, with ``metadata`` (labels, annotations)."""
    trainer: Obj = {"image": request.image, "numNodes": request.num_nodes}
    if request.command:
        trainer["command"] = list(request.command)
    if request.args:
        trainer["args"] = list(request.args)
    if request.env:
        trainer["env"] = [{"name": k, "value": v} for k, v in sorted(request.env.items())]
    per_node = container_resources(request.resources)
    if per_node:
        trainer["resourcesPerNode"] = per_node
    spec: Obj = {"suspend": True,
                 "runtimeRef": {"apiGroup": RUNTIME_GROUP, "kind": RUNTIME_KIND,
                                "name": request.runtime},
                 "trainer": trainer}
    if request.labels:
        spec["runtimePatches"] = [pod_labels_patch(request.labels)]
    return {"apiVersion": TRAINER_API_VERSION, "kind": TRAINJOB_KIND,
            "metadata": {"name": request.name, "namespace": namespace, **metadata},
            "spec": spec}


def pod_labels_patch(labels: dict[str, str]) -> Obj:
    """A runtime patch that labels the pods of the trainer's replicated job."""
    pod_template = {"metadata": {"labels": dict(labels)}}
    return {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": TRAINER_REPLICA,
                            "template": {"spec": {"template": pod_template}}}]}}}}


def running(cr: Obj) -> bool:
    """Whether any child Job of the TrainJob has pods running (or ready)."""
    return any(int(j.get("active") or 0) > 0 or int(j.get("ready") or 0) > 0
               for j in _jobs_status(cr))


def child_jobs(cr: Obj) -> dict[str, ReplicaCounts]:
    """Per replicated job of the JobSet (``node``, initializers...), its child Jobs: how many
    there are, and how many are active, succeeded and failed."""
    out: dict[str, ReplicaCounts] = {}
    for entry in _jobs_status(cr):
        counts = {k: int(entry.get(k) or 0)
                  for k in ("active", "succeeded", "failed", "suspended")}
        out[str(entry.get("name"))] = ReplicaCounts(
            desired=sum(counts.values()), active=counts["active"],
            succeeded=counts["succeeded"], failed=counts["failed"])
    return out


def _jobs_status(cr: Obj) -> list[Obj]:
    entries = (cr.get("status") or {}).get("jobsStatus") or []
    return [e for e in entries if isinstance(e, dict) and e.get("name")]


def log_pod_selector(cr: Obj, replica: str, index: int) -> str:
    """The pod of node ``index`` of replicated job ``replica`` (an indexed Job's pods)."""
    name = (cr.get("metadata") or {}).get("name")
    return (f"{LABEL_JOBSET_NAME}={name},{LABEL_REPLICATED_JOB}={replica},"
            f"{LABEL_COMPLETION_INDEX}={index}")
