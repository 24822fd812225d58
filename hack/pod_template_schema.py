"""The core/v1 PodTemplateSpec as a CRD (structural) schema, from the Kubernetes OpenAPI v3 of
the version the test binaries pin, so job CRDs prune or reject unknown template fields like
upstream's and ``kubectl explain`` documents every field.

``hack/k8s-openapi/core-v1-<version>.json`` holds the definitions PodTemplateSpec needs, cut
from ``api/openapi-spec/v3/api__v1_openapi.json`` of the ``k8s.io/kubernetes`` module;
``python hack/pod_template_schema.py --refresh`` cuts it again (needs Go and the module, which
``hack/k8s-testbin`` requires). Turning it into a CRD schema needs neither.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

Schema = dict[str, Any]

HERE = Path(__file__).resolve().parent
K8S_VERSION = "v1.35.4"   # hack/ensure-testbin.sh builds this version
SOURCE = HERE / "k8s-openapi" / f"core-v1-{K8S_VERSION}.json"
ROOT = "io.k8s.api.core.v1.PodTemplateSpec"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# Extensions a CRD schema may carry; the strategic-merge-patch and union markers it may not.
KEPT_EXTENSIONS = ("x-kubernetes-list-type", "x-kubernetes-list-map-keys",
                   "x-kubernetes-map-type")
# What a pod template's metadata keeps (what the controller copies onto pods).
TEMPLATE_META = ("labels", "annotations", "finalizers")


def _name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _closure(schemas: dict[str, Schema], name: str, into: dict[str, Schema]) -> None:
    if name in into:
        return
    into[name] = schemas[name]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                _closure(schemas, _name(node["$ref"]), into)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(schemas[name])


def refresh() -> None:
    """Cut the definitions PodTemplateSpec needs out of the pinned module's OpenAPI."""
    module = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"],
                            cwd=HERE / "k8s-testbin", capture_output=True, text=True,
                            check=True).stdout.strip()
    spec = json.loads((Path(module) / "api" / "openapi-spec" / "v3" /
                       "api__v1_openapi.json").read_text())
    needed: dict[str, Schema] = {}
    _closure(spec["components"]["schemas"], ROOT, needed)
    SOURCE.parent.mkdir(exist_ok=True)
    SOURCE.write_text(json.dumps(dict(sorted(needed.items())), indent=1, sort_keys=True) + "\n")


class _Converter:
    def __init__(self, definitions: dict[str, Schema]) -> None:
        self.definitions = definitions

    def ref(self, name: str, description: str | None) -> Schema:
        if name == QUANTITY:
            out: Schema = {"anyOf": [{"type": "integer"}, {"type": "string"}],
                           "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|"
                                      r"[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|"
                                      r"(\.[0-9]+))))?$",
                           "x-kubernetes-int-or-string": True}
        elif name == INT_OR_STRING:
            out = {"anyOf": [{"type": "integer"}, {"type": "string"}],
                   "x-kubernetes-int-or-string": True}
        elif name == OBJECT_META:
            meta = self.definitions[name]["properties"]
            out = {"type": "object",
                   "properties": {k: self.node(meta[k]) for k in TEMPLATE_META}}
        else:
            out = self.node(self.definitions[name])
        if description is not None:
            out["description"] = description
        elif "description" not in out and "description" in self.definitions[name]:
            out["description"] = self.definitions[name]["description"]
        return out

    def node(self, schema: Schema) -> Schema:
        if "$ref" in schema:
            return self.ref(_name(schema["$ref"]), schema.get("description"))
        if "allOf" in schema:
            [only] = schema["allOf"]
            return self.ref(_name(only["$ref"]), schema.get("description"))
        out: Schema = {}
        for key in ("description", "type", "format", "enum", "required"):
            if key in schema:
                out[key] = schema[key]
        for key in KEPT_EXTENSIONS:
            if key in schema:
                out[key] = schema[key]
        if "properties" in schema:
            out["properties"] = {k: self.node(v) for k, v in schema["properties"].items()}
            out.setdefault("type", "object")
        if "additionalProperties" in schema:
            out["additionalProperties"] = self.node(schema["additionalProperties"])
        if "items" in schema:
            items = self.node(schema["items"])
            # A list-map key must be required or defaulted (protocol defaults to TCP).
            for key in schema.get("x-kubernetes-list-map-keys") or []:
                prop = (schema_of(self.definitions, schema["items"]).get("properties")
                        or {}).get(key) or {}
                if key not in items.get("required", []) and "default" in prop:
                    items["properties"][key]["default"] = prop["default"]
            out["items"] = items
        return out


def schema_of(definitions: dict[str, Schema], schema: Schema) -> Schema:
    """The definition a (possibly wrapped) reference names, or the schema itself."""
    if "allOf" in schema:
        return definitions[_name(schema["allOf"][0]["$ref"])]
    if "$ref" in schema:
        return definitions[_name(schema["$ref"])]
    return schema


def _first_sentence(text: str) -> str:
    match = re.match(r"(.+?\.)(\s|$)", text, re.S)
    return " ".join((match.group(1) if match else text).split())


def _shorten(node: Any) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            node["description"] = _first_sentence(node["description"])
        for value in node.values():
            _shorten(value)
    elif isinstance(node, list):
        for value in node:
            _shorten(value)


def pod_template_spec() -> Schema:
    """PodTemplateSpec, every reference inlined, as a structural CRD schema. Descriptions keep
    their first sentence: whole, they would make each CRD too large for a client-side
    ``kubectl apply`` (its last-applied annotation is limited to 256 KiB)."""
    definitions = json.loads(SOURCE.read_text())
    schema = _Converter(definitions).ref(ROOT, None)
    _shorten(schema)
    return schema


if __name__ == "__main__":
    if sys.argv[1:] != ["--refresh"]:
        print("usage: pod_template_schema.py --refresh", file=sys.stderr)
        sys.exit(2)
    refresh()
