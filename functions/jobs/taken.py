"""A child whose name is taken: ours already (a retried create, another replica's), or an
object the job does not control, which it never adopts nor overwrites.

Children are created under fixed names (``<job>-worker-0``), so a create that meets an
existing object is either a repeat of our own write or a clash with something else. Only the
clash is worth telling the user: a Warning Event ``ErrResourceExists`` on the job, as
upstream's operators record, and the replica stays missing until the name is freed (the
holder's deletion brings reconcile back). A name already free again when it is read fails the
pass, which is then retried: no later event would ask for that child.
"""

from __future__ import annotations

from functions.core.errors import TemporaryError
from functions.jobs import metrics
from functions.jobs.core.model import Obj
from functions.jobs.core.objects import resource_exists
from functions.jobs.core.pods import controlled_by, name_of
from functions.kube.client import ApiError
from functions.runtime.registry import Context


def _holder(ctx: Context, obj: Obj) -> tuple[bool, Obj | None]:
    """Whether the name could be read, and the object that holds ``obj``'s name now
    (``None``: nothing does)."""
    kind = str(obj.get("kind"))
    namespace = (obj.get("metadata") or {}).get("namespace")
    try:
        res = ctx.kube.resource_for(str(obj.get("apiVersion")), kind)
        if kind == "Pod":  # the reconcile role may list pods, not get them
            found = ctx.kube.list(res, namespace, field_selector=f"metadata.name={name_of(obj)}")
            return True, (found[0] if found else None)
        return True, ctx.kube.get(res, name_of(obj), namespace)
    except ApiError as exc:
        ctx.log.warning("cannot read %s %s to see who holds its name: %s", kind, name_of(obj),
                        exc)
        return False, None


def refuse_if_foreign(ctx: Context, job_obj: Obj, obj: Obj) -> None:
    """After a create of ``obj`` met an existing object: record ``ErrResourceExists`` on the
    job when that object is not controlled by the job. When nothing holds the name any more
    (it was deleted meanwhile), raise :class:`TemporaryError`: the pass is retried and makes
    the child, which no later event would otherwise ask for."""
    readable, holder = _holder(ctx, obj)
    if readable and holder is None:
        raise TemporaryError(f"creating {obj.get('kind')} {name_of(obj)}: the API server said "
                             "it exists, and nothing holds the name now; made on a retry",
                             retry_after=1.0)
    uid = str((job_obj.get("metadata") or {}).get("uid") or "")
    if holder is None or (uid and controlled_by(holder, uid)):
        return
    metrics.not_created(obj)
    notice = resource_exists(job_obj, obj)
    ctx.log.warning("%s", notice.message)
    ctx.recorder.record(job_obj, notice.type, notice.reason, notice.message)
