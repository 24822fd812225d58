"""Desired pods and headless services of the ``kubeflow.org/v1`` kinds.

Names, labels, owner references and the pod spec follow upstream exactly, because users, the
Kubeflow SDK and dashboards find a job's pods by these labels and reach peers by these names.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from functions.jobs.core import env
from functions.jobs.core.defaults import named_container
from functions.jobs.core.frameworks import (
    LABEL_JOB_NAME,
    LABEL_JOB_ROLE,
    LABEL_OPERATOR,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
    PYTORCH,
)
from functions.jobs.core.model import Job, Obj
from functions.jobs.core.settings import VOLCANO, Settings

VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"
PLUGINS_POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


@dataclass(frozen=True, slots=True)
class Notice:
    """A Kubernetes Event the adapter should record on the job."""

    type: str
    reason: str
    message: str


def resource_exists(job: Obj, obj: Obj) -> Notice:
    """The Event when a child's name is taken by an object the job does not control (the
    job never adopts or overwrites it; upstream's ``ErrResourceExists``)."""
    name = (obj.get("metadata") or {}).get("name", "")
    job_name = (job.get("metadata") or {}).get("name", "")
    return Notice("Warning", "ErrResourceExists",
                  f'Resource "{name}" of Kind "{obj.get("kind", "")}" already exists and is '
                  f'not managed by {job.get("kind", "")} {job_name}')


def object_name(job_name: str, replica_type: str, index: int) -> str:
    """``<job>-<lowercase type>-<index>``; ``/`` becomes ``-``."""
    return f"{job_name}-{replica_type.lower()}-{index}".replace("/", "-")


def base_labels(job: Job) -> dict[str, str]:
    return {LABEL_OPERATOR: job.framework.operator_name,
            LABEL_JOB_NAME: job.name.replace("/", "-")}


def selector(labels: dict[str, str]) -> str:
    """``metav1.FormatLabelSelector`` of equality terms: ``k=v`` pairs sorted by key."""
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def replica_labels(job: Job, replica_type: str, index: int) -> dict[str, str]:
    labels = base_labels(job)
    labels[LABEL_REPLICA_TYPE] = replica_type.lower()
    labels[LABEL_REPLICA_INDEX] = str(index)
    return labels


def owner_reference(job: Job) -> Obj:
    return {"apiVersion": job.api_version, "kind": job.kind, "name": job.name,
            "uid": job.uid, "controller": True, "blockOwnerDeletion": True}


def is_master_role(job: Job, replica_type: str, index: int) -> bool:
    """The pod that carries ``job-role: master`` (the Kubeflow SDK's ``is_master``): every pod
    of the first of the framework's master types present in the job, else worker 0 where the
    framework says so."""
    fw = job.framework
    present = [t for t in fw.master_types if t in job.replica_specs]
    if present:
        return replica_type in present
    return fw.worker0_master and replica_type == "Worker" and index == 0


def pod_restart_policy(replica_restart_policy: str) -> str:
    """``ExitCode`` is the controller's business; the kubelet must not restart such pods."""
    return "Never" if replica_restart_policy == "ExitCode" else replica_restart_policy


def desired_pod(job: Job, replica_type: str, index: int,
                settings: Settings) -> tuple[Obj, list[Notice]]:
    """The pod of one replica of a defaulted v1 job, and the Events building it warrants."""
    spec = job.replica_specs[replica_type]
    template = copy.deepcopy(spec.template)
    meta = template.get("metadata") or {}
    pod_spec = template.get("spec") or {}
    notices: list[Notice] = []
    name = object_name(job.name, replica_type, index)
    labels = dict(meta.get("labels") or {})
    labels.update(replica_labels(job, replica_type, index))
    if is_master_role(job, replica_type, index):
        labels[LABEL_JOB_ROLE] = "master"
    annotations = dict(meta.get("annotations") or {})
    if pod_spec.get("restartPolicy"):
        notices.append(Notice("Warning", "SetPodTemplateRestartPolicy",
                              "Restart policy in pod template will be overwritten by restart "
                              "policy in replica spec"))
    pod_spec["restartPolicy"] = pod_restart_policy(spec.restart_policy or "Never")
    env.inject(job, replica_type, index, pod_spec, settings)
    if job.framework == PYTORCH and replica_type == "Worker" and "Master" in job.replica_specs:
        pod_spec["initContainers"] = [*(pod_spec.get("initContainers") or []),
                                      _pytorch_init_container(job, settings)]
    notices.extend(_gang_decorations(job, replica_type, pod_spec, labels, annotations, settings))
    metadata: Obj = {"name": name, "namespace": job.namespace, "labels": labels,
                     "ownerReferences": [owner_reference(job)]}
    if annotations:
        metadata["annotations"] = annotations
    if meta.get("finalizers"):
        metadata["finalizers"] = list(meta["finalizers"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}, notices


def desired_service(job: Job, replica_type: str, index: int) -> Obj:
    """The headless service that gives one replica a stable DNS name."""
    labels = replica_labels(job, replica_type, index)
    container = named_container(job.replica_specs[replica_type].template,
                                job.framework.default_container) or {}
    ports = [{"name": p.get("name"), "port": p.get("containerPort")}
             for p in container.get("ports") or []]
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": object_name(job.name, replica_type, index),
                     "namespace": job.namespace, "labels": dict(labels),
                     "ownerReferences": [owner_reference(job)]},
        "spec": {"clusterIP": "None", "selector": dict(labels), "ports": ports},
    }


def _pytorch_init_container(job: Job, settings: Settings) -> Obj:
    master = object_name(job.name, "Master", 0)
    script = (f"err=1;for i in $(seq {settings.init_container_max_tries}); do "
              f"if nslookup {master}; then err=0 && break; fi;"
              "echo waiting for master; sleep 2; done; exit $err")
    return {
        "name": "init-pytorch", "image": settings.init_container_image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {"cpu": "100m", "memory": "20Mi"},
                      "requests": {"cpu": "50m", "memory": "10Mi"}},
        "command": ["sh", "-c", script],
    }


def _gang_decorations(job: Job, replica_type: str, pod_spec: Obj, labels: dict[str, str],
                      annotations: dict[str, str], settings: Settings) -> list[Notice]:
    if not settings.gang_scheduler:
        return []
    wanted = VOLCANO if settings.gang_scheduler == VOLCANO else settings.gang_scheduler_name
    notices: list[Notice] = []
    current = pod_spec.get("schedulerName")
    if not current:
        pod_spec["schedulerName"] = wanted
    elif current != wanted:
        notices.append(Notice("Warning", "SetPodTemplateSchedulerName",
                              f"Another scheduler is specified when gang-scheduling is enabled "
                              f"and it will not be overwritten: {current}"))
    if settings.gang_scheduler == VOLCANO:
        annotations[VOLCANO_GROUP_ANNOTATION] = job.name
        annotations[VOLCANO_TASK_ANNOTATION] = replica_type.lower()
    else:
        labels[PLUGINS_POD_GROUP_LABEL] = job.name
    return notices
