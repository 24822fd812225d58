"""Translation both ways: a request into a job CR, a job CR into a :class:`JobView`.

The CR is the only record of a job. Building it puts everything the queue needs on it
(suspended, queue labels, priority and submission-time annotations); reading it back derives
the state, replica counts and queue fields from spec, labels, annotations and status alone.
Where the kubeflow.org kinds and the Trainer's TrainJob differ in shape (replicas, log pods),
the :data:`SHAPES` table says how each reads back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from functions.api.core import kinds, queue, trainjobs
from functions.api.core.models import (
    FRAMEWORKS,
    NAME_BY_KIND,
    Admission,
    AnyJobRequest,
    ConditionView,
    EventView,
    JobRequest,
    JobView,
    QueueView,
    ReplicaCounts,
    State,
    TrainJobRequest,
)
from functions.jobs.core.frameworks import (
    BY_KIND,
    LABEL_JOB_NAME,
    LABEL_JOB_ROLE,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
)

Obj = dict[str, Any]
SUBMITTED_BY_LIMIT = 253


def replica_layout(request: JobRequest) -> list[tuple[str, int, bool]]:
    """(replica type, replicas, gets GPUs and the command) per framework, for ``workers``."""
    n = request.workers
    if request.framework in ("pytorch", "xgboost"):
        layout = [("Master", 1, True)]
        return layout + ([("Worker", n - 1, True)] if n > 1 else [])
    if request.framework in ("tensorflow", "paddle", "jax"):
        return [("Worker", n, True)]
    if request.framework == "mxnet":
        return [("Scheduler", 1, False), ("Server", 1, False), ("Worker", n, True)]
    return [("Launcher", 1, False), ("Worker", n, True)]


def _container(request: JobRequest, replica_type: str, trains: bool) -> Obj:
    fw = FRAMEWORKS[request.framework]
    container: Obj = {"name": fw.default_container, "image": request.image}
    # MPI workers run the image as it is (its sshd); the launcher runs the command.
    runs_command = not (request.framework == "mpi" and replica_type == "Worker")
    if runs_command and request.command:
        container["command"] = list(request.command)
    if runs_command and request.args:
        container["args"] = list(request.args)
    if request.env:
        container["env"] = [{"name": k, "value": v} for k, v in sorted(request.env.items())]
    resources = trainjobs.container_resources(request.resources, gpus=trains)
    if resources:
        container["resources"] = resources
    return container


def queue_metadata(request: AnyJobRequest, now: datetime, user: str, kueue: bool) -> Obj:
    """Labels and annotations of a new job: for this queue or for Kueue, priority, who and
    when."""
    labels = dict(request.labels)
    if kueue and request.queue:
        labels[queue.LABEL_KUEUE_QUEUE] = request.queue
    else:
        labels[queue.LABEL_QUEUE_STATE] = "Queued"
        labels[queue.LABEL_QUEUE] = request.queue or queue.DEFAULT_QUEUE
    annotations = {queue.ANNOTATION_PRIORITY: str(request.priority),
                   queue.ANNOTATION_SUBMITTED_AT: queue.timestamp(now),
                   queue.ANNOTATION_SUBMITTED_BY: user[:SUBMITTED_BY_LIMIT]}
    return {"labels": labels, "annotations": annotations}


def build_job(request: AnyJobRequest, namespace: str, now: datetime, user: str,
              kueue: bool) -> Obj:
    """The CR for ``request``: created suspended, labelled for this queue or for Kueue."""
    metadata = queue_metadata(request, now, user, kueue)
    if isinstance(request, TrainJobRequest):
        return trainjobs.build(request, namespace, metadata)
    fw = FRAMEWORKS[request.framework]
    specs: Obj = {}
    for replica_type, replicas, trains in replica_layout(request):
        template: Obj = {"spec": {"containers": [_container(request, replica_type, trains)]}}
        if request.labels:
            template["metadata"] = {"labels": dict(request.labels)}
        specs[replica_type] = {"replicas": replicas, "template": template}
    spec: Obj = {"runPolicy": {"suspend": True}, fw.specs_field: specs}
    if request.framework == "mpi":
        spec["slotsPerWorker"] = 1
    if request.framework == "mxnet":
        spec["jobMode"] = "MXTrain"
    return {"apiVersion": fw.api_version, "kind": fw.kind,
            "metadata": {"name": request.name, "namespace": namespace, **metadata},
            "spec": spec}


def state_of(cr: Obj) -> State:
    """One word for where the job is, from its conditions (a TrainJob's ``Complete`` is
    ``Succeeded``; it runs while a child Job is active) and its ``suspend``."""
    if kinds.succeeded(cr):
        return "Succeeded"
    if kinds.failed(cr):
        return "Failed"
    if kinds.suspended(cr):
        labels = (cr.get("metadata") or {}).get("labels") or {}
        waiting = (labels.get(queue.LABEL_QUEUE_STATE) is not None
                   or labels.get(queue.LABEL_KUEUE_QUEUE) is not None)
        return "Queued" if waiting else "Suspended"
    if kinds.condition_true(cr, "Restarting"):
        return "Restarting"
    if kinds.condition_true(cr, "Running") or trainjobs.running(cr):
        return "Running"
    return "Pending"


def _v1_replicas(cr: Obj) -> dict[str, ReplicaCounts]:
    fw = BY_KIND.get(str(cr.get("kind")))
    spec = cr.get("spec") or {}
    specs = spec.get(fw.specs_field) if fw else None
    statuses = (cr.get("status") or {}).get("replicaStatuses") or {}
    out: dict[str, ReplicaCounts] = {}
    for replica_type, replica in (specs or {}).items():
        if not isinstance(replica, dict):
            continue
        default = fw.default_replicas_for(replica_type) if fw else 1
        desired = replica.get("replicas", default)
        counts = statuses.get(replica_type) or {}
        out[replica_type] = ReplicaCounts(
            desired=desired if isinstance(desired, int) else 0,
            active=int(counts.get("active") or 0), succeeded=int(counts.get("succeeded") or 0),
            failed=int(counts.get("failed") or 0))
    return out


def _queue_view(cr: Obj, position: int | None) -> QueueView:
    meta = cr.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    admission: Admission
    if labels.get(queue.LABEL_QUEUE_STATE) is not None:
        admission = "queue"
        name = labels.get(queue.LABEL_QUEUE)
    elif labels.get(queue.LABEL_KUEUE_QUEUE) is not None:
        admission = "kueue"
        name = labels.get(queue.LABEL_KUEUE_QUEUE)
    else:
        admission = "none"
        name = None
    return QueueView(name=name, priority=queue.priority_of(cr), position=position,
                     submitted_at=annotations.get(queue.ANNOTATION_SUBMITTED_AT),
                     admitted_at=annotations.get(queue.ANNOTATION_ADMITTED_AT),
                     admission=admission)


def job_view(cr: Obj, position: int | None = None) -> JobView:
    """What the API answers for one job CR."""
    meta = cr.get("metadata") or {}
    status = cr.get("status") or {}
    kind = str(cr.get("kind"))
    state = state_of(cr)
    return JobView(
        name=str(meta.get("name", "")), namespace=str(meta.get("namespace", "")),
        framework=NAME_BY_KIND.get(kind, kind.lower()), kind=kind, state=state,
        conditions=[ConditionView(type=str(c.get("type", "")), status=str(c.get("status", "")),
                                  reason=str(c.get("reason") or ""),
                                  message=str(c.get("message") or ""),
                                  last_transition_time=c.get("lastTransitionTime"))
                    for c in status.get("conditions") or []],
        replicas=_shape(cr).replicas(cr), created_at=meta.get("creationTimestamp"),
        start_time=status.get("startTime"), completion_time=status.get("completionTime"),
        queue=_queue_view(cr, position if state == "Queued" else None),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()})


def position_in(cr: Obj, positions: Mapping[tuple[str, str, str], int]) -> int | None:
    """The job's place in ``positions`` (:func:`functions.api.core.queue.positions`)."""
    meta = cr.get("metadata") or {}
    return positions.get((str(meta.get("namespace")), str(cr.get("kind")),
                          str(meta.get("name"))))


def event_views(events: Iterable[Obj], uid: str | None) -> list[EventView]:
    """The Events of the job with ``uid``, oldest first (an Event naming no uid counts)."""
    mine = [e for e in events if (e.get("involvedObject") or {}).get("uid") in (uid, None, "")]
    mine.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return [event_view(e) for e in mine]


def event_view(event: Obj) -> EventView:
    return EventView(type=str(event.get("type") or ""), reason=str(event.get("reason") or ""),
                     message=str(event.get("message") or ""),
                     count=int(event.get("count") or 1),
                     first_timestamp=event.get("firstTimestamp") or event.get("eventTime"),
                     last_timestamp=event.get("lastTimestamp") or event.get("eventTime"))


def _v1_primary_replica(cr: Obj) -> str:
    """Master, chief, launcher or worker: the replica whose logs tell the job's story."""
    fw = BY_KIND[str(cr.get("kind"))]
    specs = (cr.get("spec") or {}).get(fw.specs_field) or {}
    present = {t.lower() for t in specs}
    for candidate in ("master", "chief", "launcher", "worker"):
        if candidate in present:
            return candidate
    return next(iter(sorted(present)), "worker")


def _v1_log_pod_selector(cr: Obj, replica: str, index: int) -> str:
    meta = cr.get("metadata") or {}
    selector = f"{LABEL_JOB_NAME}={meta.get('name')}"
    if cr.get("kind") == "MPIJob" and replica == "launcher":
        return f"{selector},{LABEL_JOB_ROLE}=launcher"
    return f"{selector},{LABEL_REPLICA_TYPE}={replica},{LABEL_REPLICA_INDEX}={index}"


@dataclass(frozen=True, slots=True)
class Shape:
    """How the CR of one API reads back: its replicas, and where the logs of a replica are."""

    replicas: Callable[[Obj], dict[str, ReplicaCounts]]
    primary_replica: Callable[[Obj], str]
    log_pod_selector: Callable[[Obj, str, int], str]
    container: Callable[[Obj], str]  # the container whose log is wanted


V1_SHAPE = Shape(_v1_replicas, _v1_primary_replica, _v1_log_pod_selector,
                 lambda cr: BY_KIND[str(cr.get("kind"))].default_container)
SHAPES: dict[str, Shape] = {
    kinds.TRAINJOB_KIND: Shape(trainjobs.child_jobs, lambda _: trainjobs.TRAINER_REPLICA,
                               trainjobs.log_pod_selector, lambda _: trainjobs.TRAINER_REPLICA),
}


def _shape(cr: Obj) -> Shape:
    return SHAPES.get(str(cr.get("kind")), V1_SHAPE)


def primary_replica(cr: Obj) -> str:
    """The replica whose logs tell the job's story: master, chief, launcher or worker 0 (a
    TrainJob's trainer nodes)."""
    return _shape(cr).primary_replica(cr)


def log_pod_selector(cr: Obj, replica: str, index: int) -> str:
    """The label selector of the pod(s) holding the logs of ``replica`` ``index``."""
    return _shape(cr).log_pod_selector(cr, replica, index)


def log_container(cr: Obj, pod: Obj) -> str:
    """The job's own container when the pod has it, else its first container."""
    wanted = _shape(cr).container(cr)
    names = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
    if wanted in names or not names:
        return wanted
    return names[0]


def newest(pods: list[Obj]) -> Obj | None:
    """The most recently created pod (a restarted launcher leaves older ones behind)."""
    if not pods:
        return None
    return max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")))
