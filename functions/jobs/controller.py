"""Handlers of the training-job controllers: read, call the pure plan, write what differs.

One :class:`Controller` per kind of the framework table, each with three handlers
that may run concurrently on the same job without stepping on each other:

* ``status`` derives the status from the persisted status and the observed children and, only
  when it differs, writes it with Server-Side Apply on the ``status`` subresource under its own
  field manager (``resourceVersion`` as a precondition, so a concurrent write makes it retry on
  fresh data instead of overwriting a newer conclusion); it also puts a Warning Event on the
  job for each new cause of a stuck pod (:mod:`functions.jobs.pod_events`);
* ``reconcile`` creates and deletes children and never writes status; it deletes a failed pod
  for a restart only after the status says Restarting, and records the restart in the job's
  ``training.opendatahub.io/restarts`` annotation, which ``backoffLimit`` counts;
* ``gc`` applies cleanPodPolicy and ttlSecondsAfterFinished once the status says the job is
  finished, and deletes children whose job is gone.

While another controller of the same jobs is active (the platform's training operator:
:mod:`functions.jobs.coexistence`), all three step aside: nothing is written to a job or its
children, and reconcile records one Warning Event on the job saying what to change.

Time rules (activeDeadlineSeconds, TTL, a pending timeout: :mod:`functions.jobs.core.guards`)
are evaluated on every call from what the objects say (start and completion times, pods'
creation times); handlers return ``Result(requeue_after=...)`` for the moment they expire,
and the periodic resync backs that up when a timer is lost. Precision is therefore the
runtime's timer precision (about a second) and at worst one resync period.
"""

from __future__ import annotations

from collections.abc import Callable

from functions.core.errors import TemporaryError
from functions.core.keys import ObjectKey, controller_owner
from functions.jobs import coexistence, gauges, lifecycle, metrics
from functions.jobs.core import conditions as c
from functions.jobs.core import mpi
from functions.jobs.core.flavour import pin_patch
from functions.jobs.core.frameworks import (
    FLAVOURS,
    FRAMEWORKS,
    LABEL_JOB_NAME,
    LABEL_OPERATOR,
    MPI,
    Framework,
)
from functions.jobs.core.gang import PLUGINS_API, VOLCANO_API
from functions.jobs.core.guards import newly_timed_out
from functions.jobs.core.model import Obj
from functions.jobs.core.plan import gc_may_act, gc_plan, reconcile_plan, status_of
from functions.jobs.core.planning import RESTARTS_ANNOTATION, Observed, Plan
from functions.jobs.core.pods import as_cached
from functions.jobs.core.status import regresses
from functions.jobs.pod_events import report_stuck_pods
from functions.jobs.reads import (
    RESOURCES,
    SETTINGS,
    get_active_job,
    get_job,
    observe,
    settings_from_env,
)
from functions.jobs.writes import RECONCILE_MANAGER, execute, record
from functions.kube import resources
from functions.kube.cache import CacheSpec
from functions.kube.client import ApiError
from functions.kube.gaps import true_conditions
from functions.kube.store import version_of
from functions.runtime.registry import ChildMapping, Context, Controller, FunctionName, Result

__all__ = ["CONTROLLERS", "RESOURCES", "controller_for", "new_ssh_keys", "settings_from_env"]
# The jobs-by-state gauges (registered at import) read the caches of the status function.
_GAUGES = gauges.GAUGES

STATUS_MANAGER = "training-jobs-status"
GC_MANAGER = "training-jobs-gc"
STATUS_KEYS = ("conditions", "replicaStatuses", "startTime", "completionTime",
               "lastReconcileTime")
# A conflict lasts until an admin acts; the resync looks again too.
CONFLICT_RETRY_SECONDS = 120.0


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


def _requeue(seconds: float | None) -> float | None:
    return max(seconds, 0.5) if seconds is not None else None


def _result(seconds: float | None) -> Result | None:
    return Result(requeue_after=_requeue(seconds)) if seconds is not None else None


# -- handlers -----------------------------------------------------------------------------------

def _step_aside(ctx: Context, fw: Framework, key: ObjectKey, conflict: str) -> Result | None:
    """Leave the job to the other controller; only the Event says so."""
    found = get_active_job(ctx, fw, key)
    if found is None:
        return None
    coexistence.warn(ctx, found[0], conflict)
    return Result(requeue_after=CONFLICT_RETRY_SECONDS)


def reconcile(fw: Framework, ctx: Context, key: ObjectKey) -> Result | None:
    conflict = coexistence.conflict(ctx)
    if conflict is not None:
        return _step_aside(ctx, fw, key, conflict)
    fresh = False
    while True:
        found = get_active_job(ctx, fw, key, fresh=fresh)
        if found is None:
            return None
        job_obj, job = found
        _pin_flavour(ctx, fw, job_obj)
        observed = observe(ctx, job, fresh=fresh, launcher_rbac=True, priorities=True)
        keys = new_ssh_keys() if job.framework == MPI and observed.secret is None else None
        plan = reconcile_plan(observed, ctx.now(), SETTINGS, keys)
        if fresh or not (plan.restarts or plan.suspend or _replaces(plan, observed, job_obj)):
            break
        # A restart is counted and destroys evidence, a pending timeout's suspension stops a
        # job that a stale read may show waiting, and a replacement pod must not come from a
        # job version that has not seen its end (its last restart counted, a final status):
        # all are decided on fresh state.
        fresh = True
    execute(ctx, fw, job_obj, plan, RECONCILE_MANAGER)
    return _result(plan.requeue_after)


def _pin_flavour(ctx: Context, fw: Framework, job_obj: Obj) -> None:
    """Record once which API a job of a kind served in two (MPIJob) was written through
    (:mod:`functions.jobs.core.flavour`), before anything is made for it."""
    patch = pin_patch(job_obj)
    if patch is not None:
        meta = job_obj["metadata"]
        ctx.kube.patch(RESOURCES[fw.kind], meta["name"], patch, meta["namespace"],
                       field_manager=RECONCILE_MANAGER)


def _replaces(plan: Plan, observed: Observed, job_obj: Obj) -> bool:
    """Whether ``plan`` creates pods for a job that already had pods: some of them exist, or
    restarts were counted. A job's first pods (the burst's path) need no fresh read."""
    if not any(obj.get("kind") == "Pod" for obj in plan.creates):
        return False
    annotations = (job_obj.get("metadata") or {}).get("annotations") or {}
    return bool(observed.pods) or RESTARTS_ANNOTATION in annotations


def _current_status(job_obj: Obj) -> Obj:
    status = job_obj.get("status") or {}
    return {k: status[k] for k in STATUS_KEYS if k in status}


def status(fw: Framework, ctx: Context, key: ObjectKey) -> Result | None:
    """Write the derived status when it differs. It is derived from the reader first; a
    result that moves the status backwards (see :func:`regresses`) or a conflicting write is
    redone on state read fresh from the API server, so a lagging cache (or another replica's
    newer write) never rolls a status back. Nothing is written while another controller of
    the jobs is active."""
    if coexistence.conflict(ctx) is not None:
        return None
    fresh = False
    for _ in range(4):
        found = get_active_job(ctx, fw, key, fresh=fresh)
        if found is None:
            return None
        job_obj, job = found
        observed = observe(ctx, job, services=False, fresh=fresh)
        outcome = status_of(observed, ctx.now())
        if outcome is None:
            return None
        if not outcome.status.finished:
            report_stuck_pods(ctx, job_obj, observed.pods)
        desired = outcome.status.to_dict()
        current = _current_status(job_obj)
        if desired == current:
            lifecycle.publish(ctx.kube, fw, job_obj, [current], observed.pods, STATUS_MANAGER)
            return _result(outcome.requeue_after)
        if not fresh and (regresses(current, desired) or newly_timed_out(current, desired)):
            fresh = True
            continue
        meta = job_obj["metadata"]
        body = {"apiVersion": fw.api_version, "kind": fw.kind,
                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "resourceVersion": meta["resourceVersion"]},
                "status": desired}
        try:
            written = ctx.kube.apply_status(body, STATUS_MANAGER, res=RESOURCES[fw.kind])
        except ApiError as exc:
            if exc.status == 409:
                fresh = True
                continue
            raise
        metrics.status_written(fw, job_obj, current, desired)
        record(ctx, job_obj, outcome.notices)
        # What the replaced status showed is owed too: a writer before this one may have
        # stopped between its write and its send.
        lifecycle.publish(ctx.kube, fw, {**job_obj, "status": desired}, [current, desired],
                          observed.pods, STATUS_MANAGER)
        # The write was conditional on the version read: its own event brings nothing new.
        return Result(requeue_after=_requeue(outcome.requeue_after), wrote=version_of(written))
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
    """Nothing is deleted while another controller of the jobs is active: the children of a
    job, and the job itself, may be its to keep."""
    if coexistence.conflict(ctx) is not None:
        return None
    found = get_job(ctx, fw, key)
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
        # The lifecycle is sent before the job it is about is gone.
        lifecycle.publish_deletion(ctx.kube, fw, job_obj)
        if ctx.kube.delete(RESOURCES[fw.kind], meta["name"], meta["namespace"],
                           uid=meta.get("uid")):
            metrics.job_deleted(fw, meta["namespace"])
            ctx.recorder.record(job_obj, "Normal", fw.job_deleted_reason,
                                f"Deleted job: {meta['name']}")
    return _result(plan.requeue_after)


# -- registration -------------------------------------------------------------------------------

def finished(ref: Obj) -> bool:
    """A job whose status says it has ended (from the journal's reference of it)."""
    return bool(true_conditions(ref) & {c.SUCCEEDED, c.FAILED})


# Which changes of a job's status alone each function reads (the others leave them out, and
# their events too): status derives the status from the spec and the pods (its own writes are
# its output); reconcile acts on a job that is restarting or has ended; gc only on an ended
# job. Reconcile is not sent pod updates: it learns of a pod's change through the status that
# change brings about, so it must read every status change it acts on.
STATUS_INPUTS: dict[FunctionName, Callable[[Obj], bool]] = {
    "status": lambda ref: False,
    "reconcile": lambda ref: finished(ref) or c.RESTARTING in true_conditions(ref),
    "gc": finished,
}
# An MPIJob's reconcile reads every status change: its hostfile lists the workers that run,
# which it hears of through the status's replica counts.
MPI_STATUS_INPUTS: dict[FunctionName, Callable[[Obj], bool]] = {
    name: takes for name, takes in STATUS_INPUTS.items() if name != "reconcile"}


def _label_parent(fw: Framework) -> Callable[[Obj], ObjectKey | None]:
    # Children of every flavour of the kind (MPIJob v1 pods carry training-operator's name).
    operators = {f.operator_name for f in FLAVOURS[fw.kind]}

    def to_parent(obj: Obj) -> ObjectKey | None:
        owner = controller_owner(obj, fw.api_version, fw.kind)
        if owner is not None:
            return owner
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(LABEL_OPERATOR) in operators and labels.get(LABEL_JOB_NAME):
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
# carry the job-name label (the same selector as the ApiServerSource), indexed by that label;
# of a pod, what the handlers read (pods.as_cached: most of a pod is its spec, not read).
JOB_CHILDREN = (CacheSpec(resources.PODS, LABEL_JOB_NAME, LABEL_JOB_NAME, keep=as_cached),
                CacheSpec(resources.SERVICES, LABEL_JOB_NAME, LABEL_JOB_NAME))


def controller_for(fw: Framework) -> Controller:
    # A PodGroup's admission (Volcano's Inqueue) is what reconcile waits for to create pods.
    children = [ChildMapping("v1", "Pod", _label_parent(fw)),
                ChildMapping("v1", "Service", _label_parent(fw)),
                *(ChildMapping(api, "PodGroup", _owner_parent(fw))
                  for api in (VOLCANO_API, PLUGINS_API))]
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
        status_inputs=MPI_STATUS_INPUTS if fw.kind == "MPIJob" else STATUS_INPUTS,
    )


CONTROLLERS: list[Controller] = [controller_for(fw) for fw in FRAMEWORKS]
