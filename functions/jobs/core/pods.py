"""Reading observed pods: which replica a pod is, how it ended, what its failure means.

Both the status rules and the reconcile plan ask the same questions about the same pods; one
module answers them so the two functions can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from functions.jobs.core.frameworks import (
    LABEL_JOB_ROLE,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
    V2BETA1,
)
from functions.jobs.core.model import Job, Obj

MISSING_EXIT_CODE = 0xBEEF   # upstream's marker for "no terminated state": treated as retryable


def name_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def uid_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def terminating(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def controlled_by(obj: Obj, uid: str) -> bool:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid") == uid:
            return True
    return False


def replica_type_of(job: Job, obj: Obj) -> str | None:
    """The canonical replica type named by the object's label (``None`` if not one of ours)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    # MPIJob v2beta1 pods carry only a role label (worker / launcher).
    label = labels.get(LABEL_REPLICA_TYPE) or labels.get(LABEL_JOB_ROLE)
    if label is None:
        return None
    for rtype in job.replica_specs:
        if rtype.lower() == str(label).lower():
            return rtype
    return None


def role_of(pod: Obj) -> str:
    """The ``job-role`` label (``launcher``, ``worker``, ``master``), ``""`` when absent."""
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB_ROLE, ""))


def index_of(obj: Obj) -> int | None:
    label = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_REPLICA_INDEX)
    try:
        return int(label) if label is not None else None
    except ValueError:
        return None


def by_type(job: Job, objs: Iterable[Obj]) -> dict[str, list[Obj]]:
    grouped: dict[str, list[Obj]] = {rtype: [] for rtype in job.replica_specs}
    for obj in objs:
        rtype = replica_type_of(job, obj)
        if rtype is not None:
            grouped[rtype].append(obj)
    return grouped


def exit_container_name(job: Job, replica_type: str) -> str:
    """The container whose exit code counts: the framework default (mpi-operator's
    MPIJob, which has none: container 0)."""
    if job.framework.kind == "MPIJob" and job.framework.api_version == V2BETA1:
        containers = job.replica_specs[replica_type].containers
        return str(containers[0].get("name", "")) if containers else ""
    return job.framework.default_container


def exit_code(pod: Obj, container: str) -> int | None:
    """Exit code of ``container`` if it has terminated, else ``None``."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if status.get("name") == container and terminated is not None:
            return int(terminated.get("exitCode", 0))
    return None


def retryable(code: int) -> bool:
    """Exit codes 1-127 are the program's verdict; 128+ mean a signal (OOM kill, preemption)."""
    return code >= 128


@dataclass(frozen=True, slots=True)
class FailedPod:
    """A Failed pod and what its replica's restart policy makes of it."""

    pod: Obj
    replica_type: str
    exit_code: int
    restart: bool           # delete it so it is recreated
    permanent: bool         # ExitCode policy with a 1-127 code: the job fails


def failed_pods(job: Job, pods: Iterable[Obj]) -> list[FailedPod]:
    """Classify the Failed pods of a defaulted job (upstream ``ReconcilePods``)."""
    out: list[FailedPod] = []
    for pod in pods:
        rtype = replica_type_of(job, pod)
        if rtype is None or phase(pod) != "Failed":
            continue
        policy = job.replica_specs[rtype].restart_policy or ""
        code = exit_code(pod, exit_container_name(job, rtype))
        code = MISSING_EXIT_CODE if code is None else code
        restart = (policy in ("OnFailure", "Always")
                   or (policy == "ExitCode" and retryable(code)))
        permanent = policy == "ExitCode" and not retryable(code)
        out.append(FailedPod(pod, rtype, code, restart, permanent))
    return out


def restart_count_of_running(job: Job, pods: Iterable[Obj]) -> int:
    """Container restarts of Running pods whose replicas may restart (``pastBackoffLimit``)."""
    total = 0
    for pod in pods:
        rtype = replica_type_of(job, pod)
        if rtype is None or phase(pod) != "Running":
            continue
        if job.replica_specs[rtype].restart_policy not in ("OnFailure", "Always", "ExitCode"):
            continue
        status = pod.get("status") or {}
        for cs in [*(status.get("initContainerStatuses") or []),
                   *(status.get("containerStatuses") or [])]:
            total += int(cs.get("restartCount") or 0)
    return total


# Of a pod's spec, what the job handlers read: its containers' names and images
# (pod_problems names an image that cannot be pulled). The rest (volumes, env, resources,
# tolerations, ...) is what the controller wrote from the job's template, and most of a pod.
CONTAINER_READ = ("name", "image")


def as_cached(pod: Obj) -> Obj:
    """What the watch caches keep of a job's pod: its metadata and status whole, and of its
    spec the containers' :data:`CONTAINER_READ`. A cached pod is only read: every write of a
    pod is a create from the job's template, a delete, or a patch of its metadata."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return pod
    kept: Obj = {}
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        if isinstance(containers, list):
            kept[field] = [{k: c[k] for k in CONTAINER_READ if k in c}
                           for c in containers if isinstance(c, dict)]
    return {**pod, "spec": kept}
