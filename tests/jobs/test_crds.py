"""The committed CRDs are what hack/gen_job_crds.py writes, and document our own fields."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CRDS = ["pytorchjobs", "tfjobs", "mxjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs"]
# The kinds upstream serves a scale subresource for (over their Workers).
SCALED = {"pytorchjobs": "pytorchReplicaSpecs", "paddlejobs": "paddleReplicaSpecs",
          "jaxjobs": "jaxReplicaSpecs"}


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_job_crds", REPO / "hack" / "gen_job_crds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_job_crds"] = module
    spec.loader.exec_module(module)
    return module


def _load(plural: str) -> dict[str, Any]:
    data = yaml.safe_load((REPO / "config" / "crd" / f"{plural}.kubeflow.org.yaml").read_text())
    assert isinstance(data, dict)
    return data


def _walk(schema: dict[str, Any], path: str,
          into_templates: bool = True) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    if not into_templates and path.endswith(".template"):
        return
    for name, child in (schema.get("properties") or {}).items():
        yield from _walk(child, f"{path}.{name}", into_templates)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        yield from _walk(extra, f"{path}.*", into_templates)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from _walk(items, f"{path}[]", into_templates)


def test_committed_crds_are_generated() -> None:
    assert _generator().main(["--check"]) == 0


@pytest.mark.parametrize("plural", CRDS)
def test_every_own_field_is_documented(plural: str) -> None:
    root = _load(plural)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    undocumented = [path for section in ("spec", "status")
                    for path, node in _walk(root["properties"][section], section, False)
                    if not node.get("description") and "anyOf" not in node]
    assert undocumented == []


@pytest.mark.parametrize("plural", CRDS)
def test_pod_templates_are_the_full_core_v1_schema(plural: str) -> None:
    """Every field of a PodTemplateSpec is typed, so unknown ones are pruned or rejected."""
    spec = _load(plural)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"]
    field = next(k for k in spec["properties"] if k.endswith("ReplicaSpecs"))
    template = spec["properties"][field]["additionalProperties"]["properties"]["template"]
    nodes = list(_walk(template, "template"))
    assert [p for p, n in nodes if n.get("x-kubernetes-preserve-unknown-fields")] == []
    paths = {p for p, _ in nodes}
    assert {"template.metadata.labels", "template.spec.nodeSelector",
            "template.spec.affinity.nodeAffinity", "template.spec.tolerations[].effect",
            "template.spec.containers[].resources.limits.*",
            "template.spec.containers[].env[].valueFrom.secretKeyRef.key",
            "template.spec.volumes[].persistentVolumeClaim.claimName",
            "template.spec.initContainers[].ports[].protocol"} <= paths
    containers = template["properties"]["spec"]["properties"]["containers"]
    assert (containers["x-kubernetes-list-type"], containers["x-kubernetes-list-map-keys"],
            containers["maxItems"]) == ("map", ["name"], 64)
    limit = containers["items"]["properties"]["resources"]["properties"]["limits"]
    assert limit["additionalProperties"]["x-kubernetes-int-or-string"] is True
    assert not [p for p, n in nodes if {"$ref", "allOf", "oneOf"} & n.keys()
                or any(k.startswith("x-kubernetes-patch") for k in n)]


@pytest.mark.parametrize("plural", CRDS)
def test_printer_columns_and_status(plural: str) -> None:
    version = _load(plural)["spec"]["versions"][0]
    assert [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]] == [
        ("State", ".status.conditions[-1:].type"), ("Age", ".metadata.creationTimestamp")]
    assert "status" in version["subresources"]
    if plural in SCALED:
        assert version["subresources"]["scale"] == {
            "specReplicasPath": f".spec.{SCALED[plural]}.Worker.replicas",
            "statusReplicasPath": ".status.replicaStatuses.Worker.active",
            "labelSelectorPath": ".status.replicaStatuses.Worker.selector"}
    else:
        assert "scale" not in version["subresources"]


def test_kustomization_lists_every_crd() -> None:
    listed = yaml.safe_load((REPO / "config" / "crd" / "kustomization.yaml").read_text())
    assert {f"{plural}.kubeflow.org.yaml" for plural in CRDS} <= set(listed["resources"])


def _without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def test_mpijob_serves_both_versions_with_one_schema() -> None:
    """v2beta1 (storage) and v1 prune and validate alike: the same types and rules, the
    fields of both APIs in each (only the v2beta1 copy's pod template docs are left out)."""
    versions = _load("mpijobs")["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in versions] == [
        ("v2beta1", True, True), ("v1", True, False)]
    schemas = [v["schema"]["openAPIV3Schema"] for v in versions]
    assert _without_descriptions(schemas[0]) == _without_descriptions(schemas[1])
    for schema in schemas:
        fields = schema["properties"]["spec"]["properties"]
        assert {"mainContainer", "cleanPodPolicy", "sshAuthMountPath", "runLauncherAsWorker",
                "slotsPerWorker", "runPolicy", "mpiReplicaSpecs"} <= fields.keys()
        assert fields["mainContainer"]["description"]
    rest = [{k: v for k, v in version.items() if k not in ("name", "storage", "schema")}
            for version in versions]
    assert rest[0] == rest[1]


@pytest.mark.parametrize("plural", CRDS)
def test_crds_fit_a_client_side_apply(plural: str) -> None:
    """``kubectl apply`` (not --server-side) keeps the whole object in an annotation, which
    may hold at most 256 KiB: a CRD above that cannot be installed with ``kubectl apply -k``."""
    compact = json.dumps(_load(plural), separators=(",", ":"))
    assert len(compact.encode()) < 256 * 1024
