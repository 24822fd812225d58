"""config/rbac: the rules are explicit and commented, and the reconcile identity may create
every role the Trainer renders (RBAC escalation prevention).

The second point is checked on the objects the Trainer really applies: the upstream manifests
(the fetch script's cached tree, ``rhoai`` overlay) and this repository's runtimes and
ImageStreams, rendered by the Trainer's own renderer with the real kustomize.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from functions.platform.core.coexistence import JOB_CRDS
from functions.trainer.provision import render_all
from functions.trainer.render import Sources
from tests.deploy.support import (
    REPO,
    Permission,
    build,
    find,
    permissions,
    uncovered,
)

RBAC = REPO / "config" / "rbac"
RECONCILE_ROLES = ("odh-training-reconcile", "odh-training-reconcile-delegated")
# Verbs the API server knows for resources; escalate/bind/impersonate are never granted.
ORDINARY_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete",
                  "deletecollection"}


def trainer_sources(upstream: Path) -> Sources:
    return Sources(trainer=upstream, runtimes=REPO / "manifests" / "runtimes",
                   imagestreams=REPO / "manifests" / "imagestreams")


@pytest.fixture(scope="module")
def rendered(bin_dir: Path, upstream_manifests: Path) -> list[dict[str, Any]]:
    """What the Trainer applies on OpenShift (the larger set) into ``opendatahub``."""
    return render_all(trainer_sources(upstream_manifests), "opendatahub", True, {})


@pytest.fixture(scope="module")
def rbac(bin_dir: Path) -> list[dict[str, Any]]:
    return build(bin_dir / "kustomize", "config/rbac")


def rendered_roles(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] in ("ClusterRole", "Role")]


@pytest.mark.parametrize(("required", "held", "missing"), [
    pytest.param([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
                 [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
                 [], id="superset-covers"),
    pytest.param([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
                 [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
                 [Permission("", "pods", "list")], id="missing-verb"),
    pytest.param([{"apiGroups": ["apps"], "resources": ["pods"], "verbs": ["get"]}],
                 [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
                 [Permission("apps", "pods", "get")], id="other-group"),
    pytest.param([{"apiGroups": ["x"], "resources": ["a/status"], "verbs": ["get"]}],
                 [{"apiGroups": ["x"], "resources": ["a"], "verbs": ["get"]}],
                 [Permission("x", "a/status", "get")], id="subresource-is-separate"),
    pytest.param([{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["n"],
                   "verbs": ["get"]}],
                 [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
                 [], id="unnamed-covers-named"),
    pytest.param([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
                 [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["n"],
                   "verbs": ["get"]}],
                 [Permission("", "configmaps", "get")], id="named-does-not-cover-unnamed"),
    pytest.param([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}], [],
                 [Permission("", "/metrics", "get")], id="non-resource-url"),
])
def test_coverage_follows_rbac_semantics(required: list[dict[str, Any]],
                                         held: list[dict[str, Any]],
                                         missing: list[Permission]) -> None:
    assert uncovered(required, held) == missing


def test_trainer_renders_the_roles_it_must_be_allowed_to_create(
        rendered: list[dict[str, Any]]) -> None:
    names = {o["metadata"]["name"] for o in rendered_roles(rendered)}
    assert {"kubeflow-trainer-controller-manager", "training-admin", "training-edit",
            "training-view", "kubeflow-trainer-public"} <= names


def test_reconcile_identity_holds_every_permission_of_every_rendered_role(
        rendered: list[dict[str, Any]], rbac: list[dict[str, Any]]) -> None:
    held = [rule for name in RECONCILE_ROLES
            for rule in find(rbac, "ClusterRole", name)["rules"]]
    missing = {o["metadata"]["name"]: uncovered(o.get("rules") or [], held)
               for o in rendered_roles(rendered)}
    assert {k: v for k, v in missing.items() if v} == {}


def test_delegated_role_holds_nothing_beyond_the_rendered_roles(
        rendered: list[dict[str, Any]], rbac: list[dict[str, Any]]) -> None:
    """Every permission held only for delegation appears in some rendered role."""
    wanted = {(p.group, p.resource, p.verb) for o in rendered_roles(rendered)
              for p in permissions(o.get("rules") or [])}
    delegated = find(rbac, "ClusterRole", "odh-training-reconcile-delegated")["rules"]
    extra = {(p.group, p.resource, p.verb) for p in permissions(delegated)} - wanted
    assert extra == set()


def test_no_role_uses_wildcards_or_privileged_verbs(rbac: list[dict[str, Any]]) -> None:
    for role in (o for o in rbac if o["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in (rule.get(field) or []), (role["metadata"]["name"], rule)
            assert set(rule["verbs"]) <= ORDINARY_VERBS, (role["metadata"]["name"], rule)


@pytest.mark.parametrize("path", sorted(RBAC.glob("*_role.yaml")), ids=lambda p: p.name)
def test_every_rule_is_explained_by_a_comment(path: Path) -> None:
    lines = path.read_text().splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("  - apiGroups:")]
    assert rules, "no rules found"
    unexplained = [lines[i] for i in rules if not lines[i - 1].lstrip().startswith("#")]
    assert unexplained == []
    assert sum(len(d.get("rules") or []) for d in yaml.safe_load_all(path.read_text())
               if d) == len(rules), "every rule must start with '  - apiGroups:'"


def test_each_function_has_its_own_bound_identity(rbac: list[dict[str, Any]]) -> None:
    """Each function's roles are bound to its own ServiceAccount; the delivery check's
    (delivery_auth_role.yaml) to every receiver's, the dead-letter sink's included."""
    bindings = {(b["kind"], b["roleRef"]["name"], s["name"]) for b in rbac
                if b["kind"] in ("ClusterRoleBinding", "RoleBinding") for s in b["subjects"]}
    assert bindings == {
        ("ClusterRoleBinding", "odh-training-reconcile", "odh-training-reconcile"),
        ("ClusterRoleBinding", "odh-training-reconcile-delegated", "odh-training-reconcile"),
        ("ClusterRoleBinding", "odh-training-gc", "odh-training-gc"),
        ("ClusterRoleBinding", "odh-training-status", "odh-training-status"),
        ("RoleBinding", "odh-training-reconcile", "odh-training-reconcile"),
        ("RoleBinding", "odh-training-reconcile-lease", "odh-training-reconcile"),
        ("RoleBinding", "odh-training-gc", "odh-training-gc"),
        ("RoleBinding", "odh-training-status", "odh-training-status"),
        *((kind, "odh-training-delivery-auth", f"odh-training-{identity}")
          for kind in ("ClusterRoleBinding", "RoleBinding")
          for identity in ("reconcile", "gc", "status", "dead-letters")),
        # the lifecycle's senders (lifecycle_role.yaml): each its own tokens only
        *(binding for identity in ("gc", "status") for binding in (
            ("ClusterRoleBinding", "odh-training-lifecycle", f"odh-training-{identity}"),
            ("RoleBinding", f"odh-training-{identity}-token", f"odh-training-{identity}"))),
        # wakes (wake_role.yaml): one Role of PingSources in the namespace, bound to each
        *(("RoleBinding", "odh-training-wakes", f"odh-training-{identity}")
          for identity in ("reconcile", "gc", "status"))}
    # The dead-letter sink's token is for its delivery check's TokenReviews and nothing else.
    dead_letters = find(rbac, "ServiceAccount", "odh-training-dead-letters")
    assert dead_letters.get("automountServiceAccountToken", True) is True


# Rendered cluster-scoped kinds that reconcile applies and gc deletes only by name.
NAMED = {("rbac.authorization.k8s.io", "clusterroles"): "ClusterRole",
         ("rbac.authorization.k8s.io", "clusterrolebindings"): "ClusterRoleBinding",
         ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"):
             "MutatingWebhookConfiguration",
         ("admissionregistration.k8s.io", "validatingwebhookconfigurations"):
             "ValidatingWebhookConfiguration",
         ("apiextensions.k8s.io", "customresourcedefinitions"): "CustomResourceDefinition"}


def named_permissions(rbac: list[dict[str, Any]], role: str) -> set[Permission]:
    return {p for p in permissions(find(rbac, "ClusterRole", role)["rules"]) if p.name}


@pytest.mark.parametrize(("role", "verbs", "kinds"), [
    pytest.param("odh-training-reconcile", ("create", "patch"), set(NAMED), id="reconcile"),
    pytest.param("odh-training-gc", ("delete",),
                 set(NAMED) - {("apiextensions.k8s.io", "customresourcedefinitions")}, id="gc"),
])
def test_every_rendered_cluster_object_is_named_in_the_rules(
        rendered: list[dict[str, Any]], rbac: list[dict[str, Any]], role: str,
        verbs: tuple[str, ...], kinds: set[tuple[str, str]]) -> None:
    """An upstream release that adds or renames one fails here, not in a cluster."""
    held = named_permissions(rbac, role)
    wanted = {Permission(group, resource, verb, o["metadata"]["name"])
              for (group, resource) in kinds for o in rendered
              if o["kind"] == NAMED[(group, resource)] for verb in verbs}
    assert wanted
    assert wanted - held == set()


def test_namespaced_rendered_kinds_are_granted_only_in_the_namespace(
        rendered: list[dict[str, Any]], rbac: list[dict[str, Any]]) -> None:
    """What the Trainer renders into its namespace, reconcile writes and gc deletes through
    Roles; cluster-wide they hold no delete of those kinds (jobs' Services and pods aside)."""
    kinds = {o["kind"] for o in rendered if o["metadata"].get("namespace")}
    assert {"Deployment", "ServiceAccount", "Role", "RoleBinding", "Secret"} <= kinds
    for name in ("odh-training-reconcile", "odh-training-gc"):
        cluster = {(p.group, p.resource) for p in permissions(
            find(rbac, "ClusterRole", name)["rules"]) if p.verb == "delete" and not p.name}
        assert cluster & {("apps", "deployments"), ("", "serviceaccounts"), ("", "secrets"),
                          ("", "configmaps"), ("rbac.authorization.k8s.io", "roles"),
                          ("rbac.authorization.k8s.io", "rolebindings")} == set(), name
        role = {(p.group, p.resource) for p in permissions(find(rbac, "Role", name)["rules"])
                if p.verb == "delete"}
        assert {("apps", "deployments"), ("", "secrets"),
                ("rbac.authorization.k8s.io", "roles")} <= role, name


# What the job handlers read to know whether the platform's training operator is active
# (functions/jobs/coexistence.py): its Deployment by label in every namespace, the
# DataScienceClusters, the job CRDs by name.
JOB_COEXISTENCE_READS = [
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]},
    {"apiGroups": ["datasciencecluster.opendatahub.io"], "resources": ["datascienceclusters"],
     "verbs": ["list"]},
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
     "resourceNames": list(JOB_CRDS), "verbs": ["get"]},
]


def cluster_rules(rbac: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    return list(find(rbac, "ClusterRole", role)["rules"])


@pytest.mark.parametrize("role", ["odh-training-reconcile", "odh-training-gc",
                                  "odh-training-status"])
def test_each_job_function_may_read_what_conflicts_with_the_jobs(
        rbac: list[dict[str, Any]], role: str) -> None:
    assert uncovered(JOB_COEXISTENCE_READS, cluster_rules(rbac, role)) == []


@pytest.mark.parametrize(("role", "denied"), [
    pytest.param("odh-training-gc", [Permission("apiextensions.k8s.io",
                                                "customresourcedefinitions", "get")],
                 id="gc-gets-crds-only-by-name"),
    pytest.param("odh-training-status", [
        Permission("apiextensions.k8s.io", "customresourcedefinitions", "get"),
        Permission("apiextensions.k8s.io", "customresourcedefinitions", "list"),
        Permission("apps", "deployments", "get"),
        Permission("apps", "deployments", "watch")], id="status-lists-deployments-only"),
])
def test_the_coexistence_reads_grant_no_more(rbac: list[dict[str, Any]], role: str,
                                             denied: list[Permission]) -> None:
    required = [{"apiGroups": [p.group], "resources": [p.resource], "verbs": [p.verb]}
                for p in denied]
    assert uncovered(required, cluster_rules(rbac, role)) == denied
