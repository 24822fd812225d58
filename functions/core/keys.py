"""Identity of the object a handler works on, and the pure rules that map children to it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    """``apiVersion``/``kind`` plus namespace (``""`` when cluster-scoped) and name."""

    api_version: str
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind}:{where}{self.name}"

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectKey:
        meta = obj.get("metadata") or {}
        return cls(str(obj.get("apiVersion", "")), str(obj.get("kind", "")),
                   str(meta.get("namespace") or ""), str(meta.get("name", "")))


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def controller_owner(obj: Mapping[str, Any], api_version: str, kind: str) -> ObjectKey | None:
    """The parent named by ``obj``'s controller ownerReference, if it is of the given kind.

    The owner's version may differ from ``api_version`` (a stored object outlives an API
    version), so only the group and kind must match.
    """
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if (ref.get("controller") and ref.get("kind") == kind
                and _group(str(ref.get("apiVersion", ""))) == _group(api_version)):
            return ObjectKey(api_version, kind, str(meta.get("namespace") or ""), str(ref["name"]))
    return None


def labelled_parent(obj: Mapping[str, Any], label: str, api_version: str,
                    kind: str) -> ObjectKey | None:
    """The parent named by a label on ``obj`` (same namespace as ``obj``)."""
    meta = obj.get("metadata") or {}
    name = (meta.get("labels") or {}).get(label)
    if not name:
        return None
    return ObjectKey(api_version, kind, str(meta.get("namespace") or ""), str(name))
