"""Gang scheduling: the PodGroup that makes a scheduler place all of a job's pods or none.

Only when the operator is configured for a gang scheduler (volcano or scheduler-plugins) and
the PodGroup API is served. With volcano, pods are held back until the PodGroup is admitted
(phase ``Inqueue`` or later), as upstream does.

``minResources``, unless ``schedulingPolicy.minResources`` sets it, is what the first
``minMember`` pods ask for: replica types in order of their pods' priority (the value of the
template's PriorityClass, highest first; a template naming none gets the cluster's
``globalDefault`` class's, as admission gives its pods, else 0), types of equal priority in
the framework's order; per container, its ``requests``, and for a resource it requests
nothing of, its ``limits`` (Kubernetes defaults a container's missing request to its limit,
so a GPU set only under ``limits`` is requested all the same).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from functions.jobs.core import conditions as c
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


def container_requests(container: Obj) -> dict[str, Any]:
    """What a container requests: its ``requests``, a limit standing in for each resource
    it requests nothing of (as the API server defaults a pod's containers)."""
    resources = container.get("resources") or {}
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def priority_order(job: Job, priorities: Mapping[str, int] | None,
                   default_priority: int = 0) -> list[str]:
    """The job's replica types, highest pod priority first (a stable sort: equal priorities
    keep the framework's order). ``priorities``: PriorityClass name -> value."""
    def priority(rtype: str) -> int:
        spec = job.replica_specs[rtype].template.get("spec") or {}
        name = spec.get("priorityClassName")
        if not name:
            return default_priority
        return (priorities or {}).get(str(name), 0)
    return sorted(job.ordered_types(), key=priority, reverse=True)


def min_resources(job: Job, min_member: int, priorities: Mapping[str, int] | None = None,
                  default_priority: int = 0) -> dict[str, str]:
    """What the first ``min_member`` pods ask for, in priority order (module docstring)."""
    totals: dict[str, float] = {}
    counted = 0
    for rtype in priority_order(job, priorities, default_priority):
        for _ in range(job.replicas(rtype)):
            if counted >= min_member:
                break
            counted += 1
            for container in job.replica_specs[rtype].containers:
                for key, value in container_requests(container).items():
                    totals[key] = totals.get(key, 0.0) + _quantity(value)
    return {k: _format(v) for k, v in sorted(totals.items())}


def desired_podgroup(job: Job, settings: Settings, existing: Obj | None = None,
                     priorities: Mapping[str, int] | None = None,
                     default_priority: int = 0) -> Obj:
    """The job's PodGroup; a volcano queue already set on ``existing`` is kept."""
    policy = job.run_policy.scheduling_policy
    min_member = (policy.min_available if policy and policy.min_available is not None
                  else job.total_replicas)
    resources = (dict(policy.min_resources) if policy and policy.min_resources
                 else min_resources(job, min_member, priorities, default_priority))
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


def held_since(settings: Settings, podgroup: Obj | None) -> datetime | None:
    """Since when the gang scheduler has held the job's pods back: the creation of a
    PodGroup Volcano has not admitted (the pending timeout counts it), else ``None``."""
    if podgroup is None or not podgroup_waiting(settings, podgroup):
        return None
    return c.parse_time((podgroup.get("metadata") or {}).get("creationTimestamp"))
