"""Translate an ApiServerSource object into the receive adapter's environment.

In a cluster, Knative's source controller does this translation and runs the adapter as a
Deployment; locally we run the same adapter binary as a process and must do it ourselves. The
rules follow the source controller: resources become group/version/resource triples whose plural
is *guessed* from the kind (as Knative does), an empty ``namespaceSelector`` means all
namespaces, and ``ceOverrides`` become ``K_CE_OVERRIDES``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def guess_plural(kind: str) -> str:
    """Knative's (and apimachinery's) naive kind → resource guess."""
    lower = kind.lower()
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


def _selector_string(selector: Mapping[str, Any] | None) -> str:
    """A LabelSelector object as the string form the adapter expects."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        elif op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        else:
            raise ValueError(f"unsupported selector operator {op!r}")
    return ",".join(parts)


def source_config(source: Mapping[str, Any]) -> dict[str, Any]:
    """The ``K_SOURCE_CONFIG`` document for an ``ApiServerSource`` object."""
    spec = source.get("spec") or {}
    namespace = (source.get("metadata") or {}).get("namespace") or "default"
    resources = []
    for res in spec.get("resources") or []:
        group, _, version = str(res["apiVersion"]).rpartition("/")
        entry: dict[str, Any] = {"gvr": {"Group": group, "Version": version,
                                         "Resource": guess_plural(str(res["kind"]))}}
        label_selector = _selector_string(res.get("selector"))
        if label_selector:
            entry["selector"] = label_selector
        resources.append(entry)
    selector = spec.get("namespaceSelector")
    config: dict[str, Any] = {
        "namespaces": [] if selector is not None else [namespace],
        "allNamespaces": selector is not None and not selector,
        "resources": resources,
        "mode": spec.get("mode") or "Reference",
    }
    if selector:
        raise ValueError("only an empty namespaceSelector (all namespaces) is supported locally")
    if spec.get("owner"):
        config["owner"] = spec["owner"]
    return config


def adapter_environment(source: Mapping[str, Any], sink: str, kubeconfig: str) -> dict[str, str]:
    """Environment variables for ``apiserver_receive_adapter`` run outside a cluster."""
    meta = source.get("metadata") or {}
    env = {
        "K_SINK": sink,
        "K_SOURCE_CONFIG": json.dumps(source_config(source), separators=(",", ":")),
        "NAME": str(meta.get("name", "apiserversource")),
        "NAMESPACE": str(meta.get("namespace") or "default"),
        "SYSTEM_NAMESPACE": "knative-eventing",
        "METRICS_DOMAIN": "knative.dev/eventing",
        "K_LOGGING_CONFIG": "{}",
        "K_OBSERVABILITY_CONFIG": "{}",
        "KUBECONFIG": kubeconfig,
        "K_SINK_TIMEOUT": "30",
    }
    overrides = (source.get("spec") or {}).get("ceOverrides")
    if overrides:
        env["K_CE_OVERRIDES"] = json.dumps(overrides, separators=(",", ":"))
    return env
