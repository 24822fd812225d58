"""Apply YAML manifests to a cluster and wait for CRDs to be served.

Used by the dev run and the tests to install this project's CRDs and admission policies the
way ``kubectl apply --server-side`` would, with one field manager.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from functions.kube import resources
from functions.kube.client import KubeClient

FIELD_MANAGER = "odh-training-install"


def load_documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every object in the given YAML files (directories are read recursively, in order),
    skipping kustomization files."""
    objects: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(path.rglob("*.yaml")) if path.is_dir() else [path]
        for file in files:
            if file.name == "kustomization.yaml":
                continue
            for doc in yaml.safe_load_all(file.read_text()):
                if isinstance(doc, dict) and doc.get("kind"):
                    objects.append(doc)
    return objects


def apply_objects(kube: KubeClient, objects: Iterable[dict[str, Any]],
                  field_manager: str = FIELD_MANAGER, timeout: float = 30.0) -> None:
    """SSA every object; CRDs first, then wait until they are established and served."""
    ordered = sorted(objects, key=lambda o: o["kind"] != "CustomResourceDefinition")
    crds: list[dict[str, Any]] = []
    for obj in ordered:
        if obj["kind"] != "CustomResourceDefinition" and crds:
            wait_for_crds(kube, crds, timeout)
            crds = []
        kube.apply(obj, field_manager)
        if obj["kind"] == "CustomResourceDefinition":
            crds.append(obj)
    if crds:
        wait_for_crds(kube, crds, timeout)


def wait_for_crds(kube: KubeClient, crds: list[dict[str, Any]], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    for crd in crds:
        name = crd["metadata"]["name"]
        while True:
            current = kube.get(resources.CRDS, name) or {}
            conditions = (current.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in conditions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established after {timeout}s")
            time.sleep(0.05)
