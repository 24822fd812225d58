"""The training-job controllers step aside while another controller of the same jobs is active.

The platform's own training operator (its Deployment, or the DataScienceCluster's
``trainingoperator`` component ``Managed``), or ``kubeflow.org`` job CRDs installed by another
product, mean another controller reconciles the same PyTorchJobs, TFJobs, MXJobs and MPIJobs
(:data:`~functions.platform.core.coexistence.Scope.JOBS`). Two controllers of one job create
its pods twice and overwrite each other's status, so while such a conflict exists the
reconcile, status and gc handlers do nothing to a job or its children: no pod, Service or
status write, no delete.

reconcile records one Warning Event (reason ``ConflictingController``) on each job it leaves
alone, naming the other controller and what to change; it is recorded once per job and
message in a process, so a burst of deliveries writes one Event, not one per delivery. status
and gc step aside without an Event of their own. No condition is written on the job: its
status belongs to the controller that acts on it, and our write would be the very fight this
avoids.

The conflicts come from a per-process memo (:class:`~functions.platform.memo.ConflictMemo`)
read at most every ``TRAINING_COEXISTENCE_TTL_SECONDS`` seconds (default 30), so a handler
pays no API request for the check in a steady state.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from functions.jobs.core.model import Obj
from functions.kube.client import KubeClient
from functions.platform import coexistence
from functions.platform.core.coexistence import JOB_CRDS, Platform, Scope, summary
from functions.platform.memo import ConflictMemo
from functions.runtime.recorder import WARNING
from functions.runtime.registry import Context

CONFLICT_REASON = "ConflictingController"
TTL_ENV = "TRAINING_COEXISTENCE_TTL_SECONDS"
DEFAULT_TTL_SECONDS = 30.0


def ttl_from_env(environ: dict[str, str] | None = None) -> float:
    env = os.environ if environ is None else environ
    return float(env.get(TTL_ENV) or DEFAULT_TTL_SECONDS)


def observe(kube: KubeClient) -> Platform:
    """What conflicts with the job controllers: the training operator, the
    DataScienceClusters and the job CRDs (not the Trainer's trainer-operator)."""
    return coexistence.observe(kube, trainer=False, jobs=True, crd_names=JOB_CRDS)


class Warned:
    """Which (job uid, message) pairs this process has recorded an Event for (bounded)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def first(self, uid: str, message: str) -> bool:
        """True the first time a pair is seen (since it was forgotten)."""
        with self._lock:
            if (uid, message) in self._seen:
                return False
            self._seen[(uid, message)] = None
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)
            return True

    def clear(self) -> None:
        if self._seen:
            with self._lock:
                self._seen.clear()


CONFLICTS = ConflictMemo(Scope.JOBS, observe, ttl_from_env())
WARNED = Warned()


def conflict(ctx: Context) -> str | None:
    """Which other controller is active and what to change, or ``None`` when none is."""
    found = CONFLICTS.conflicts(ctx.kube)
    if not found:
        WARNED.clear()  # a conflict that comes back is reported again
        return None
    return summary(found)


def warn(ctx: Context, job_obj: Obj, conflict: str) -> None:
    """The Warning Event on a job left alone, once per job and message in this process."""
    meta = job_obj.get("metadata") or {}
    message = f"another controller manages training jobs; nothing was changed: {conflict}"
    if WARNED.first(str(meta.get("uid") or ""), message):
        ctx.recorder.record(job_obj, WARNING, CONFLICT_REASON, message)
        ctx.log.warning("%s %s/%s: %s", job_obj.get("kind"), meta.get("namespace"),
                        meta.get("name"), message)
