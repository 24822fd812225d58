"""A child whose name is taken: ours already (a retried create, another replica's), or an
object the job does not control, which it never adopts nor overwrites.

Children are created under fixed names (``<job>-worker-0``), so a create that meets an
existing object is either a repeat of our own write or a clash with something else. Only the
clash is worth telling the user: a Warning Event ``ErrResourceExists`` on the job, as
upstream's operators record, and the replica stays missing until the name is freed.
"""

from __future__ import annotations

from functions.jobs import metrics
from functions.jobs.core.model import Obj
from functions.jobs.core.objects import resource_exists
from functions.jobs.core.pods import controlled_by, name_of
from functions.kube.client import ApiError
from functions.runtime.registry import Context


def _holder(ctx: Context, obj: Obj) -> Obj | None:
    """The object that holds ``obj``'s name now (``None``: gone again, or unreadable)."""
    kind = str(obj.get("kind"))
    namespace = (obj.get("metadata") or {}).get("namespace")
    try:
        res = ctx.kube.resource_for(str(obj.get("apiVersion")), kind)
        if kind == "Pod":  # the reconcile role may list pods, not get them
            found = ctx.kube.list(res, namespace, field_selector=f"metadata.name={name_of(obj)}")
            return found[0] if found else None
        return ctx.kube.get(res, name_of(obj), namespace)
    except ApiError as exc:
        ctx.log.warning("cannot read %s %s to see who holds its name: %s", kind, name_of(obj),
                        exc)
        return None


def refuse_if_foreign(ctx: Context, job_obj: Obj, obj: Obj) -> None:
    """After a create of ``obj`` met an existing object: record ``ErrResourceExists`` on the
    job when that object is not controlled by the job."""
    holder = _holder(ctx, obj)
    uid = str((job_obj.get("metadata") or {}).get("uid") or "")
    if holder is None or (uid and controlled_by(holder, uid)):
        return
    metrics.not_created(obj)
    notice = resource_exists(job_obj, obj)
    ctx.log.warning("%s", notice.message)
    ctx.recorder.record(job_obj, notice.type, notice.reason, notice.message)
