"""What the job handlers write: a plan carried out (deletes, counted restarts, applies,
creates) and the Kubernetes Events that go with it."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from functions.core.errors import TemporaryError
from functions.jobs import metrics
from functions.jobs.core.frameworks import Framework
from functions.jobs.core.model import Obj
from functions.jobs.core.objects import Notice
from functions.jobs.core.planning import (
    RESTARTED_PODS_ANNOTATION,
    RESTARTS_ANNOTATION,
    Plan,
    RestartBatch,
)
from functions.jobs.core.pods import name_of, uid_of
from functions.jobs.core.restarts import RESTARTS_BY_TYPE, format_by_type, recorded_by_type
from functions.jobs.reads import RESOURCES
from functions.jobs.taken import refuse_if_foreign
from functions.kube.client import ApiError
from functions.runtime.registry import Context

RECONCILE_MANAGER = "training-jobs-reconcile"
WRITE_THREADS = 8

_pool_guard = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def _describe(obj: Obj) -> str:
    return str(obj.get("kind", "object")).lower()


def record(ctx: Context, job_obj: Obj, notices: list[Notice]) -> None:
    for notice in notices:
        ctx.recorder.record(job_obj, notice.type, notice.reason, notice.message)


def _create(ctx: Context, job_obj: Obj, obj: Obj) -> None:
    kind = str(obj.get("kind"))
    try:
        ctx.kube.create(obj, field_manager=RECONCILE_MANAGER)
    except ApiError as exc:
        if exc.status == 409:
            refuse_if_foreign(ctx, job_obj, obj)
            return
        metrics.not_created(obj)
        ctx.recorder.record(job_obj, "Warning", f"FailedCreate{kind}",
                            f"Error creating: {exc.message}")
        ctx.log.warning("cannot create %s %s: %s", kind, name_of(obj), exc)
        return
    metrics.created(obj)
    ctx.recorder.record(job_obj, "Normal", f"SuccessfulCreate{kind}",
                        f"Created {_describe(obj)}: {name_of(obj)}")


def _delete(ctx: Context, job_obj: Obj, obj: Obj) -> bool:
    kind = str(obj.get("kind"))
    res = ctx.kube.resource_for(str(obj.get("apiVersion")), kind)
    namespace = (obj.get("metadata") or {}).get("namespace")
    try:
        gone = ctx.kube.delete(res, name_of(obj), namespace, uid=uid_of(obj) or None)
    except ApiError as exc:
        ctx.recorder.record(job_obj, "Warning", f"FailedDelete{kind}",
                            f"Error deleting: {exc.message}")
        return False
    if gone:
        metrics.deleted(obj)
        ctx.recorder.record(job_obj, "Normal", f"SuccessfulDelete{kind}",
                            f"Deleted {_describe(obj)}: {name_of(obj)}")
    return gone


def _writers() -> ThreadPoolExecutor:
    """The process's writer threads (made after any fork), shared by every pass: a job's
    creates go out together without each pass starting and joining threads of its own. The
    actions never wait on the pool themselves, so passes sharing it cannot deadlock."""
    global _pool
    with _pool_guard:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(WRITE_THREADS,
                                                     thread_name_prefix="job-writes"))
        return _pool[1]


def _parallel(items: list[Obj], action: Callable[[Obj], Any]) -> list[Any]:
    if len(items) <= 1:
        return [action(item) for item in items]
    return list(_writers().map(action, items))


def _restart_patch(annotations: dict[str, Any], uids: list[str],
                   batch: RestartBatch | None) -> dict[str, str] | None:
    """The annotations that record the restart of the pods ``uids`` (``None``: every one of
    them is counted already). Per pod, each new pod counts one; a whole-job restart counts
    once, for each replica type that caused it."""
    counted = set(str(annotations.get(RESTARTED_PODS_ANNOTATION, "")).split(","))
    new = [uid for uid in uids if uid not in counted]
    if not new:
        return None
    try:
        total = int(annotations.get(RESTARTS_ANNOTATION, "0"))
    except ValueError:
        total = 0
    by_type = recorded_by_type(annotations)
    whole = batch.whole if batch is not None else None
    if whole is not None:
        total += 1
        for rtype in whole.types:
            by_type[rtype] = by_type.get(rtype, 0) + 1
    else:
        total += len(new)
        for uid in new:
            counted_type = batch.types.get(uid) if batch is not None else None
            if counted_type is not None:
                by_type[counted_type] = by_type.get(counted_type, 0) + 1
    listed = sorted({*uids, *(batch.also if batch is not None else ())})
    patch = {RESTARTS_ANNOTATION: str(total), RESTARTED_PODS_ANNOTATION: ",".join(listed)}
    if by_type:
        patch[RESTARTS_BY_TYPE] = format_by_type(by_type)
    return patch


def _record_restarts(ctx: Context, fw: Framework, job_obj: Obj, pods: list[Obj],
                     batch: RestartBatch | None = None) -> None:
    """Count the restart of ``pods`` before they are deleted, exactly once per pod (or once
    for the whole job, :mod:`functions.jobs.core.restarts`).

    The job's annotations hold the counters and the uids of the batch last counted, written in
    one patch with the job's ``resourceVersion`` as precondition. A retried pass, a crash
    between this and the deletes, or another replica doing the same therefore never counts a
    pod twice; reconcile decides restarts on state read fresh from the API server, so a pod
    deleted long ago cannot come back from a stale read to be counted again. A whole-job
    restart is reported by an Event once it is counted.
    """
    meta = job_obj["metadata"]
    uids = sorted(uid_of(p) for p in pods)
    current = job_obj
    for _ in range(3):
        annotations = (current.get("metadata") or {}).get("annotations") or {}
        values = _restart_patch(annotations, uids, batch)
        if values is None:
            return
        patch = {"metadata": {"annotations": values,
                              "resourceVersion": current["metadata"]["resourceVersion"]}}
        try:
            ctx.kube.patch(RESOURCES[fw.kind], meta["name"], patch, meta["namespace"],
                           field_manager=RECONCILE_MANAGER)
        except ApiError as exc:
            if exc.status != 409:
                raise
        else:
            if batch is not None and batch.whole is not None:
                ctx.recorder.record(job_obj, "Warning", WHOLE_RESTART_REASON,
                                    _whole_restart_message(current, values, batch, len(pods)))
            return
        fresh = ctx.kube.get(RESOURCES[fw.kind], meta["name"], meta["namespace"])
        if fresh is None:
            raise TemporaryError(f"{meta['name']} is gone")
        current = fresh
    raise TemporaryError(f"could not record restarts of {meta['name']}: conflicts")


WHOLE_RESTART_REASON = "WholeJobRestart"


def _whole_restart_message(job_obj: Obj, values: dict[str, str], batch: RestartBatch,
                           pods: int) -> str:
    assert batch.whole is not None
    limit = ((job_obj.get("spec") or {}).get("runPolicy") or {}).get("backoffLimit")
    of = f" (backoffLimit {limit})" if limit is not None else ""
    return (f"Restarting every pod of the job ({pods} deleted, to be created again): "
            f"{batch.whole.describe()}; restart {values[RESTARTS_ANNOTATION]}{of}")[:1024]


def _suspend(ctx: Context, fw: Framework, job_obj: Obj, plan: Plan) -> None:
    """Hand the job back to its queue (its pending timeout): ``spec.runPolicy.suspend``, on
    condition that the job is still as read (fresh, :func:`functions.jobs.controller
    .reconcile`), then the Event. A conflict is retried on fresh state."""
    assert plan.suspend is not None
    meta = job_obj["metadata"]
    patch = {"metadata": {"resourceVersion": meta["resourceVersion"]},
             "spec": {"runPolicy": {"suspend": True}}}
    try:
        ctx.kube.patch(RESOURCES[fw.kind], meta["name"], patch, meta["namespace"],
                       field_manager=RECONCILE_MANAGER)
    except ApiError as exc:
        if exc.status in (404, 409):
            raise TemporaryError(f"{meta['name']} changed while being suspended") from exc
        raise
    record(ctx, job_obj, [plan.suspend])


def execute(ctx: Context, fw: Framework, job_obj: Obj, plan: Plan, manager: str) -> None:
    """Carry out a plan: a suspension, deletes, restarts (counted first), applies, creates,
    the job's annotations; then its Events."""
    if plan.suspend is not None:
        _suspend(ctx, fw, job_obj, plan)
    _parallel(plan.deletes, lambda obj: _delete(ctx, job_obj, obj))
    if plan.restarts:
        _record_restarts(ctx, fw, job_obj, plan.restarts, plan.restart_batch)
        _parallel(plan.restarts, lambda obj: _delete(ctx, job_obj, obj))
    for obj in plan.applies:
        ctx.kube.apply(obj, manager)
    _parallel(plan.creates, lambda obj: _create(ctx, job_obj, obj))
    if plan.annotations:
        meta = job_obj["metadata"]
        ctx.kube.patch(RESOURCES[fw.kind], meta["name"],
                       {"metadata": {"annotations": plan.annotations}}, meta["namespace"],
                       field_manager=manager)
    record(ctx, job_obj, plan.notices)
