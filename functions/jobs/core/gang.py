"""Gang scheduling: the PodGroup that makes a scheduler place all of a job's pods or none.

Only when the operator is configured for a gang scheduler (volcano or scheduler-plugins) and
the PodGroup API is served. With volcano, pods are held back until the PodGroup is admitted
(phase ``Inqueue`` or later), as upstream does.
"""

from __future__ import annotations

from typing import Any

from functions.jobs.core.model import Job, Obj
from functions.jobs.core.objects import owner_reference
from functions.jobs.core.settings import VOLCANO, Settings

VOLCANO_API = "scheduling.volcano.sh/v1beta1"
PLUGINS_API = "scheduling.x-k8s.io/v1alpha1"


def podgroup_api_version(settings: Settings) -> str:
    return VOLCANO_API if settings.gang_scheduler == VOLCANO else PLUGINS_API


def _quantity(value: Any) -> float:
    """A Kubernetes quantity as a number (enough precision to add requests)."""
    text = str(value)
    suffixes = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
                "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * suffixes[suffix]
    return float(text)


def _format(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{round(value * 1000)}m"


def min_resources(job: Job, min_member: int) -> dict[str, str]:
    """Sum of container requests of the first ``min_member`` replicas, in type order."""
    totals: dict[str, float] = {}
    counted = 0
    for rtype in job.ordered_types():
        for _ in range(job.replicas(rtype)):
            if counted >= min_member:
                break
            counted += 1
            for container in job.replica_specs[rtype].containers:
                requests = (container.get("resources") or {}).get("requests") or {}
                for key, value in requests.items():
                    totals[key] = totals.get(key, 0.0) + _quantity(value)
    return {k: _format(v) for k, v in sorted(totals.items())}


def desired_podgroup(job: Job, settings: Settings, existing: Obj | None = None) -> Obj:
    """The job's PodGroup; a volcano queue already set on ``existing`` is kept."""
    policy = job.run_policy.scheduling_policy
    min_member = (policy.min_available if policy and policy.min_available is not None
                  else job.total_replicas)
    resources = (dict(policy.min_resources) if policy and policy.min_resources
                 else min_resources(job, min_member))
    spec: Obj = {"minMember": min_member}
    if resources:
        spec["minResources"] = resources
    if settings.gang_scheduler == VOLCANO:
        current = ((existing or {}).get("spec") or {}).get("queue")
        spec["queue"] = current or (policy.queue if policy and policy.queue else "default")
        if policy and policy.priority_class:
            spec["priorityClassName"] = policy.priority_class
    elif policy and policy.schedule_timeout_seconds is not None:
        spec["scheduleTimeoutSeconds"] = policy.schedule_timeout_seconds
    metadata: Obj = {"name": job.name, "namespace": job.namespace,
                     "ownerReferences": [owner_reference(job)]}
    if job.annotations:
        metadata["annotations"] = dict(job.annotations)
    return {"apiVersion": podgroup_api_version(settings), "kind": "PodGroup",
            "metadata": metadata, "spec": spec}


def podgroup_waiting(settings: Settings, podgroup: Obj | None) -> bool:
    """Volcano admits a gang by moving its PodGroup past ``Pending``; wait until then."""
    if settings.gang_scheduler != VOLCANO:
        return False
    phase = ((podgroup or {}).get("status") or {}).get("phase") or ""
    return phase in ("", "Pending")
