"""Which labelled objects garbage collection deletes, and which types it may look at.

Objects are found by the ``platform.opendatahub.io/part-of=trainer`` label and judged by the
annotations the apply step stamps: an object from another release, another Trainer generation
or another Trainer instance is stale. With an empty stamp (Removed, or the Trainer is being
deleted) every stamped object is stale. Some types are never deleted this way: the operand
Namespace, CRDs and Leases; runtimes are deleted explicitly beforehand. Nor is an object another
controller or OLM manages, whatever labels it shares with ours
(:func:`functions.platform.core.coexistence.managed_elsewhere`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from functions.platform.core.coexistence import managed_elsewhere
from functions.trainer.core.api import PART_OF_LABEL, PART_OF_VALUE, PLATFORM_CONFIGMAP
from functions.trainer.core.apply import (
    ANNOTATION_GENERATION,
    ANNOTATION_NAME,
    ANNOTATION_TYPE,
    ANNOTATION_UID,
    ANNOTATION_VERSION,
    Stamp,
    object_id,
    opted_out,
)

Obj = dict[str, Any]
ObjectId = tuple[str, str, str, str]

TRAINER_GROUP = "trainer.kubeflow.org"
RUNTIME_KINDS = frozenset({"ClusterTrainingRuntime", "TrainingRuntime"})
# (group, kind) pairs never collected by the label sweep: protected types, runtimes (deleted
# explicitly) and objects controllers derive from ours, which copy our labels and annotations
# (their owners' deletion takes them along, and deleting them only makes controllers churn).
UNREMOVABLE: frozenset[tuple[str, str]] = frozenset({
    ("", "Namespace"),
    ("", "Pod"),
    ("", "Endpoints"),
    ("apps", "ReplicaSet"),
    ("apps", "ControllerRevision"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("coordination.k8s.io", "Lease"),
    ("", "Event"),
    ("events.k8s.io", "Event"),
    (TRAINER_GROUP, "ClusterTrainingRuntime"),
    (TRAINER_GROUP, "TrainingRuntime"),
})


@dataclass(frozen=True, slots=True)
class ApiType:
    """A discovered resource type: what the sweep needs to list and delete it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    verbs: frozenset[str]


def sweepable(api_type: ApiType) -> bool:
    """A type the label sweep lists and deletes: listable, deletable, not protected."""
    return {"list", "delete"} <= api_type.verbs and \
        (api_type.group, api_type.kind) not in UNREMOVABLE


def labelled(obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(PART_OF_LABEL) == PART_OF_VALUE


def stale_by_annotations(obj: Mapping[str, Any], stamp: Stamp | None) -> bool:
    """The annotation predicate; ``stamp=None`` means "nothing is current" (cleanup)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if not annotations:
        return False
    required = (ANNOTATION_VERSION, ANNOTATION_TYPE, ANNOTATION_GENERATION, ANNOTATION_UID)
    if any(not annotations.get(key) for key in required):
        return True
    if stamp is None:
        return True
    return bool(annotations[ANNOTATION_VERSION] != stamp.version
            or annotations[ANNOTATION_TYPE] != stamp.type
            or annotations[ANNOTATION_UID] != stamp.uid
            or annotations[ANNOTATION_GENERATION] != str(stamp.generation))


def stamped_by(obj: Mapping[str, Any], stamp: Stamp) -> bool:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(ANNOTATION_UID) == stamp.uid) and \
        annotations.get(ANNOTATION_NAME) == stamp.name


def collectable(obj: Mapping[str, Any], stamp: Stamp | None,
                desired: Collection[ObjectId] | None = None) -> bool:
    """Whether the sweep deletes ``obj``.

    ``desired`` (when known) adds one rule to the annotation predicate: an object this very
    Trainer stamped that is no longer rendered is stale too (e.g. a generated ConfigMap whose
    hashed name changed with an image override).
    """
    group, kind, _, name = object_id(obj)
    meta = obj.get("metadata") or {}
    if (group, kind) in UNREMOVABLE or not labelled(obj) or opted_out(obj) \
            or managed_elsewhere(obj):
        return False
    if meta.get("deletionTimestamp") or _controlled(meta):
        return False
    if kind == "ConfigMap" and name == PLATFORM_CONFIGMAP:
        return False
    if stale_by_annotations(obj, stamp):
        return True
    return stamp is not None and desired is not None and stamped_by(obj, stamp) \
        and object_id(obj) not in desired


def _controlled(meta: Mapping[str, Any]) -> bool:
    return any(ref.get("controller") for ref in meta.get("ownerReferences") or [])


def sweep_needed(observed: Collection[Mapping[str, Any]], stamp: Stamp) -> bool:
    """Whether a full sweep over every type is worth its cost this time.

    Objects of rendered types are judged on every reconcile; the other types can only hold
    stale objects after the stamp changed (upgrade, spec change, new instance), which shows on
    the rendered types' objects as a different stamp.
    """
    return any(collectable(obj, stamp) for obj in observed)


def runtime_finalizers_without_legacy(obj: Mapping[str, Any], finalizer: str) -> list[str] | None:
    """The finalizer list without ``finalizer``, or ``None`` when it is not there."""
    finalizers = list((obj.get("metadata") or {}).get("finalizers") or [])
    if finalizer not in finalizers:
        return None
    return [f for f in finalizers if f != finalizer]
