"""Post-render transforms: put rendered objects in the operand namespace and label them.

Kustomize renders the upstream trees as shipped; these two steps make the objects ours. They
mirror kustomize's namespace and label transformers as the operator configures them: the
namespace goes on namespaced objects, ServiceAccount subjects of bindings and webhook service
references; the ``platform.opendatahub.io/part-of`` label goes on every object and, for
Deployments, on the selector and the pod template too.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from functions.trainer.core.api import PART_OF_LABEL, PART_OF_VALUE

Obj = dict[str, Any]

# Kinds that never take a namespace (the built-in cluster-scoped kinds plus the ones rendered).
CLUSTER_SCOPED_KINDS = frozenset({
    "APIService", "CertificateSigningRequest", "ClusterRole", "ClusterRoleBinding",
    "ClusterTrainingRuntime", "ComponentStatus", "CSIDriver", "CSINode",
    "CustomResourceDefinition", "FlowSchema", "IngressClass", "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding", "MutatingWebhookConfiguration", "Namespace", "Node",
    "PersistentVolume", "PodSecurityPolicy", "PriorityClass", "PriorityLevelConfiguration",
    "RuntimeClass", "SelfSubjectAccessReview", "SelfSubjectRulesReview", "StorageClass",
    "SubjectAccessReview", "TokenReview", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration", "VolumeAttachment",
})
WEBHOOK_CONFIGURATION_KINDS = frozenset({
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"})
BINDING_KINDS = frozenset({"RoleBinding", "ClusterRoleBinding"})


def set_namespace(obj: Obj, namespace: str) -> Obj:
    """A copy of ``obj`` moved into ``namespace`` (the input is not modified)."""
    out = copy.deepcopy(obj)
    _move(out, namespace)
    return out


def _move(out: Obj, namespace: str) -> None:
    kind = out.get("kind", "")
    if kind not in CLUSTER_SCOPED_KINDS:
        out.setdefault("metadata", {})["namespace"] = namespace
    if kind in BINDING_KINDS:
        for subject in out.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace
    if kind in WEBHOOK_CONFIGURATION_KINDS:
        for webhook in out.get("webhooks") or []:
            service = (webhook.get("clientConfig") or {}).get("service")
            if isinstance(service, dict):
                service["namespace"] = namespace
    if kind == "CustomResourceDefinition":
        conversion = (out.get("spec") or {}).get("conversion") or {}
        service = ((conversion.get("webhook") or {}).get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service["namespace"] = namespace


def add_part_of_label(obj: Obj) -> Obj:
    """A copy of ``obj`` labelled part-of=trainer (Deployment selector and template included)."""
    out = copy.deepcopy(obj)
    _label_object(out)
    return out


def _label_object(out: Obj) -> None:
    _label(out.setdefault("metadata", {}))
    if out.get("kind") == "Deployment":
        spec = out.setdefault("spec", {})
        spec.setdefault("selector", {}).setdefault("matchLabels", {})[PART_OF_LABEL] = \
            PART_OF_VALUE
        _label(spec.setdefault("template", {}).setdefault("metadata", {}))


def _label(meta: Obj) -> None:
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        labels = meta["labels"] = {}
    labels[PART_OF_LABEL] = PART_OF_VALUE


def post_render(objs: Iterable[Any], namespace: str | None, *,
                drop_configmaps: bool = False) -> list[Obj]:
    """The operator's post-build pipeline: filter, then namespace (if any), then label."""
    out: list[Obj] = []
    for obj in objs:
        if not isinstance(obj, dict) or not obj.get("kind"):
            continue
        if drop_configmaps and obj.get("kind") == "ConfigMap":
            continue
        item = copy.deepcopy(obj)
        if namespace:
            _move(item, namespace)
        _label_object(item)
        out.append(item)
    return out
