"""Which flavour of a kind a stored object is: MPIJob ``kubeflow.org/v1`` (training-operator)
or ``kubeflow.org/v2beta1`` (mpi-operator).

One CRD serves both versions from one storage with ``conversion: None``, so every MPIJob is
read back through either version unchanged but for its ``apiVersion``: the object itself does
not say which semantics its author asked for. The API server does, in ``managedFields``: each
writer's entry records the API version it wrote through. The flavour is the version of the
earliest entry that owns ``spec`` fields, i.e. the request that created the spec (``kubectl
create``, the Kubeflow SDK, a GitOps apply). Later writers do not change it: our status writes
own only ``status``, the restart counter only ``metadata``, and a queue that un-suspends the
job writes after its author. This needs no webhook, no annotation written by us, and holds for
objects that existed before the CRD served ``v1`` (they were all written through
``v2beta1``).

Limit: a later writer that takes over *every* spec field the author owned (a forced
Server-Side Apply of the whole spec by another manager) removes the author's entry; the job
then takes that writer's version.
"""

from __future__ import annotations

from typing import Any

from functions.jobs.core.frameworks import BY_KIND, FLAVOURS, Framework

Obj = dict[str, Any]


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
    version = spec_api_version(obj)
    return next((f for f in flavours if f.api_version == version), flavours[0])
