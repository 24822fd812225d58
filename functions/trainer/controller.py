"""The Trainer controller: its registration and the reconcile, gc and status handlers.

* ``reconcile`` runs the Managed flow (:mod:`functions.trainer.provision`) for a Trainer that
  exists, is not being deleted and is ``Managed``; it adds the cleanup finalizer first.
* ``gc`` runs cleanup for a ``Removed`` Trainer (keeping the CR) and for a Trainer being
  deleted (then drops the finalizer so the API server can delete it).
* ``status`` recomputes the status from the Deployments and the handshake ConfigMap.

While another controller manages the Trainer (the platform's own trainer component:
:mod:`functions.platform.core.coexistence`), reconcile and gc refuse to act: they write
``ProvisioningSucceeded=False`` (reason ``ConflictingController``) and a Warning Event naming
what to change, apply nothing, delete nothing, and add no finalizer (a Trainer being deleted
loses ours without a cleanup, since what it would delete is the other controller's too); the
status handler leaves such a status alone.

All three write the status with the same pure rules (:mod:`functions.trainer.core.status`) by
Server-Side Apply on the ``status`` subresource under field manager ``trainer``, only when it
differs, with the read ``resourceVersion`` as a precondition so a concurrent write makes the
loser recompute from fresh data. Each handler reads what it needs and returns quickly when the
Trainer is in a state another handler owns.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from functions.core.errors import TemporaryError
from functions.core.keys import ObjectKey
from functions.kube import resources
from functions.kube.client import ApiError
from functions.platform import coexistence
from functions.platform.core.coexistence import Scope, blocking
from functions.platform.core.coexistence import summary as conflict_summary
from functions.runtime.lifecycle import publisher
from functions.runtime.recorder import NORMAL, WARNING
from functions.runtime.registry import ChildMapping, Context, Controller, Result
from functions.trainer import kinds, provision, sweep
from functions.trainer.core import dependencies as deps
from functions.trainer.core import lifecycle as trainer_lifecycle
from functions.trainer.core import releases as rel
from functions.trainer.core.api import (
    API_VERSION,
    FINALIZER,
    INSTANCE_NAME,
    KIND,
    PART_OF_LABEL,
    PART_OF_VALUE,
    PLATFORM_CONFIGMAP,
    PROVISIONING_SUCCEEDED,
    STATUS_FIELD_MANAGER,
    Condition,
    Release,
    Trainer,
    TrainerStatus,
)
from functions.trainer.core.status import (
    CONFLICT_REASON,
    REMOVED_REASON,
    Mode,
    StatusInputs,
    compute_status,
    conflicting,
    provisioning_failed,
    removed,
    status_changed,
)
from functions.trainer.render import Sources

Obj = dict[str, Any]

PROVISIONING_RETRY_SECONDS = 30.0
# A conflict lasts until an admin acts; the resync looks again too.
CONFLICT_RETRY_SECONDS = 120.0
TRAINER_KEY = ObjectKey(API_VERSION, KIND, "", INSTANCE_NAME)


def _load(ctx: Context, key: ObjectKey) -> tuple[Obj, Trainer] | None:
    """The Trainer object and its parsed form; ``None`` when gone or unparseable."""
    obj = ctx.kube.get(resources.TRAINERS, key.name)
    if obj is None:
        return None
    try:
        return obj, Trainer.from_object(obj)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                             for e in exc.errors())
        ctx.recorder.record(obj, WARNING, "InvalidSpec", f"invalid Trainer: {problems}")
        ctx.log.warning("ignoring invalid Trainer %s: %s", key.name, problems)
        return None


def _mode(trainer: Trainer) -> Mode:
    return Mode.REMOVED if trainer.removed else Mode.MANAGED


def _ensure_finalizer(ctx: Context, obj: Obj, trainer: Trainer) -> tuple[Obj, Trainer]:
    if FINALIZER in trainer.metadata.finalizers:
        return obj, trainer
    finalizers = [*trainer.metadata.finalizers, FINALIZER]
    updated = _patch_finalizers(ctx, trainer, finalizers)
    return updated, Trainer.from_object(updated)


def _patch_finalizers(ctx: Context, trainer: Trainer, finalizers: list[str]) -> Obj:
    patch = {"metadata": {"finalizers": finalizers,
                          "resourceVersion": trainer.metadata.resource_version}}
    try:
        return ctx.kube.patch(resources.TRAINERS, trainer.metadata.name, patch)
    except ApiError as exc:
        if exc.status == 409:
            raise TemporaryError(f"Trainer changed while updating finalizers: {exc}") from exc
        raise


def write_status(ctx: Context, key: ObjectKey, obj: Obj, trainer: Trainer,
                 compute: Callable[[Trainer], TrainerStatus]) -> Obj | None:
    """Apply ``compute(trainer)`` when it differs from the stored status; the status written,
    if it was.

    On a precondition conflict the Trainer is read again and the status recomputed once.
    """
    for attempt in range(2):
        new = compute(trainer)
        if not status_changed(trainer.status, new):
            return None
        body = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": trainer.metadata.name,
                             "resourceVersion": trainer.metadata.resource_version},
                "status": new.to_object()}
        try:
            ctx.kube.apply_status(body, STATUS_FIELD_MANAGER, res=resources.TRAINERS)
            return new.to_object()
        except ApiError as exc:
            if exc.status == 404:
                return None
            if exc.status != 409 or attempt == 1:
                ctx.recorder.record(obj, NORMAL, "ReconcileError",
                                    f"reconcile failed: {exc}")
                raise TemporaryError(f"cannot write Trainer status: {exc}") from exc
            loaded = _load(ctx, key)
            if loaded is None:
                return None
            obj, trainer = loaded
    return None


def _deployments(ctx: Context, namespace: str) -> list[Obj]:
    return sweep.list_labelled(ctx.kube, resources.DEPLOYMENTS, namespace)


def _releases(ctx: Context, trainer: Trainer, sources: Sources) -> tuple[Release, ...]:
    try:
        info = provision.release_info(ctx.kube, sources, trainer.spec.namespace)
    except provision.ProvisioningFailed:
        return trainer.status.releases
    return rel.status_releases(trainer.status.releases, info.component, info.platform)


# -- handlers -----------------------------------------------------------------------------------

Handler = Callable[[Context, ObjectKey], "Result | None"]
TrainerHandler = Callable[[Context, ObjectKey, Obj, Trainer], "Result | None"]


def _trainer_handler(body: TrainerHandler) -> Handler:
    """Run ``body`` on the loaded Trainer; nothing to do when it is gone or invalid.

    An API answer no step handled (a 403 on a read, say) is worth a later retry.
    """
    @functools.wraps(body)
    def wrapped(ctx: Context, key: ObjectKey) -> Result | None:
        try:
            loaded = _load(ctx, key)
            return None if loaded is None else body(ctx, key, *loaded)
        except ApiError as exc:
            raise TemporaryError(f"{body.__name__} {key}: {exc}", retry_after=5.0) from exc
    return wrapped


def _write_observed_status(ctx: Context, key: ObjectKey, obj: Obj, trainer: Trainer,
                           mode: Mode | None, provisioning: Condition | None = None
                           ) -> Obj | None:
    """Write the status from the Deployments and releases read now.

    ``mode`` ``None`` takes it from the Trainer as read when the status is computed.
    """
    deployments = _deployments(ctx, trainer.spec.namespace)
    releases = _releases(ctx, trainer, Sources.from_env())

    def compute(current: Trainer) -> TrainerStatus:
        return compute_status(StatusInputs(
            mode=mode if mode is not None else _mode(current),
            generation=current.metadata.generation,
            previous=current.status, deployments=deployments, releases=releases,
            now=ctx.now(), provisioning=provisioning))

    return write_status(ctx, key, obj, trainer, compute)


def _conflicts(ctx: Context) -> str | None:
    """What another active controller of the Trainer is and what to change, or ``None``."""
    found = blocking(coexistence.observe(ctx.kube), Scope.TRAINER)
    return conflict_summary(found) if found else None


def _refuse(ctx: Context, key: ObjectKey, obj: Obj, trainer: Trainer, mode: Mode,
            conflict: str) -> Result:
    message = f"another controller manages the Trainer; nothing was changed: {conflict}"
    ctx.recorder.record(obj, WARNING, CONFLICT_REASON, message)
    ctx.log.warning("trainer %s: %s", key.name, message)
    _write_observed_status(ctx, key, obj, trainer, mode,
                           conflicting(trainer.metadata.generation, message))
    return Result(requeue_after=CONFLICT_RETRY_SECONDS)


def _conflict_reported(trainer: Trainer) -> bool:
    stored = trainer.status.condition(PROVISIONING_SUCCEEDED)
    return stored is not None and stored.reason == CONFLICT_REASON


@_trainer_handler
def reconcile(ctx: Context, key: ObjectKey, obj: Obj, trainer: Trainer) -> Result | None:
    if trainer.deleting or trainer.removed:
        return None
    conflict = _conflicts(ctx)
    if conflict is not None:
        return _refuse(ctx, key, obj, trainer, Mode.MANAGED, conflict)
    obj, trainer = _ensure_finalizer(ctx, obj, trainer)
    outcome = provision.Provisioner(ctx, trainer).run()
    failed = outcome.provisioning.status != "True"
    if failed:
        ctx.recorder.record(obj, WARNING, "ProvisioningError",
                            f"provisioning failed: {outcome.provisioning.message}")
    if outcome.applied or outcome.deleted:
        ctx.log.info("trainer %s: applied %d, deleted %d", key.name, len(outcome.applied),
                     len(outcome.deleted))

    def compute(current: Trainer) -> TrainerStatus:
        return compute_status(StatusInputs(
            mode=Mode.MANAGED, generation=current.metadata.generation, previous=current.status,
            deployments=outcome.deployments, releases=outcome.releases, now=ctx.now(),
            provisioning=outcome.provisioning, degraded=outcome.degraded))

    write_status(ctx, key, obj, trainer, compute)
    return Result(requeue_after=PROVISIONING_RETRY_SECONDS) if failed else None


@_trainer_handler
def status(ctx: Context, key: ObjectKey, obj: Obj, trainer: Trainer) -> Result | None:
    """Also sends the Trainer's lifecycle (:mod:`functions.trainer.core.lifecycle`): each of
    the three functions writes its status, and each write reaches this handler, which sends
    what the status it read and the one it wrote show and the Trainer's record lacks."""
    written = None
    if not trainer.deleting and not _conflict_reported(trainer):
        written = _write_observed_status(ctx, key, obj, trainer, mode=None)
    statuses = [obj.get("status") or {}, *([written] if written else [])]
    publisher(ctx.kube).publish(resources.TRAINERS, {**obj, "status": statuses[-1]},
                                trainer_lifecycle.RULES, statuses,
                                trainer_lifecycle.lifecycle_event, STATUS_FIELD_MANAGER)
    return None


def cleanup(ctx: Context, namespace: str | None = None) -> None:
    """Everything labelled goes, except the namespace, CRDs and the platform's ConfigMap
    (``namespace``: the operand namespace, for types this identity may list only there)."""
    sweep.remove_runtimes(ctx.kube, ctx.log)
    deleted = sweep.sweep(ctx.kube, stamp=None, namespace=namespace)
    if deleted:
        ctx.log.info("trainer cleanup deleted %d objects", len(deleted))


@_trainer_handler
def gc(ctx: Context, key: ObjectKey, obj: Obj, trainer: Trainer) -> Result | None:
    if trainer.deleting:
        if FINALIZER not in trainer.metadata.finalizers:
            return None
        conflict = _conflicts(ctx)
        if conflict is not None:
            ctx.recorder.record(obj, WARNING, CONFLICT_REASON,
                                f"cleanup skipped, nothing was deleted: {conflict}")
        else:
            cleanup(ctx, trainer.spec.namespace)
        _patch_finalizers(ctx, trainer, [f for f in trainer.metadata.finalizers
                                         if f != FINALIZER])
        return None
    if not trainer.removed:
        return None
    conflict = _conflicts(ctx)
    if conflict is not None:
        return _refuse(ctx, key, obj, trainer, Mode.REMOVED, conflict)
    obj, trainer = _ensure_finalizer(ctx, obj, trainer)
    outcome: Condition
    try:
        cleanup(ctx, trainer.spec.namespace)
    except ApiError as exc:
        outcome = provisioning_failed(trainer.metadata.generation, str(exc))
        ctx.recorder.record(obj, WARNING, "ProvisioningError", f"cleanup failed: {exc}")
    else:
        outcome = removed(trainer.metadata.generation)
    _write_observed_status(ctx, key, obj, trainer, Mode.REMOVED, outcome)
    cleaned = outcome.reason == REMOVED_REASON
    return None if cleaned else Result(requeue_after=PROVISIONING_RETRY_SECONDS)


# -- registration -------------------------------------------------------------------------------

def _labelled_child(obj: Obj) -> ObjectKey | None:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return TRAINER_KEY if labels.get(PART_OF_LABEL) == PART_OF_VALUE else None


def _configmap_child(obj: Obj) -> ObjectKey | None:
    if (obj.get("metadata") or {}).get("name") == PLATFORM_CONFIGMAP:
        return TRAINER_KEY
    return _labelled_child(obj)


def _always(_: Obj) -> ObjectKey | None:
    return TRAINER_KEY


def _jobset_crd(obj: Obj) -> ObjectKey | None:
    name = (obj.get("metadata") or {}).get("name")
    return TRAINER_KEY if name == deps.JOBSET_CRD else _labelled_child(obj)


CONTROLLERS = [
    Controller(
        name="trainer",
        parent=resources.TRAINERS,
        handlers={"reconcile": reconcile, "gc": gc, "status": status},
        children=(
            ChildMapping("apps/v1", "Deployment", _labelled_child),
            ChildMapping("v1", "ConfigMap", _configmap_child),
            ChildMapping("v1", "Service", _labelled_child),
            ChildMapping("v1", "Secret", _labelled_child),
            ChildMapping("v1", "ServiceAccount", _labelled_child),
            ChildMapping(kinds.CLUSTERROLES.api_version, "ClusterRole", _labelled_child),
            ChildMapping(kinds.CLUSTERROLEBINDINGS.api_version, "ClusterRoleBinding",
                         _labelled_child),
            ChildMapping(kinds.ROLES.api_version, "Role", _labelled_child),
            ChildMapping(kinds.ROLEBINDINGS.api_version, "RoleBinding", _labelled_child),
            ChildMapping(kinds.VALIDATING_WEBHOOKS.api_version,
                         "ValidatingWebhookConfiguration", _labelled_child),
            ChildMapping(kinds.MUTATING_WEBHOOKS.api_version, "MutatingWebhookConfiguration",
                         _labelled_child),
            ChildMapping(kinds.CLUSTER_TRAINING_RUNTIMES.api_version, "ClusterTrainingRuntime",
                         _labelled_child),
            ChildMapping(resources.CRDS.api_version, "CustomResourceDefinition", _jobset_crd),
            ChildMapping(kinds.JOBSET_OPERATORS.api_version, "JobSetOperator", _always),
        ),
    ),
]
