"""Label-based garbage collection across every API type, and the runtime cleanup it relies on.

The sweep discovers the served types (preferred version of each group), keeps those that can
be listed and deleted and are not protected (Namespaces, CRDs, Leases, Events, runtimes), lists
each across all namespaces by the ``part-of=trainer`` label and deletes what the pure
:func:`functions.trainer.core.gc.collectable` rule says is stale. Runtimes are handled before
the sweep: their legacy finalizer is stripped and they are deleted explicitly. A type whose
CRD is not installed reads as empty, so cleanup never blocks on missing Trainer CRDs.

Least privilege shapes the sweep: a namespaced type this identity may list only in the
Trainer's operand namespace (a namespaced Role) is listed there, and an object it may not
delete (RBAC names what is ours: e.g. ClusterRoles by name) is left alone rather than failing
the cleanup.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from typing import Any

from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from functions.trainer import kinds
from functions.trainer.core.api import PART_OF_SELECTOR, RUNTIME_FINALIZER
from functions.trainer.core.apply import Stamp
from functions.trainer.core.gc import (
    ApiType,
    ObjectId,
    collectable,
    runtime_finalizers_without_legacy,
    sweepable,
)

Obj = dict[str, Any]

# Answers to a LIST that mean "nothing of this type for us".
_EMPTY_LIST_STATUSES = frozenset({403, 404, 405})

def _get_json(kube: KubeClient, path: str) -> dict[str, Any] | None:
    response = kube.call("discovery", "GET", path)
    if response.status == 404:
        return None
    if response.status >= 300:
        raise ApiError(response.status, "Discovery", f"GET {path}: {response.body[:200]!r}")
    data = json.loads(response.body or b"{}")
    return data if isinstance(data, dict) else None


def _types_of(group: str, version: str, data: dict[str, Any]) -> list[ApiType]:
    return [ApiType(group, version, r["name"], r["kind"], bool(r.get("namespaced")),
                    frozenset(r.get("verbs") or ()))
            for r in data.get("resources") or [] if "/" not in r["name"]]


def discover_types(kube: KubeClient) -> list[ApiType]:
    """Every top-level type of the preferred version of each served group.

    Not cached: sweeps are rare (cleanup, or after the stamp moved) and must see types whose
    CRDs were installed a moment ago.
    """
    found = _types_of("", "v1", _get_json(kube, "/api/v1") or {})
    for group in (_get_json(kube, "/apis") or {}).get("groups") or []:
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        if not preferred:
            continue
        data = _get_json(kube, f"/apis/{preferred}")
        if data is not None:
            found.extend(_types_of(group["name"], preferred.rpartition("/")[2], data))
    return found


def list_labelled(kube: KubeClient, res: Resource, namespace: str | None = None) -> list[Obj]:
    """Labelled objects of a type; a type the server does not serve (or hides) is empty."""
    return list_all(kube, res, namespace, PART_OF_SELECTOR)


def list_all(kube: KubeClient, res: Resource, namespace: str | None = None,
             label_selector: str | None = None) -> list[Obj]:
    """Objects of a type; a type the server does not serve (or hides) is empty."""
    try:
        return kube.list(res, namespace, label_selector=label_selector)
    except ApiError as exc:
        if exc.status in _EMPTY_LIST_STATUSES:
            return []
        raise


def delete_object(kube: KubeClient, obj: Obj, res: Resource, propagation: str) -> bool:
    """Delete; ``False`` when it was already gone or this identity may not delete it."""
    meta = obj.get("metadata") or {}
    try:
        return kube.delete(res, str(meta["name"]), meta.get("namespace") or None,
                           propagation=propagation)
    except ApiError as exc:
        if exc.status == 403:
            return False
        raise


def labelled_everywhere(kube: KubeClient, res: Resource, namespace: str | None) -> list[Obj]:
    """Labelled objects in every namespace, or only in ``namespace`` for a namespaced type
    this identity may list only there."""
    try:
        return kube.list(res, None, label_selector=PART_OF_SELECTOR)
    except ApiError as exc:
        if exc.status == 403 and res.namespaced and namespace:
            return list_labelled(kube, res, namespace)
        if exc.status in _EMPTY_LIST_STATUSES:
            return []
        raise


def strip_runtime_finalizers(kube: KubeClient, runtimes: Iterable[tuple[Resource, Obj]]) -> int:
    """Remove the legacy ``resource-in-use`` finalizer; returns how many objects changed."""
    changed = 0
    for res, obj in runtimes:
        remaining = runtime_finalizers_without_legacy(obj, RUNTIME_FINALIZER)
        if remaining is None:
            continue
        meta = obj["metadata"]
        patch = [{"op": "test", "path": "/metadata/resourceVersion",
                  "value": meta.get("resourceVersion")},
                 {"op": "replace", "path": "/metadata/finalizers", "value": remaining}]
        try:
            kube.patch(res, meta["name"], patch, meta.get("namespace") or None,
                       content_type="application/json-patch+json")
        except ApiError as exc:
            if exc.status != 404:
                raise
        changed += 1
    return changed


def labelled_runtimes(kube: KubeClient) -> list[tuple[Resource, Obj]]:
    found: list[tuple[Resource, Obj]] = []
    for res in (kinds.CLUSTER_TRAINING_RUNTIMES, kinds.TRAINING_RUNTIMES):
        found.extend((res, obj) for obj in list_labelled(kube, res))
    return found


def remove_runtimes(kube: KubeClient, log: Any) -> None:
    """Strip the legacy finalizer (errors abort), then delete every labelled runtime (best
    effort: errors are logged)."""
    runtimes = labelled_runtimes(kube)
    strip_runtime_finalizers(kube, runtimes)
    for res, obj in runtimes:
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            continue
        try:
            delete_object(kube, obj, res, "Background")
        except ApiError as exc:
            log.warning("cannot delete %s %s: %s", obj.get("kind"),
                        obj["metadata"].get("name"), exc)


def sweep(kube: KubeClient, stamp: Stamp | None, desired: Collection[ObjectId] | None = None,
          skip: Collection[tuple[str, str]] = (), namespace: str | None = None) -> list[str]:
    """Delete collectable labelled objects of every sweepable type; returns what was deleted.

    ``skip`` lists ``(group, kind)`` pairs the caller has already judged; ``namespace`` is the
    Trainer's operand namespace (see :func:`labelled_everywhere`).
    """
    deleted: list[str] = []
    for api_type in discover_types(kube):
        if not sweepable(api_type) or (api_type.group, api_type.kind) in skip:
            continue
        res = Resource(api_type.group, api_type.version, api_type.plural, api_type.kind,
                       api_type.namespaced)
        for obj in labelled_everywhere(kube, res, namespace):
            if collectable(obj, stamp, desired) and delete_object(kube, obj, res, "Foreground"):
                meta = obj["metadata"]
                deleted.append(f"{api_type.kind}/{meta.get('namespace') or ''}/{meta['name']}")
    return deleted
