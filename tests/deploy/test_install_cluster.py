"""Against the local API server, with the Knative Serving, Eventing and JobSet CRDs installed
from their Go modules (the test bin dir) and this project's CRDs:

* every object of every install kustomization passes a server-side dry-run apply;
* each function's ServiceAccount (and the training API's) is allowed what its handlers do and
  denied representative writes it has no use for (SubjectAccessReview);
* the reconcile ServiceAccount, with its own token, may create every ClusterRole, Role and
  binding the Trainer renders, so RBAC escalation prevention does not stop a reconcile, while
  the gc ServiceAccount may not (the check is real).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from functions.cluster.manifests import apply_objects, load_documents
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.config import from_kubeconfig
from functions.kube.resources import Resource
from functions.trainer import kinds
from functions.trainer.provision import render_all
from tests.deploy.support import INSTALLS, build
from tests.deploy.test_rbac import trainer_sources

Obj = dict[str, Any]
NAMESPACE = "opendatahub"
MANAGER = "odh-training-install"
SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io", "v1", "subjectaccessreviews",
                                  "SubjectAccessReview", namespaced=False)


@pytest.fixture(scope="module")
def installed_crds(kube: KubeClient, crds: None, bin_dir: Path) -> None:
    third_party = bin_dir / "crds"
    apply_objects(kube, load_documents([third_party / "serving", third_party / "eventing",
                                        third_party / "jobset"]), MANAGER, timeout=60)


@pytest.fixture(scope="module")
def product_namespace(kube: KubeClient) -> str:
    try:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                    res=resources.NAMESPACES)
    except ApiError as exc:
        if exc.status != 409:
            raise
    return NAMESPACE


@pytest.fixture(scope="module")
def rbac_installed(kube: KubeClient, bin_dir: Path, product_namespace: str) -> None:
    apply_objects(kube, build(bin_dir / "kustomize", "config/rbac"), MANAGER)


def _describe(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace') or ''}/{meta['name']}"


@pytest.mark.parametrize("directory", INSTALLS)
def test_every_object_passes_a_server_side_dry_run(
        kube: KubeClient, bin_dir: Path, installed_crds: None, product_namespace: str,
        directory: str) -> None:
    objs = build(bin_dir / "kustomize", directory)
    refused: dict[str, str] = {}
    for obj in objs:
        try:
            kube.apply(obj, MANAGER, dry_run=True)
        except ApiError as exc:
            refused[_describe(obj)] = str(exc)
    assert refused == {}
    assert {o["kind"] for o in objs} >= {"CustomResourceDefinition", "ClusterRole", "Broker",
                                         "ApiServerSource", "PingSource", "ServiceAccount",
                                         "Service"}


def test_dry_run_rejects_what_the_schemas_forbid(kube: KubeClient, bin_dir: Path,
                                                 installed_crds: None,
                                                 product_namespace: str) -> None:
    """The dry run is a real check: a Knative Service without containers is refused."""
    objs = build(bin_dir / "kustomize", "config/serving")
    broken = dict(objs[0])
    broken["spec"] = {"template": {"spec": {"containerConcurrency": 8}}}
    with pytest.raises(ApiError) as refused:
        kube.apply(broken, MANAGER, dry_run=True)
    assert refused.value.status == 422
    assert "containers" in refused.value.message


# -- SubjectAccessReview --------------------------------------------------------------------

def can(kube: KubeClient, function: str, verb: str, group: str, resource: str,
        namespace: str = "team-a", name: str = "", subresource: str = "") -> bool:
    attributes = {"verb": verb, "group": group, "resource": resource,
                  "subresource": subresource, "name": name, "namespace": namespace}
    review = kube.create({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
        "spec": {"user": f"system:serviceaccount:{NAMESPACE}:odh-training-{function}",
                 "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}",
                            "system:authenticated"],
                 "resourceAttributes": attributes}}, res=SUBJECT_ACCESS_REVIEWS)
    return bool(review["status"].get("allowed"))


TRAINERS = "components.platform.opendatahub.io"
KUBEFLOW = "kubeflow.org"
TRAINER_API = "trainer.kubeflow.org"
# (function, verb, group, resource, subresource, name): what the handlers call.
NEEDED = [
    ("reconcile", "patch", TRAINERS, "trainers", "", "default-trainer"),
    ("reconcile", "patch", TRAINERS, "trainers", "status", "default-trainer"),
    ("reconcile", "create", "", "namespaces", "", ""),
    ("reconcile", "get", "config.openshift.io", "clusterversions", "", "version"),
    ("reconcile", "create", "rbac.authorization.k8s.io", "clusterroles", "", ""),
    ("reconcile", "patch", "apps", "deployments", "", "kubeflow-trainer-controller-manager"),
    ("reconcile", "create", "apiextensions.k8s.io", "customresourcedefinitions", "", ""),
    ("reconcile", "create", "", "pods", "", ""),
    ("reconcile", "update", KUBEFLOW, "pytorchjobs", "finalizers", "mnist"),
    ("reconcile", "patch", "batch", "jobs", "", "mnist-launcher"),
    ("reconcile", "create", "", "events", "", ""),
    ("reconcile", "get", "", "configmaps", "", "odh-training-queue-policy"),
    ("gc", "delete", "rbac.authorization.k8s.io", "clusterroles", "", "training-view"),
    ("gc", "delete", KUBEFLOW, "tfjobs", "", "mnist"),
    ("gc", "delete", "", "pods", "", "mnist-worker-0"),
    ("gc", "patch", TRAINERS, "trainers", "", "default-trainer"),
    ("gc", "patch", "trainer.kubeflow.org", "clustertrainingruntimes", "", "torch-distributed"),
    ("gc", "list", "", "secrets", "", ""),
    ("status", "patch", KUBEFLOW, "mpijobs", "status", "mnist"),
    ("status", "patch", TRAINERS, "trainers", "status", "default-trainer"),
    ("status", "get", "", "configmaps", "", "odh-trainer-config"),
    ("status", "list", "", "pods", "", ""),
    ("status", "list", "apps", "deployments", "", ""),
    ("reconcile", "list", TRAINER_API, "trainjobs", "", ""),
    ("reconcile", "patch", TRAINER_API, "trainjobs", "", "llm"),
    ("api", "create", TRAINER_API, "trainjobs", "", ""),
    ("api", "get", TRAINER_API, "trainjobs", "", "llm"),
    ("api", "list", TRAINER_API, "trainjobs", "", ""),
    ("api", "delete", TRAINER_API, "trainjobs", "", "llm"),
    ("api", "get", TRAINER_API, "clustertrainingruntimes", "", "torch-distributed"),
    ("api", "create", KUBEFLOW, "pytorchjobs", "", ""),
]
# Representative writes (and reads) each function has no use for.
NOT_NEEDED = [
    ("reconcile", "delete", KUBEFLOW, "pytorchjobs", "", "mnist"),
    ("reconcile", "patch", KUBEFLOW, "pytorchjobs", "status", "mnist"),
    ("reconcile", "delete", "", "namespaces", "", "team-a"),
    ("reconcile", "escalate", "rbac.authorization.k8s.io", "clusterroles", "", "x"),
    ("reconcile", "bind", "rbac.authorization.k8s.io", "clusterroles", "", "cluster-admin"),
    ("reconcile", "delete", "apiextensions.k8s.io", "customresourcedefinitions", "",
     "trainjobs.trainer.kubeflow.org"),
    ("gc", "create", "", "pods", "", ""),
    ("gc", "create", "rbac.authorization.k8s.io", "clusterroles", "", ""),
    ("gc", "patch", KUBEFLOW, "pytorchjobs", "status", "mnist"),
    ("gc", "create", "", "secrets", "", ""),
    ("gc", "delete", "apiextensions.k8s.io", "customresourcedefinitions", "",
     "trainjobs.trainer.kubeflow.org"),
    ("status", "create", "", "pods", "", ""),
    ("status", "delete", "", "pods", "", "mnist-worker-0"),
    ("status", "patch", TRAINERS, "trainers", "", "default-trainer"),
    ("status", "patch", KUBEFLOW, "pytorchjobs", "", "mnist"),
    ("status", "get", "", "configmaps", "", "kube-root-ca.crt"),
    ("status", "get", "", "secrets", "", "any"),
    ("api", "patch", TRAINER_API, "trainjobs", "", "llm"),
    ("api", "update", TRAINER_API, "trainjobs", "", "llm"),
    ("api", "patch", TRAINER_API, "trainjobs", "status", "llm"),
    ("api", "list", TRAINER_API, "clustertrainingruntimes", "", ""),
    ("api", "create", TRAINER_API, "clustertrainingruntimes", "", ""),
    ("api", "delete", TRAINER_API, "clustertrainingruntimes", "", "torch-distributed"),
    ("api", "get", TRAINER_API, "trainingruntimes", "", "torch-distributed"),
    ("api", "patch", KUBEFLOW, "pytorchjobs", "", "mnist"),
    ("status", "patch", TRAINER_API, "trainjobs", "", "llm"),
    ("gc", "delete", TRAINER_API, "trainjobs", "", "llm"),
]


def _case_id(case: tuple[str, ...]) -> str:
    function, verb, group, resource, subresource, _ = case
    target = f"{resource}/{subresource}" if subresource else resource
    return f"{function}-{verb}-{group or 'core'}-{target}"


@pytest.mark.parametrize("case", NEEDED, ids=_case_id)
def test_function_may_do_what_it_needs(kube: KubeClient, rbac_installed: None,
                                       case: tuple[str, str, str, str, str, str]) -> None:
    function, verb, group, resource, subresource, name = case
    assert can(kube, function, verb, group, resource, name=name, subresource=subresource)


@pytest.mark.parametrize("case", NOT_NEEDED, ids=_case_id)
def test_function_is_denied_what_it_does_not_need(
        kube: KubeClient, rbac_installed: None,
        case: tuple[str, str, str, str, str, str]) -> None:
    function, verb, group, resource, subresource, name = case
    assert not can(kube, function, verb, group, resource, name=name, subresource=subresource)


# -- escalation prevention, with the functions' own tokens ------------------------------------

def client_as(kube: KubeClient, kubeconfig: Path, function: str) -> KubeClient:
    """A client authenticated as the function's ServiceAccount (a TokenRequest)."""
    path = resources.SERVICEACCOUNTS.path(NAMESPACE, f"odh-training-{function}", "token")
    response = kube.call("create", "POST", path, body={
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600}})
    assert response.status == 201, response.body[:300]
    token = json.loads(response.body)["status"]["token"]
    config = dataclasses.replace(from_kubeconfig(kubeconfig), client_cert_file=None,
                                 client_key_file=None, token=token, token_file=None)
    return KubeClient.from_config(config)


@pytest.fixture
def renamed_rbac(kube: KubeClient, bin_dir: Path, product_namespace: str,
                 upstream_manifests: Path) -> Iterator[list[Obj]]:
    """The rendered RBAC objects under fresh names (so no other test's objects are touched),
    bindings pointing at the renamed roles; deleted afterwards."""
    suffix = uuid.uuid4().hex[:6]
    rendered = render_all(trainer_sources(upstream_manifests), NAMESPACE, True, {})
    objs: list[Obj] = []
    for obj in rendered:
        if obj["kind"] not in ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"):
            continue
        copy = {**obj, "metadata": {**obj["metadata"],
                                    "name": f"{obj['metadata']['name']}-{suffix}"}}
        if "roleRef" in copy:
            copy["roleRef"] = {**copy["roleRef"], "name": f"{copy['roleRef']['name']}-{suffix}"}
        objs.append(copy)
    yield objs
    for obj in objs:
        res = kinds.resource_of(kube, obj["apiVersion"], obj["kind"])
        kube.delete(res, obj["metadata"]["name"], obj["metadata"].get("namespace"))


def test_reconcile_token_may_create_every_rendered_role_and_binding(
        kube: KubeClient, cluster: Any, rbac_installed: None, renamed_rbac: list[Obj]) -> None:
    reconcile = client_as(kube, cluster.kubeconfig, "reconcile")
    ordered = sorted(renamed_rbac, key=lambda o: o["kind"].endswith("Binding"))
    refused: dict[str, str] = {}
    for obj in ordered:  # roles first: a binding is judged against its role's rules
        try:
            reconcile.apply(obj, "trainer", res=kinds.resource_of(kube, obj["apiVersion"],
                                                                  obj["kind"]))
        except ApiError as exc:
            refused[_describe(obj)] = exc.message
    assert refused == {}
    assert {o["kind"] for o in ordered} == {"ClusterRole", "Role", "ClusterRoleBinding",
                                            "RoleBinding"}


def test_gc_token_may_not_create_the_trainer_controller_role(
        kube: KubeClient, cluster: Any, rbac_installed: None, renamed_rbac: list[Obj]) -> None:
    gc = client_as(kube, cluster.kubeconfig, "gc")
    role = next(o for o in renamed_rbac if o["kind"] == "ClusterRole"
                and o["metadata"]["name"].startswith("kubeflow-trainer-controller-manager"))
    with pytest.raises(ApiError) as refused:
        gc.apply(role, "trainer", res=kinds.CLUSTERROLES, dry_run=True)
    assert refused.value.status == 403
