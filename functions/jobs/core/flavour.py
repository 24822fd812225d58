"""Which flavour of a kind a stored object is: MPIJob ``kubeflow.org/v1`` (training-operator)
or ``kubeflow.org/v2beta1`` (mpi-operator).

One CRD serves both versions from one storage with ``conversion: None``, so every MPIJob is
read back through either version unchanged but for its ``apiVersion``: the object itself does
not say which semantics its author asked for. The API server does, in ``managedFields``: each
writer's entry records the API version it wrote through. The flavour is the version of the
earliest entry that owns ``spec`` fields, i.e. the request that created the spec (``kubectl
create``, the Kubeflow SDK, a GitOps apply). Our status writes own only ``status`` and the
restart counter only ``metadata``, so they never count.

An entry's ``time`` is that writer's *latest* write, though: a queue that un-suspends the job
through ``v2beta1``, then its author updating it again through ``v1``, would make the queue
look earlier. So the answer is read once and pinned: the reconcile function writes it to the
:data:`ANNOTATION` (:func:`pin_patch`) on its first pass, when the author is normally the only
writer of the spec, and every later read takes the annotation. An author may set the
annotation at creation to choose the flavour outright; a value that names no flavour of the
kind is ignored. Objects stored before ``v1`` was served were all written through
``v2beta1`` and read as such. No webhook is needed.
"""

from __future__ import annotations

from typing import Any

from functions.jobs.core.frameworks import BY_KIND, FLAVOURS, Framework

Obj = dict[str, Any]
ANNOTATION = "training.opendatahub.io/api-version"


def spec_api_version(obj: Obj) -> str:
    """The API version the object's spec was first written through (its own ``apiVersion``
    when ``managedFields`` name no writer of ``spec``)."""
    entries = [e for e in (obj.get("metadata") or {}).get("managedFields") or []
               if isinstance(e, dict) and "f:spec" in (e.get("fieldsV1") or {})]
    if not entries:
        return str(obj.get("apiVersion") or "")
    # RFC 3339 times in UTC compare as strings; an entry without a time counts as the latest,
    # and entries of the same second keep the API server's order (creator first).
    order = sorted(range(len(entries)), key=lambda i: (
        entries[i].get("time") is None, str(entries[i].get("time") or ""), i))
    return str(entries[order[0]].get("apiVersion") or obj.get("apiVersion") or "")


def framework_of(obj: Obj) -> Framework:
    """The :class:`Framework` whose semantics apply to a stored job of any kind."""
    kind = str(obj.get("kind"))
    flavours = FLAVOURS.get(kind, (BY_KIND[kind],))
    if len(flavours) == 1:
        return flavours[0]
    pinned = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    for version in (pinned, spec_api_version(obj)):
        found = next((f for f in flavours if f.api_version == version), None)
        if found is not None:
            return found
    return flavours[0]


def pin_patch(obj: Obj) -> Obj | None:
    """The merge patch that pins an object's flavour, or ``None`` when there is nothing to
    pin (a kind with one flavour, or the annotation already names one)."""
    kind = str(obj.get("kind"))
    flavours = FLAVOURS.get(kind, ())
    pinned = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    if len(flavours) < 2 or any(f.api_version == pinned for f in flavours):
        return None
    return {"metadata": {"annotations": {ANNOTATION: framework_of(obj).api_version}}}
