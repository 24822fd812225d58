"""What to do with each rendered object: the apply order, the final body, and whether to write.

Given the rendered (desired) object and the object observed in the cluster, :func:`plan_object`
decides: leave it alone (opted out with ``opendatahub.io/managed: "false"``), skip it (the
cluster already holds everything we would apply), or Server-Side Apply a body stamped with the
five ``platform.opendatahub.io`` annotations under the right field manager. It also says which
ownerReferences must be stripped first. Skipping unchanged objects is what makes a steady-state
reconcile free of writes.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from functions.trainer.core.api import (
    API_VERSION,
    CRD_FIELD_MANAGER,
    FIELD_MANAGER,
    KIND,
    MANAGED_ANNOTATION,
)

Obj = dict[str, Any]

ANNOTATION_GENERATION = "platform.opendatahub.io/instance.generation"
ANNOTATION_NAME = "platform.opendatahub.io/instance.name"
ANNOTATION_UID = "platform.opendatahub.io/instance.uid"
ANNOTATION_TYPE = "platform.opendatahub.io/type"
ANNOTATION_VERSION = "platform.opendatahub.io/version"

# Kinds applied first, in this order; unknown kinds come next; webhooks last.
_FIRST = ("Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition",
          "ServiceAccount", "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding",
          "ClusterRoleBinding", "ConfigMap", "Secret", "Endpoints", "Service", "LimitRange",
          "PriorityClass", "PersistentVolume", "PersistentVolumeClaim", "Deployment",
          "StatefulSet", "CronJob", "PodDisruptionBudget")
_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
_RANK: dict[str, int] = {kind: i - len(_FIRST) for i, kind in enumerate(_FIRST)}
_RANK.update({kind: i + 1 for i, kind in enumerate(_LAST)})


@dataclass(frozen=True, slots=True)
class Stamp:
    """Who applied an object: the Trainer instance and the release in force."""

    generation: int
    name: str
    uid: str
    type: str
    version: str

    def annotations(self) -> dict[str, str]:
        return {
            ANNOTATION_GENERATION: str(self.generation),
            ANNOTATION_NAME: self.name,
            ANNOTATION_UID: self.uid,
            ANNOTATION_TYPE: self.type,
            ANNOTATION_VERSION: self.version,
        }


def object_id(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """``(group, kind, namespace, name)``: identity across API versions of one group."""
    meta = obj.get("metadata") or {}
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    return group, str(obj.get("kind", "")), str(meta.get("namespace") or ""), \
        str(meta.get("name", ""))


def apply_order(objs: Iterable[Obj]) -> list[Obj]:
    """Stable sort by kind rank, then ``group/version/kind``, namespace and name."""
    def key(obj: Obj) -> tuple[int, str, str, str]:
        meta = obj.get("metadata") or {}
        gvk = f"{obj.get('apiVersion', '')}/{obj.get('kind', '')}"
        return (_RANK.get(str(obj.get("kind", "")), 0), gvk, str(meta.get("namespace") or ""),
                str(meta.get("name", "")))
    return sorted(objs, key=key)


class Action(StrEnum):
    APPLY = "apply"
    UNCHANGED = "unchanged"
    OPTED_OUT = "opted-out"


@dataclass(frozen=True, slots=True)
class ObjectPlan:
    action: Action
    body: Obj
    field_manager: str
    # The ownerReferences to keep when some must be stripped from the live object, else None.
    owner_references: list[Obj] | None = None


def is_trainer_owner(ref: Mapping[str, Any]) -> bool:
    return ref.get("kind") == KIND and ref.get("apiVersion") == API_VERSION


def opted_out(obj: Mapping[str, Any] | None) -> bool:
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(MANAGED_ANNOTATION) == "false"


def desired_body(desired: Obj, observed: Obj | None, stamp: Stamp) -> Obj:
    """The body to apply: stamped, customised from the live object, server fields stripped."""
    body = copy.deepcopy(desired)
    body.pop("status", None)
    meta = body.setdefault("metadata", {})
    for field in ("resourceVersion", "managedFields", "uid", "creationTimestamp", "generation"):
        meta.pop(field, None)
    kind = body.get("kind")
    if kind != "CustomResourceDefinition":
        annotations = meta.get("annotations")
        if not isinstance(annotations, dict):
            annotations = meta["annotations"] = {}
        annotations.update(stamp.annotations())
    if kind == "ClusterRole" and body.get("aggregationRule"):
        body.pop("rules", None)
    if kind == "Deployment" and observed is not None:
        live_annotations = (observed.get("metadata") or {}).get("annotations") or {}
        if live_annotations.get(MANAGED_ANNOTATION) != "true":
            _keep_user_tuning(body, observed)
    return body


def _keep_user_tuning(body: Obj, observed: Obj) -> None:
    """Carry ``spec.replicas`` and each named container's ``resources`` over from the cluster."""
    live_spec = observed.get("spec") or {}
    spec = body.setdefault("spec", {})
    if "replicas" in live_spec:
        spec["replicas"] = live_spec["replicas"]
    live_containers = {c.get("name"): c for c in
                       ((live_spec.get("template") or {}).get("spec") or {}).get("containers")
                       or []}
    for container in ((spec.get("template") or {}).get("spec") or {}).get("containers") or []:
        live = live_containers.get(container.get("name"))
        if live is not None and "resources" in live:
            container["resources"] = copy.deepcopy(live["resources"])


def plan_object(desired: Obj, observed: Obj | None, stamp: Stamp) -> ObjectPlan:
    manager = CRD_FIELD_MANAGER if desired.get("kind") == "CustomResourceDefinition" \
        else FIELD_MANAGER
    strip = _owner_references_to_keep(observed)
    if observed is not None and (opted_out(observed) or opted_out(desired)):
        return ObjectPlan(Action.OPTED_OUT, desired, manager, strip)
    body = desired_body(desired, observed, stamp)
    if observed is not None and contains(observed, body):
        return ObjectPlan(Action.UNCHANGED, body, manager, strip)
    return ObjectPlan(Action.APPLY, body, manager, strip)


def _owner_references_to_keep(observed: Obj | None) -> list[Obj] | None:
    """Foreign references are stripped; an opted-out object loses the Trainer's too."""
    if observed is None:
        return None
    refs = (observed.get("metadata") or {}).get("ownerReferences") or []
    keep = [] if opted_out(observed) else [r for r in refs if is_trainer_owner(r)]
    return keep if len(keep) != len(refs) else None


_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$")
_SUFFIX = {"": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "P": 1e15, "E": 1e18, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
           "Pi": 2.0**50, "Ei": 2.0**60}


def _quantity(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    match = _QUANTITY.match(str(value))
    if match is None:
        return None
    number, suffix = match.groups()
    try:
        base = float(number)
    except ValueError:
        return None
    if suffix and suffix[0] in "eE":
        return base * 10.0 ** int(suffix[1:])
    return base * _SUFFIX[suffix or ""]


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == []


_QUANTITY_KEYS = frozenset({"limits", "requests", "hard", "capacity"})


def contains(observed: Any, desired: Any, *, quantities: bool = False) -> bool:
    """Whether ``observed`` already holds every field of ``desired``.

    Maps are compared key by key (extra observed keys are server defaults or other managers'),
    lists element by element with equal length, and scalars by value; empty desired values
    match absent ones, and under ``limits``/``requests`` quantities compare numerically
    (``"1000m"`` equals ``"1"``, as the API server canonicalises them).
    """
    if isinstance(desired, dict):
        if not isinstance(observed, dict):
            return _empty(desired) and _empty(observed)
        return all(
            (key in observed and contains(observed[key], value,
                                          quantities=quantities or key in _QUANTITY_KEYS))
            or (key not in observed and _empty(value))
            for key, value in desired.items())
    if isinstance(desired, list):
        if not isinstance(observed, list):
            return _empty(desired) and _empty(observed)
        return len(observed) == len(desired) and all(
            contains(o, d, quantities=quantities)
            for o, d in zip(observed, desired, strict=True))
    if observed == desired and type(observed) is type(desired):
        return True
    if isinstance(desired, (int, float)) and isinstance(observed, (int, float)) \
            and not isinstance(desired, bool) and not isinstance(observed, bool):
        return float(desired) == float(observed)
    if quantities:
        left, right = _quantity(desired), _quantity(observed)
        return left is not None and right is not None and abs(left - right) <= 1e-9 * max(
            abs(left), abs(right), 1.0)
    return False
