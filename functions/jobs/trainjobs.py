"""The gc function's TrainJob hygiene: the TTL and the history limit of finished Kubeflow
Trainer v2 TrainJobs (the rules: :mod:`functions.jobs.core.hygiene`), which the upstream
Trainer controller (which runs them) does not offer.

A pass over one TrainJob deletes it once its TTL has passed, else records when the TTL falls
due on it and looks again then; a pass over a finished TrainJob also lists its namespace's
TrainJobs and deletes those past their history limit. Deletes carry the TrainJob's uid as a
precondition and a Normal Event on it says why. TrainJob events reach the gc function where
``config/components/trainjob-hygiene`` is applied; elsewhere the resync brings every TrainJob
round (the due moments are all on the objects, so nothing is lost between passes).

No watch cache: the TrainJob CRD is served only while the Trainer is Managed. What a pass
reads besides the TrainJob (its namespace, the Trainer's defaults) is kept for a few seconds
per process, and a namespace listed after a TrainJob finished is not listed again for it: a
resync's pass over each finished TrainJob of a namespace costs one listing, not one each.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from functions.core.keys import ObjectKey
from functions.jobs.core import hygiene
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.runtime.registry import Context, Controller, Result
from functions.trainer.core.api import INSTANCE_NAME, Trainer

Obj = dict[str, Any]
FIELD_MANAGER = "training-trainjobs-gc"
# How long a namespace's annotations and the Trainer's defaults are taken as read.
CONFIG_SECONDS = 10.0
# A listing that began this long after a TrainJob finished has seen it finished.
LISTING_MARGIN_SECONDS = 2.0


class _Recent:
    """Reads kept for :data:`CONFIG_SECONDS` (a namespace, the Trainer), by key."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._kept: dict[str, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: str, read: Callable[[], Any]) -> Any:
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and self.clock() - kept[0] < CONFIG_SECONDS:
            return kept[1]
        value = read()
        with self._lock:
            if len(self._kept) > 10_000:
                self._kept.clear()
            self._kept[key] = (self.clock(), value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()


RECENT = _Recent()
# namespace -> when (wall clock) its last listing began
_LISTED: dict[str, datetime] = {}
_LISTED_LOCK = threading.Lock()


def _defaults(kube: KubeClient) -> hygiene.Defaults:
    obj = kube.get(resources.TRAINERS, INSTANCE_NAME)
    if obj is None:
        return hygiene.Defaults()
    try:
        spec = Trainer.from_object(obj).spec.finished_train_jobs
    except ValidationError:
        return hygiene.Defaults()
    if spec is None:
        return hygiene.Defaults()
    return hygiene.Defaults(spec.ttl_seconds_after_finished, spec.history_limit)


def _listing_needed(namespace: str, ended: datetime) -> bool:
    with _LISTED_LOCK:
        listed = _LISTED.get(namespace)
    return listed is None or listed < ended + timedelta(seconds=LISTING_MARGIN_SECONDS)


def _listed(namespace: str, moment: datetime) -> None:
    with _LISTED_LOCK:
        if len(_LISTED) > 10_000:
            _LISTED.clear()
        _LISTED[namespace] = moment


def _delete(ctx: Context, deletion: hygiene.Deletion) -> None:
    meta = deletion.trainjob.get("metadata") or {}
    if ctx.kube.delete(resources.TRAINJOBS, str(meta.get("name")), str(meta.get("namespace")),
                       uid=str(meta.get("uid") or "") or None):
        ctx.recorder.record(deletion.trainjob, "Normal", deletion.reason, deletion.message)


def _record_deadline(ctx: Context, trainjob: Obj, annotations: dict[str, str | None]) -> None:
    """Record when the TTL falls due; a refusal (the Trainer's webhook unavailable) costs
    nothing but the record, which the next pass writes again."""
    meta = trainjob.get("metadata") or {}
    try:
        ctx.kube.patch(resources.TRAINJOBS, str(meta.get("name")),
                       {"metadata": {"annotations": annotations}},
                       str(meta.get("namespace")), field_manager=FIELD_MANAGER)
    except ApiError as exc:
        if exc.status < 500 and exc.status not in (403, 404, 409):
            raise
        ctx.log.info("TrainJob %s/%s: its TTL deadline was not recorded: %s",
                     meta.get("namespace"), meta.get("name"), exc)


def hygiene_pass(ctx: Context, key: ObjectKey) -> Result | None:
    trainjob = ctx.kube.get(resources.TRAINJOBS, key.name, key.namespace)
    if trainjob is None:
        return None
    trainjob = {"apiVersion": resources.TRAINJOBS.api_version, "kind": "TrainJob", **trainjob}
    now = ctx.now()
    namespace = RECENT.get(f"namespace/{key.namespace}",
                           lambda: ctx.kube.get(resources.NAMESPACES, key.namespace))
    defaults = RECENT.get("trainer", lambda: _defaults(ctx.kube))
    plan = hygiene.ttl_plan(trainjob, namespace, defaults, now)
    ended = hygiene.finished_at(trainjob)
    if not plan.deletions and ended is not None and _listing_needed(key.namespace, ended):
        started = now
        items = [{"apiVersion": resources.TRAINJOBS.api_version, "kind": "TrainJob", **t}
                 for t in ctx.kube.list(resources.TRAINJOBS, key.namespace)]
        if hygiene.history_applies(namespace, defaults, items):
            plan.deletions += hygiene.history_plan(items, namespace, defaults)
        _listed(key.namespace, started)
    for deletion in plan.deletions:
        _delete(ctx, deletion)
    gone = any(d.trainjob["metadata"].get("uid") == trainjob["metadata"].get("uid")
               for d in plan.deletions)
    if plan.annotations and not gone:
        _record_deadline(ctx, trainjob, plan.annotations)
    if plan.requeue_after is None or gone:
        return None
    return Result(requeue_after=max(plan.requeue_after, 0.5))


CONTROLLERS: list[Controller] = [
    Controller(name="trainjob-hygiene", parent=resources.TRAINJOBS,
               handlers={"gc": hygiene_pass}),
]
