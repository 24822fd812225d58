"""Handlers of the training-job controllers: read, call the pure plan, write what differs.

One :class:`Controller` per kind (PyTorchJob, TFJob, MXJob, MPIJob), each with three handlers
that may run concurrently on the same job without stepping on each other:

* ``status`` derives the status from the persisted status and the observed children and, only
  when it differs, writes it with Server-Side Apply on the ``status`` subresource under its own
  field manager (``resourceVersion`` as a precondition, so a concurrent write makes it retry on
  fresh data instead of overwriting a newer conclusion);
* ``reconcile`` creates and deletes children and never writes status; it deletes a failed pod
  for a restart only after the status says Restarting, and records the restart in the job's
  ``training.opendatahub.io/restarts`` annotation, which ``backoffLimit`` counts;
* ``gc`` applies cleanPodPolicy and ttlSecondsAfterFinished once the status says the job is
  finished, and deletes children whose job is gone.

Time rules (activeDeadlineSeconds, TTL) are evaluated on every call; handlers return
``Result(requeue_after=...)`` for the moment they expire, and the periodic resync backs that up
when a timer is lost. Precision is therefore the runtime's timer precision (about a second)
and at worst one resync period.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from functions.core.errors import TemporaryError
from functions.core.keys import ObjectKey, controller_owner
from functions.jobs.core import mpi
from functions.jobs.core.frameworks import (
    FRAMEWORKS,
    LABEL_JOB_NAME,
    LABEL_OPERATOR,
    Framework,
)
from functions.jobs.core.gang import PLUGINS_API, VOLCANO_API, podgroup_api_version
from functions.jobs.core.model import Job, Obj, parse_job
from functions.jobs.core.objects import Notice, Settings
from functions.jobs.core.plan import (
    RESTARTED_PODS_ANNOTATION,
    RESTARTS_ANNOTATION,
    Observed,
    Plan,
    gc_may_act,
    gc_plan,
    reconcile_plan,
    status_of,
)
from functions.jobs.core.pods import controlled_by, name_of, uid_of
from functions.jobs.core.status import regresses
from functions.kube import resources
from functions.kube.cache import CacheSpec
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from functions.runtime.registry import ChildMapping, Context, Controller, Reader, Result

RECONCILE_MANAGER = "training-jobs-reconcile"
STATUS_MANAGER = "training-jobs-status"
GC_MANAGER = "training-jobs-gc"
STATUS_KEYS = ("conditions", "replicaStatuses", "startTime", "completionTime",
               "lastReconcileTime")
WRITE_THREADS = 8

RESOURCES: dict[str, Resource] = {
    "PyTorchJob": resources.PYTORCHJOBS, "TFJob": resources.TFJOBS,
    "MXJob": resources.MXJOBS, "MPIJob": resources.MPIJOBS,
}
PODGROUPS = {VOLCANO_API: resources.PODGROUPS_VOLCANO,
             PLUGINS_API: resources.PODGROUPS_SCHEDULER_PLUGINS}


def settings_from_env(environ: dict[str, str] | None = None) -> Settings:
    env = dict(os.environ if environ is None else environ)
    return Settings(
        gang_scheduler=env.get("TRAINING_GANG_SCHEDULER", ""),
        gang_scheduler_name=env.get("TRAINING_GANG_SCHEDULER_NAME",
                                    "scheduler-plugins-scheduler"),
        cluster_domain=env.get("CUSTOM_CLUSTER_DOMAIN", ""),
        init_container_image=env.get("PYTORCH_INIT_CONTAINER_IMAGE", "alpine:3.10"),
        init_container_max_tries=int(env.get("PYTORCH_INIT_CONTAINER_MAX_TRIES", "100")),
    )


SETTINGS = settings_from_env()
_served: dict[str, tuple[bool, float]] = {}


def _podgroups_served(kube: KubeClient, api_version: str) -> bool:
    """Whether the PodGroup CRD is installed (cached; a miss is re-checked after a minute)."""
    known = _served.get(api_version)
    if known is not None and (known[0] or time.monotonic() - known[1] < 60):
        return known[0]
    served = any(r.kind == "PodGroup" for r in kube.discover(api_version))
    _served[api_version] = (served, time.monotonic())
    return served


def new_ssh_keys() -> mpi.SSHKeys:
    """An ECDSA P-521 identity, as mpi-operator generates it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP521R1())
    private = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH)
    return mpi.SSHKeys(private, public + b"\n")


# -- reading ------------------------------------------------------------------------------------

def _get_job(ctx: Context, fw: Framework, key: ObjectKey, *,
             fresh: bool = False) -> tuple[Obj, Job] | None:
    """The job as the reader (maybe a watch cache) has it, or from the API server when
    ``fresh``; the returned object is shared with the cache and must not be modified."""
    reader: Reader = ctx.kube if fresh else ctx.read
    obj = reader.get(RESOURCES[fw.kind], key.name, key.namespace)
    if obj is None:
        return None
    if "apiVersion" not in obj or "kind" not in obj:
        obj = {"apiVersion": fw.api_version, "kind": fw.kind, **obj}
    return obj, parse_job(obj)


def _get_active_job(ctx: Context, fw: Framework, key: ObjectKey, *,
                    fresh: bool = False) -> tuple[Obj, Job] | None:
    """The job, unless it is gone, managed by another controller or being deleted."""
    found = _get_job(ctx, fw, key, fresh=fresh)
    if found is None or found[1].managed_externally or found[1].deleting:
        return None
    return found


def _owned(obj: Obj | None, uid: str) -> Obj | None:
    return obj if obj is not None and controlled_by(obj, uid) else None


def observe(ctx: Context, job: Job, *, services: bool = True, fresh: bool = False) -> Observed:
    """The children a job controls, from the reader (maybe a watch cache), or from the API
    server when ``fresh``. Pods and Services are listed by the job-name label."""
    kube: Reader = ctx.kube if fresh else ctx.read
    selector = f"{LABEL_JOB_NAME}={job.name}"
    pods = kube.list(resources.PODS, job.namespace, label_selector=selector)
    observed = Observed(job=job)
    if job.framework.kind == "MPIJob":
        observed.launcher = _owned(kube.get(resources.JOBS, mpi.launcher_name(job),
                                            job.namespace), job.uid)
        launcher_uid = uid_of(observed.launcher) if observed.launcher else "-"
        observed.pods = [p for p in pods if controlled_by(p, job.uid)
                         or controlled_by(p, launcher_uid)]
        if services:
            svc = _owned(kube.get(resources.SERVICES, job.name, job.namespace), job.uid)
            observed.services = [svc] if svc else []
            observed.config_map = _owned(kube.get(resources.CONFIGMAPS, mpi.config_name(job),
                                                  job.namespace), job.uid)
            observed.secret = _owned(kube.get(resources.SECRETS, mpi.secret_name(job),
                                              job.namespace), job.uid)
    else:
        observed.pods = [p for p in pods if controlled_by(p, job.uid)]
        if services:
            observed.services = [s for s in kube.list(resources.SERVICES, job.namespace,
                                                      label_selector=selector)
                                 if controlled_by(s, job.uid)]
        if job.framework.kind == "PyTorchJob" and job.spec.elastic_policy is not None:
            observed.hpa = _owned(kube.get(resources.HPAS, job.name, job.namespace), job.uid)
    if SETTINGS.gang_scheduler:
        api_version = podgroup_api_version(SETTINGS)
        observed.podgroup_supported = _podgroups_served(ctx.kube, api_version)
        if observed.podgroup_supported:
            observed.podgroup = _owned(kube.get(PODGROUPS[api_version], job.name,
                                                job.namespace), job.uid)
    return observed


# -- writing ------------------------------------------------------------------------------------

def _describe(obj: Obj) -> str:
    return str(obj.get("kind", "object")).lower()


def _record(ctx: Context, job_obj: Obj, notices: list[Notice]) -> None:
    for notice in notices:
        ctx.recorder.record(job_obj, notice.type, notice.reason, notice.message)


def _create(ctx: Context, job_obj: Obj, obj: Obj) -> None:
    kind = str(obj.get("kind"))
    try:
        ctx.kube.create(obj, field_manager=RECONCILE_MANAGER)
    except ApiError as exc:
        if exc.status == 409:
            return
        ctx.recorder.record(job_obj, "Warning", f"FailedCreate{kind}",
                            f"Error creating: {exc.message}")
        ctx.log.warning("cannot create %s %s: %s", kind, name_of(obj), exc)
        return
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
        ctx.recorder.record(job_obj, "Normal", f"SuccessfulDelete{kind}",
                            f"Deleted {_describe(obj)}: {name_of(obj)}")
    return gone


def _parallel(items: list[Obj], action: Callable[[Obj], Any]) -> list[Any]:
    if len(items) <= 1:
        return [action(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(WRITE_THREADS, len(items))) as pool:
        return list(pool.map(action, items))


def _record_restarts(ctx: Context, fw: Framework, job_obj: Obj, pods: list[Obj]) -> None:
    """Count the restart of ``pods`` before they are deleted, exactly once per pod.

    The job's annotations hold the counter and the uids of the batch last counted, written in
    one patch with the job's ``resourceVersion`` as precondition. A retried pass, a crash
    between this and the deletes, or another replica doing the same therefore never counts a
    pod twice; reconcile decides restarts on state read fresh from the API server, so a pod
    deleted long ago cannot come back from a stale read to be counted again.
    """
    meta = job_obj["metadata"]
    uids = sorted(uid_of(p) for p in pods)
    current = job_obj
    for _ in range(3):
        annotations = (current.get("metadata") or {}).get("annotations") or {}
        counted = set(str(annotations.get(RESTARTED_PODS_ANNOTATION, "")).split(","))
        new = [uid for uid in uids if uid not in counted]
        if not new:
            return
        try:
            value = int(annotations.get(RESTARTS_ANNOTATION, "0")) + len(new)
        except ValueError:
            value = len(new)
        patch = {"metadata": {"annotations": {RESTARTS_ANNOTATION: str(value),
                                              RESTARTED_PODS_ANNOTATION: ",".join(uids)},
                              "resourceVersion": current["metadata"]["resourceVersion"]}}
        try:
            ctx.kube.patch(RESOURCES[fw.kind], meta["name"], patch, meta["namespace"],
                           field_manager=RECONCILE_MANAGER)
            return
        except ApiError as exc:
            if exc.status != 409:
                raise
        fresh = ctx.kube.get(RESOURCES[fw.kind], meta["name"], meta["namespace"])
        if fresh is None:
            raise TemporaryError(f"{meta['name']} is gone")
        current = fresh
    raise TemporaryError(f"could not record restarts of {meta['name']}: conflicts")


def execute(ctx: Context, fw: Framework, job_obj: Obj, plan: Plan, manager: str) -> None:
    """Carry out a plan: deletes, restarts (counted first), applies, creates; then its
    Events."""
    _parallel(plan.deletes, lambda obj: _delete(ctx, job_obj, obj))
    if plan.restarts:
        _record_restarts(ctx, fw, job_obj, plan.restarts)
        _parallel(plan.restarts, lambda obj: _delete(ctx, job_obj, obj))
    for obj in plan.applies:
        ctx.kube.apply(obj, manager)
    _parallel(plan.creates, lambda obj: _create(ctx, job_obj, obj))
    _record(ctx, job_obj, plan.notices)


def _result(seconds: float | None) -> Result | None:
    return Result(requeue_after=max(seconds, 0.5)) if seconds is not None else None


# -- handlers -----------------------------------------------------------------------------------

def reconcile(fw: Framework, ctx: Context, key: ObjectKey) -> Result | None:
    fresh = False
    while True:
        found = _get_active_job(ctx, fw, key, fresh=fresh)
        if found is None:
            return None
        job_obj, job = found
        observed = observe(ctx, job, fresh=fresh)
        keys = new_ssh_keys() if fw.kind == "MPIJob" and observed.secret is None else None
        plan = reconcile_plan(observed, ctx.now(), SETTINGS, keys)
        if not plan.restarts or fresh:
            break
        fresh = True  # a restart is counted and destroys evidence: decide it on fresh state
    execute(ctx, fw, job_obj, plan, RECONCILE_MANAGER)
    return _result(plan.requeue_after)


def _current_status(job_obj: Obj) -> Obj:
    status = job_obj.get("status") or {}
    return {k: status[k] for k in STATUS_KEYS if k in status}


def status(fw: Framework, ctx: Context, key: ObjectKey) -> Result | None:
    """Write the derived status when it differs. It is derived from the reader first; a
    result that moves the status backwards (see :func:`regresses`) or a conflicting write is
    redone on state read fresh from the API server, so a lagging cache (or another replica's
    newer write) never rolls a status back."""
    fresh = False
    for _ in range(4):
        found = _get_active_job(ctx, fw, key, fresh=fresh)
        if found is None:
            return None
        job_obj, job = found
        outcome = status_of(observe(ctx, job, services=False, fresh=fresh), ctx.now())
        if outcome is None:
            return None
        desired = outcome.status.to_dict()
        current = _current_status(job_obj)
        if desired == current:
            return _result(outcome.requeue_after)
        if not fresh and regresses(current, desired):
            fresh = True
            continue
        meta = job_obj["metadata"]
        body = {"apiVersion": fw.api_version, "kind": fw.kind,
                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "resourceVersion": meta["resourceVersion"]},
                "status": desired}
        try:
            ctx.kube.apply_status(body, STATUS_MANAGER, res=RESOURCES[fw.kind])
        except ApiError as exc:
            if exc.status == 409:
                fresh = True
                continue
            raise
        _record(ctx, job_obj, outcome.notices)
        return _result(outcome.requeue_after)
    raise TemporaryError(f"status of {key} kept changing under us")


def _orphans(ctx: Context, fw: Framework, key: ObjectKey) -> list[Obj]:
    selector = f"{LABEL_JOB_NAME}={key.name}"
    found: list[Obj] = []
    for res in (resources.PODS, resources.SERVICES):
        for obj in ctx.kube.list(res, key.namespace, label_selector=selector):
            owner = controller_owner(obj, fw.api_version, fw.kind)
            if owner is not None and owner.name == key.name:
                found.append(obj)
    return found


def gc(fw: Framework, ctx: Context, key: ObjectKey) -> Result | None:
    found = _get_job(ctx, fw, key)
    if found is None:
        orphans = _orphans(ctx, fw, key)
        if orphans:
            execute(ctx, fw, {"apiVersion": fw.api_version, "kind": fw.kind,
                              "metadata": {"name": key.name, "namespace": key.namespace}},
                    gc_plan(None, orphans, ctx.now()), GC_MANAGER)
        return None
    job_obj, job = found
    if job.managed_externally or job.deleting or not job.status.finished:
        return None
    if not gc_may_act(job, bool(SETTINGS.gang_scheduler)):
        return None
    plan = gc_plan(observe(ctx, job), [], ctx.now())
    execute(ctx, fw, job_obj, plan, GC_MANAGER)
    if plan.delete_job:
        meta = job_obj["metadata"]
        if ctx.kube.delete(RESOURCES[fw.kind], meta["name"], meta["namespace"],
                           uid=meta.get("uid")):
            ctx.recorder.record(job_obj, "Normal", fw.job_deleted_reason,
                                f"Deleted job: {meta['name']}")
    return _result(plan.requeue_after)


# -- registration -------------------------------------------------------------------------------

def _label_parent(fw: Framework) -> Callable[[Obj], ObjectKey | None]:
    def to_parent(obj: Obj) -> ObjectKey | None:
        owner = controller_owner(obj, fw.api_version, fw.kind)
        if owner is not None:
            return owner
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(LABEL_OPERATOR) == fw.operator_name and labels.get(LABEL_JOB_NAME):
            return ObjectKey(fw.api_version, fw.kind, str(meta.get("namespace") or ""),
                             str(labels[LABEL_JOB_NAME]))
        return None
    return to_parent


def _owner_parent(fw: Framework) -> Callable[[Obj], ObjectKey | None]:
    def to_parent(obj: Obj) -> ObjectKey | None:
        return controller_owner(obj, fw.api_version, fw.kind)
    return to_parent


def _bind(fn: Callable[[Framework, Context, ObjectKey], Result | None],
          fw: Framework) -> Callable[[Context, ObjectKey], Result | None]:
    def handler(ctx: Context, key: ObjectKey) -> Result | None:
        return fn(fw, ctx, key)
    handler.__name__ = f"{fw.kind.lower()}_{fn.__name__}"
    return handler


# The watch caches of the job functions: the jobs of each kind, and the Pods and Services that
# carry the job-name label (the same selector as the ApiServerSource), indexed by that label.
JOB_CHILDREN = (CacheSpec(resources.PODS, LABEL_JOB_NAME, LABEL_JOB_NAME),
                CacheSpec(resources.SERVICES, LABEL_JOB_NAME, LABEL_JOB_NAME))


def controller_for(fw: Framework) -> Controller:
    children = [ChildMapping("v1", "Pod", _label_parent(fw)),
                ChildMapping("v1", "Service", _label_parent(fw))]
    if fw.kind == "MPIJob":
        children.append(ChildMapping("batch/v1", "Job", _owner_parent(fw)))
    elif fw.kind == "PyTorchJob":
        children.append(ChildMapping("autoscaling/v2", "HorizontalPodAutoscaler",
                                     _owner_parent(fw)))
    jobs = CacheSpec(RESOURCES[fw.kind])
    return Controller(
        name=fw.plural, parent=RESOURCES[fw.kind],
        handlers={"reconcile": _bind(reconcile, fw), "status": _bind(status, fw),
                  "gc": _bind(gc, fw)},
        children=tuple(children),
        # gc reads children only for finished jobs with a clean-up policy: no cache for them.
        cached={"reconcile": (jobs, *JOB_CHILDREN), "status": (jobs, JOB_CHILDREN[0]),
                "gc": (jobs,)},
    )


CONTROLLERS: list[Controller] = [controller_for(fw) for fw in FRAMEWORKS]
