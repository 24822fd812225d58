"""The queue handler: admits suspended, queue-labelled jobs in priority then FIFO order.

It runs in the ``reconcile`` function next to the job controllers and, like them, is
level-triggered: an event about any training job (or a resync) is a hint that capacity or the
queue may have changed. The handler then lists every queue-managed job cluster-wide, computes
the admissions with :func:`functions.api.core.queue.admissions` (priorities capped by the
admin's policy, :mod:`functions.api.policy`) and un-suspends those jobs
(guarded by their resourceVersion). The queue's whole state is on the CRs, so a restarted or
different replica carries on where another stopped.

Passes are serialised in the process and coalesced: a pass that started after an event arrived
already saw it, and passes are at least ``TRAINING_QUEUE_MIN_INTERVAL_SECONDS`` apart (a hint
arriving sooner asks to be run again later), so a resync of many jobs costs a few passes, not
one per job. Several replicas of the reconcile function could each admit up to the limit at the
same moment, so a pass runs only while its process holds the ``odh-training-queue`` Lease
(:mod:`functions.runtime.lease`); a replica that finds it taken, or cannot take it at all,
looks again shortly. The Lease is renewed while the pass runs, and the pass checks that it is
still valid before every admission, so a pass slower than the lease duration stops admitting
rather than overlapping with another replica's.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from functions.api.core import queue
from functions.api.policy import PolicySource
from functions.core.keys import ObjectKey
from functions.jobs.controller import RESOURCES, finished
from functions.jobs.core.frameworks import FRAMEWORKS
from functions.kube import resources
from functions.kube.cache import CacheSpec
from functions.kube.client import ApiError
from functions.kube.resources import Resource
from functions.runtime import lease
from functions.runtime.registry import Context, Controller, Result

FIELD_MANAGER = "training-queue"
LEASE = "odh-training-queue"
LEASE_SECONDS = 30
LEASE_TAKEN_RETRY_SECONDS = 2.0
SELECTOR = f"{queue.LABEL_QUEUE_STATE} in (Queued,Admitted)"
# Every kind the queue admits: the job controllers' kinds and the Trainer's TrainJob (whose
# upstream controller runs it once admitted).
QUEUED: dict[str, Resource] = {**RESOURCES, resources.TRAINJOBS.kind: resources.TRAINJOBS}


class _Passes:
    """When the last pass started, process-wide."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_started = float("-inf")
        self.min_interval = float(os.environ.get("TRAINING_QUEUE_MIN_INTERVAL_SECONDS", "0.5"))


PASSES = _Passes()
POLICY = PolicySource()


def _relevant(ctx: Context, key: ObjectKey) -> bool:
    """Whether an event about ``key`` may change the queue (a job gone counts). Read from
    the reader (the job controllers' watch cache): every job event asks."""
    cr = ctx.read.get(QUEUED[key.kind], key.name, key.namespace)
    if cr is None:
        return True
    if "kind" not in cr:
        cr = {**cr, "kind": key.kind}
    entry = queue.entry_of(cr)
    if entry is None:
        return False
    return entry.phase == "Queued" or entry.labelled != entry.phase


def admit(ctx: Context, key: ObjectKey) -> Result | None:
    started = time.monotonic()
    if not _relevant(ctx, key):
        return None
    with PASSES.lock:
        if PASSES.last_started >= started:
            return None  # a pass that began after this hint has seen its cause
        wait = PASSES.last_started + PASSES.min_interval - time.monotonic()
        if wait > 0:
            return Result(requeue_after=wait)
        PASSES.last_started = time.monotonic()
        with lease.held(ctx.kube, LEASE, duration_seconds=LEASE_SECONDS) as held:
            if not held:
                # another replica is admitting right now (or the Lease cannot be had)
                return Result(requeue_after=LEASE_TAKEN_RETRY_SECONDS)
            return run_pass(ctx, still_held=held.valid)


def list_entries(ctx: Context) -> list[queue.Entry]:
    entries: list[queue.Entry] = []
    for res in QUEUED.values():
        try:
            items = ctx.kube.list(res, label_selector=SELECTOR)
        except ApiError as exc:
            if exc.status == 404:  # this kind's CRD is not installed
                continue
            raise
        entries.extend(e for e in (queue.entry_of(cr) for cr in items) if e is not None)
    return entries


def run_pass(ctx: Context, limits: queue.Limits | None = None,
             still_held: Callable[[], bool] = lambda: True) -> Result | None:
    """One look at the whole queue: fix stale labels, admit what fits (each admission only
    while ``still_held()``: the Lease that makes this pass the only one)."""
    limits = limits or queue.limits_from_env(os.environ)
    entries = queue.capped(list_entries(ctx), POLICY.get(ctx.kube))
    for entry in queue.stale_labels(entries):
        _patch(ctx, entry, queue.relabel_patch(entry))
    for entry in queue.admissions(entries, limits):
        if not still_held():
            ctx.log.warning("training queue: the Lease expired during a pass; admitting the "
                            "rest later")
            return Result(requeue_after=1.0)
        if not _patch(ctx, entry, queue.admission_patch(entry, ctx.now())):
            return Result(requeue_after=1.0)  # it changed under us: look again soon
        job = {"apiVersion": QUEUED[entry.kind].api_version, "kind": entry.kind,
               "metadata": {"name": entry.name, "namespace": entry.namespace}}
        ctx.recorder.record(job, "Normal", "Admitted",
                            f"Admitted by the training queue (priority {entry.priority})")
    return None


def _patch(ctx: Context, entry: queue.Entry, patch: queue.Obj) -> bool:
    """Apply a guarded merge patch; ``False`` when the job changed or went away meanwhile."""
    try:
        ctx.kube.patch(QUEUED[entry.kind], entry.name, patch, entry.namespace,
                       field_manager=FIELD_MANAGER)
    except ApiError as exc:
        if exc.status in (404, 409):
            return False
        raise
    return True


CONTROLLERS: list[Controller] = [
    Controller(name=f"training-queue-{fw.plural}", parent=RESOURCES[fw.kind],
               handlers={"reconcile": admit},
               cached={"reconcile": (CacheSpec(RESOURCES[fw.kind]),)},
               # capacity frees when a job ends; other status changes admit nothing
               status_inputs={"reconcile": finished})
    for fw in FRAMEWORKS
] + [
    # No watch cache: the TrainJob CRD exists only once the Trainer is installed, and the
    # few TrainJob reads go to the API server. Their events come from a source of their own,
    # config/components/trainjobs, applied where the Trainer is Managed (an adapter whose API
    # is not served exits at start); without it a queued TrainJob is admitted by the resync
    # tick or by a pass another job's event starts.
    Controller(name="training-queue-trainjobs", parent=resources.TRAINJOBS,
               handlers={"reconcile": admit}),
]
