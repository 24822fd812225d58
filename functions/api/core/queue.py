"""Queue order and admission, computed from the job CRs alone.

A queued job is a CR created suspended and labelled ``training.opendatahub.io/queue-state``;
its priority and submission time are annotations. Admission un-suspends it. Since all of this
lives on the CRs, any replica of any function can recompute the queue from a list of jobs:

* order: higher priority first, then earlier submission (FIFO), then namespace and name;
* a job is admitted while the running-job and GPU limits allow, per namespace and
  cluster-wide. A namespace at its own limit does not hold up other namespaces; a job that
  does not fit the cluster-wide limits stops admission there, so nothing behind it jumps ahead
  (strict order). A job that could never fit (more GPUs than a limit) is passed over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

from functions.api.core import kinds
from functions.api.core.policy import PriorityPolicy

LABEL_QUEUE_STATE = "training.opendatahub.io/queue-state"
LABEL_QUEUE = "training.opendatahub.io/queue"
ANNOTATION_PRIORITY = "training.opendatahub.io/priority"
ANNOTATION_SUBMITTED_AT = "training.opendatahub.io/submitted-at"
ANNOTATION_ADMITTED_AT = "training.opendatahub.io/admitted-at"
ANNOTATION_SUBMITTED_BY = "training.opendatahub.io/submitted-by"
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_QUEUE = "default"

Phase = Literal["Queued", "Admitted", "Finished"]
Obj = dict[str, Any]
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def timestamp(moment: datetime) -> str:
    """A UTC time with microseconds; these strings sort in time order."""
    return moment.astimezone(UTC).strftime(TIME_FORMAT)


def normalise_time(value: str | None) -> str:
    """Any RFC 3339 time as :func:`timestamp` writes it (``""`` when unreadable)."""
    if not value:
        return ""
    try:
        return timestamp(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        return ""


@dataclass(frozen=True, slots=True)
class Limits:
    """``None`` means unlimited."""

    max_running: int | None = None
    max_gpus: int | None = None
    max_running_per_namespace: int | None = None
    max_gpus_per_namespace: int | None = None


ENV_LIMITS = {
    "max_running": "TRAINING_QUEUE_MAX_RUNNING",
    "max_gpus": "TRAINING_QUEUE_MAX_GPUS",
    "max_running_per_namespace": "TRAINING_QUEUE_MAX_RUNNING_PER_NAMESPACE",
    "max_gpus_per_namespace": "TRAINING_QUEUE_MAX_GPUS_PER_NAMESPACE",
}


def limits_from_env(environ: Mapping[str, str]) -> Limits:
    """Limits from ``TRAINING_QUEUE_MAX_*``; unset, empty or negative means unlimited."""
    values: dict[str, int | None] = {}
    for field_name, variable in ENV_LIMITS.items():
        raw = environ.get(variable, "").strip()
        try:
            number = int(raw) if raw else -1
        except ValueError as exc:
            raise ValueError(f"{variable} must be an integer, not {raw!r}") from exc
        values[field_name] = number if number >= 0 else None
    return Limits(**values)


@dataclass(frozen=True, slots=True)
class Entry:
    """One queue-managed job as the queue sees it."""

    kind: str
    namespace: str
    name: str
    priority: int
    submitted_at: str
    gpus: int
    phase: Phase
    labelled: str  # the queue-state label as stored
    resource_version: str = ""

    @property
    def ident(self) -> tuple[str, str, str]:
        return (self.namespace, self.kind, self.name)


def order_key(entry: Entry) -> tuple[int, str, str, str]:
    return (-entry.priority, entry.submitted_at, entry.namespace, entry.name)


def finished(cr: Obj) -> bool:
    return kinds.finished(cr)


def suspended(cr: Obj) -> bool:
    return kinds.suspended(cr)


def priority_of(cr: Obj) -> int:
    annotations = (cr.get("metadata") or {}).get("annotations") or {}
    try:
        return int(annotations.get(ANNOTATION_PRIORITY, "0"))
    except ValueError:
        return 0


def _gpus(resources: Obj) -> int:
    """The GPU limit (or request) of one container's or node's ``resources``."""
    amount = ((resources.get("limits") or {}).get(GPU_RESOURCE)
              or (resources.get("requests") or {}).get(GPU_RESOURCE) or 0)
    try:
        return int(amount)
    except (TypeError, ValueError):
        return 0


def requested_gpus(cr: Obj) -> int:
    """GPUs of every replica of the job: replicas x container GPU limits (or requests); for a
    TrainJob, ``trainer.numNodes`` (1 when unset) x ``trainer.resourcesPerNode``."""
    spec = cr.get("spec") or {}
    trainer = spec.get("trainer")
    total = 0
    if isinstance(trainer, dict):
        nodes = trainer.get("numNodes", 1)
        per_node = trainer.get("resourcesPerNode")
        if isinstance(nodes, int) and nodes > 0 and isinstance(per_node, dict):
            total += nodes * _gpus(per_node)
    for key, replica_specs in spec.items():
        if not key.endswith("ReplicaSpecs") or not isinstance(replica_specs, dict):
            continue
        for replica_type, replica in replica_specs.items():
            if not isinstance(replica, dict):
                continue
            default = 0 if (cr.get("kind") == "MPIJob" and replica_type == "Worker") else 1
            replicas = replica.get("replicas", default)
            template_spec = (replica.get("template") or {}).get("spec") or {}
            per_pod = 0
            for container in template_spec.get("containers") or []:
                per_pod += _gpus(container.get("resources") or {})
            if isinstance(replicas, int) and replicas > 0:
                total += replicas * per_pod
    return total


def entry_of(cr: Obj) -> Entry | None:
    """The queue's view of a CR, or ``None`` when this queue does not manage it."""
    meta = cr.get("metadata") or {}
    labels = meta.get("labels") or {}
    labelled = labels.get(LABEL_QUEUE_STATE)
    if labelled is None:
        return None
    annotations = meta.get("annotations") or {}
    submitted = (normalise_time(annotations.get(ANNOTATION_SUBMITTED_AT))
                 or normalise_time(meta.get("creationTimestamp")))
    phase: Phase = ("Finished" if finished(cr) else "Queued" if suspended(cr) else "Admitted")
    return Entry(kind=str(cr.get("kind")), namespace=str(meta.get("namespace") or ""),
                 name=str(meta.get("name") or ""), priority=priority_of(cr),
                 submitted_at=submitted, gpus=requested_gpus(cr), phase=phase,
                 labelled=str(labelled), resource_version=str(meta.get("resourceVersion") or ""))


def capped(entries: Iterable[Entry], policy: PriorityPolicy) -> list[Entry]:
    """The entries with each priority capped at its namespace's maximum under ``policy``
    (what a CR asks for directly, past the API, counts for no more than the API allows)."""
    return [replace(e, priority=policy.effective(e.namespace, e.priority)) for e in entries]


def _fits(limit: int | None, used: int, extra: int) -> bool:
    return limit is None or used + extra <= limit


def _never_fits(entry: Entry, limits: Limits) -> bool:
    return any(limit is not None and entry.gpus > limit
               for limit in (limits.max_gpus, limits.max_gpus_per_namespace)) or any(
        limit == 0 for limit in (limits.max_running, limits.max_running_per_namespace))


def admissions(entries: Iterable[Entry], limits: Limits) -> list[Entry]:
    """The queued entries to admit now, in admission order."""
    entries = list(entries)
    admitted = [e for e in entries if e.phase == "Admitted"]
    running = len(admitted)
    gpus = sum(e.gpus for e in admitted)
    ns_running: Counter[str] = Counter(e.namespace for e in admitted)
    ns_gpus: Counter[str] = Counter()
    for e in admitted:
        ns_gpus[e.namespace] += e.gpus
    chosen: list[Entry] = []
    for entry in sorted((e for e in entries if e.phase == "Queued"), key=order_key):
        if _never_fits(entry, limits):
            continue
        ns = entry.namespace
        if not (_fits(limits.max_running_per_namespace, ns_running[ns], 1)
                and _fits(limits.max_gpus_per_namespace, ns_gpus[ns], entry.gpus)):
            continue
        if not (_fits(limits.max_running, running, 1)
                and _fits(limits.max_gpus, gpus, entry.gpus)):
            break
        chosen.append(entry)
        running += 1
        gpus += entry.gpus
        ns_running[ns] += 1
        ns_gpus[ns] += entry.gpus
    return chosen


def positions(entries: Iterable[Entry]) -> dict[tuple[str, str, str], int]:
    """1-based place of each queued entry among the queued entries of its namespace."""
    seen: Counter[str] = Counter()
    out: dict[tuple[str, str, str], int] = {}
    for entry in sorted((e for e in entries if e.phase == "Queued"), key=order_key):
        seen[entry.namespace] += 1
        out[entry.ident] = seen[entry.namespace]
    return out


def stale_labels(entries: Iterable[Entry]) -> list[Entry]:
    """Entries whose queue-state label no longer says their phase (other than admission)."""
    return [e for e in entries if e.labelled != e.phase and e.phase != "Queued"]


def admission_patch(entry: Entry, now: datetime) -> Obj:
    """The merge patch that admits ``entry`` (guarded by its resourceVersion)."""
    meta: Obj = {"labels": {LABEL_QUEUE_STATE: "Admitted"},
                 "annotations": {ANNOTATION_ADMITTED_AT: timestamp(now)}}
    if entry.resource_version:
        meta["resourceVersion"] = entry.resource_version
    return {"metadata": meta, "spec": kinds.suspend_patch(entry.kind, False)}


def relabel_patch(entry: Entry) -> Obj:
    meta: Obj = {"labels": {LABEL_QUEUE_STATE: entry.phase}}
    if entry.resource_version:
        meta["resourceVersion"] = entry.resource_version
    return {"metadata": meta}
