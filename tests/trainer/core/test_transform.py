"""The namespace and part-of label transforms applied after kustomize."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from functions.trainer.core.transform import add_part_of_label, post_render, set_namespace

LABEL = "platform.opendatahub.io/part-of"
Obj = dict[str, Any]


def obj(kind: str, api_version: str = "v1", **rest: Any) -> Obj:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": kind.lower(), "namespace": "opendatahub"}, **rest}


def webhook_config(kind: str) -> Obj:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": "w"},
            "webhooks": [{"name": "a", "clientConfig": {"service": {"name": "s",
                                                                    "namespace": "opendatahub"}}},
                         {"name": "b", "clientConfig": {"url": "https://x"}}]}


@pytest.mark.parametrize(("given", "path", "expected"), [
    pytest.param(obj("ConfigMap"), ("metadata", "namespace"), "apps", id="namespaced"),
    pytest.param({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}},
                 ("metadata", "namespace"), "apps", id="namespace-created"),
    pytest.param({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
                  "metadata": {"name": "r"}}, ("metadata", "namespace"), "apps",
                 id="unknown-kind-is-namespaced"),
    pytest.param(webhook_config("ValidatingWebhookConfiguration"),
                 ("webhooks", 0, "clientConfig", "service", "namespace"), "apps",
                 id="validating-webhook-service"),
    pytest.param(webhook_config("MutatingWebhookConfiguration"),
                 ("webhooks", 0, "clientConfig", "service", "namespace"), "apps",
                 id="mutating-webhook-service"),
    pytest.param({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                  "metadata": {"name": "c"},
                  "spec": {"conversion": {"webhook": {"clientConfig": {
                      "service": {"namespace": "x"}}}}}},
                 ("spec", "conversion", "webhook", "clientConfig", "service", "namespace"),
                 "apps", id="crd-conversion-service"),
])
def test_set_namespace_moves(given: Obj, path: tuple[Any, ...], expected: str) -> None:
    value: Any = set_namespace(given, "apps")
    for step in path:
        value = value[step]
    assert value == expected


@pytest.mark.parametrize("kind", [
    pytest.param("ClusterRole", id="clusterrole"),
    pytest.param("ClusterRoleBinding", id="clusterrolebinding"),
    pytest.param("CustomResourceDefinition", id="crd"),
    pytest.param("ValidatingWebhookConfiguration", id="webhook-config"),
    pytest.param("ClusterTrainingRuntime", id="cluster-training-runtime"),
    pytest.param("Namespace", id="namespace"),
])
def test_set_namespace_leaves_cluster_scoped_kinds(kind: str) -> None:
    given = {"apiVersion": "x/v1", "kind": kind, "metadata": {"name": "n"}}
    assert "namespace" not in set_namespace(given, "apps")["metadata"]


def test_binding_subjects_only_service_accounts_move() -> None:
    binding: Obj = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "b"},
               "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "old"},
                            {"kind": "Group", "name": "system:authenticated"},
                            {"kind": "User", "name": "u"}]}
    moved = set_namespace(binding, "apps")
    assert moved["subjects"] == [
        {"kind": "ServiceAccount", "name": "sa", "namespace": "apps"},
        {"kind": "Group", "name": "system:authenticated"}, {"kind": "User", "name": "u"}]
    assert binding["subjects"][0]["namespace"] == "old"


def test_webhook_url_client_config_untouched() -> None:
    moved = set_namespace(webhook_config("ValidatingWebhookConfiguration"), "apps")
    assert moved["webhooks"][1]["clientConfig"] == {"url": "https://x"}


@pytest.mark.parametrize(("given", "labelled_paths"), [
    pytest.param(obj("Service"), [("metadata", "labels")], id="service"),
    pytest.param({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",
                                                                      "labels": None}},
                 [("metadata", "labels")], id="null-labels"),
    pytest.param({"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "d", "labels": {"app": "x"}},
                  "spec": {"selector": {"matchLabels": {"app": "x"}},
                           "template": {"metadata": {"labels": {"app": "x"}}}}},
                 [("metadata", "labels"), ("spec", "selector", "matchLabels"),
                  ("spec", "template", "metadata", "labels")], id="deployment-selector"),
    pytest.param({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}},
                 [("metadata", "labels"), ("spec", "selector", "matchLabels"),
                  ("spec", "template", "metadata", "labels")], id="deployment-created-paths"),
])
def test_add_part_of_label(given: Obj, labelled_paths: list[tuple[str, ...]]) -> None:
    before = copy.deepcopy(given)
    out = add_part_of_label(given)
    for path in labelled_paths:
        value: Any = out
        for step in path:
            value = value[step]
        assert value[LABEL] == "trainer"
    assert given == before


def test_statefulset_selector_not_labelled() -> None:
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"},
           "spec": {"selector": {"matchLabels": {"app": "x"}}}}
    assert add_part_of_label(sts)["spec"]["selector"]["matchLabels"] == {"app": "x"}


@pytest.mark.parametrize(("namespace", "drop", "expected"), [
    pytest.param("apps", False, [("ConfigMap", "apps"), ("ClusterRole", None),
                                 ("Service", "apps")], id="namespace-keep-configmaps"),
    pytest.param(None, True, [("ClusterRole", None), ("Service", "opendatahub")],
                 id="no-namespace-drop-configmaps"),
])
def test_post_render(namespace: str | None, drop: bool,
                     expected: list[tuple[str, str | None]]) -> None:
    rendered = [obj("ConfigMap"),
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                 "metadata": {"name": "r"}},
                None, {"not": "an object"}, obj("Service")]
    out = post_render(rendered, namespace, drop_configmaps=drop)
    assert [(o["kind"], o["metadata"].get("namespace")) for o in out] == expected
    assert all(o["metadata"]["labels"][LABEL] == "trainer" for o in out)
