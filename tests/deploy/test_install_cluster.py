"""Against the local API server, with the Knative Serving, Eventing, JobSet and PodMonitor CRDs
installed from their Go modules (the test bin dir) and this project's CRDs:

* every object of every install kustomization passes a server-side dry-run apply;
* each identity (the functions' and the event sources' ServiceAccounts) is allowed what its
  handlers do and denied representative things it has no use for (SubjectAccessReview, with
  the expectations `python -m functions doctor` checks: functions/doctor/core/access.py), and
  the one identity of config/func is allowed what the three functions do;
* the reconcile ServiceAccount, with its own token, may apply every ClusterRole, Role and
  binding the Trainer renders, under their real names (server-side dry run: authorization,
  the name-scoped rules and RBAC escalation prevention all run, nothing is stored), so
  neither stops a reconcile, while the gc ServiceAccount may not (the check is real).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.manifests import apply_objects, load_documents
from functions.doctor import reader
from functions.doctor.core import access
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.config import from_kubeconfig
from functions.trainer import kinds
from functions.trainer.provision import render_all
from tests.deploy.support import INSTALLS, REPO, build
from tests.deploy.test_rbac import trainer_sources

Obj = dict[str, Any]
NAMESPACE = "opendatahub"
MANAGER = "odh-training-install"


@pytest.fixture(scope="module")
def installed_crds(kube: KubeClient, crds: None, bin_dir: Path) -> None:
    third_party = bin_dir / "crds"
    apply_objects(kube, load_documents([third_party / "serving", third_party / "eventing",
                                        third_party / "jobset",
                                        third_party / "prometheus-operator",
                                        REPO / "tests" / "deploy" / "data"]),
                  MANAGER, timeout=60)


@pytest.fixture(scope="module")
def product_namespace(kube: KubeClient) -> str:
    ensure_namespace(kube, NAMESPACE)
    return NAMESPACE


def ensure_namespace(kube: KubeClient, name: str) -> None:
    try:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                    res=resources.NAMESPACES)
    except ApiError as exc:
        if exc.status != 409:
            raise


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@pytest.fixture(scope="module")
def rbac_installed(kube: KubeClient, bin_dir: Path, product_namespace: str) -> None:
    """The identities of config/rbac and of the event sources (eventing/), as rendered."""
    objs = [*build(bin_dir / "kustomize", "config/rbac"),
            *(o for o in build(bin_dir / "kustomize", "eventing") if o["kind"] in RBAC_KINDS)]
    apply_objects(kube, objs, MANAGER)


def _describe(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace') or ''}/{meta['name']}"


@pytest.mark.parametrize("directory", INSTALLS)
def test_every_object_passes_a_server_side_dry_run(
        kube: KubeClient, bin_dir: Path, installed_crds: None, product_namespace: str,
        directory: str) -> None:
    objs = build(bin_dir / "kustomize", directory)
    for namespace in sorted({o["metadata"].get("namespace") for o in objs} - {None}):
        ensure_namespace(kube, namespace)  # the RHOAI overlay installs into its own
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


# -- SubjectAccessReview ----------------------------------------------------------------------

def can(kube: KubeClient, case: access.Expectation) -> bool:
    """The doctor's own question (functions/doctor/reader.py), asked of the local server."""
    return reader.review(kube, NAMESPACE, case, case.identity).allowed


@pytest.mark.parametrize("case", [c for c in access.EXPECTATIONS if c.allowed],
                         ids=access.Expectation.case_id)
def test_identity_may_do_what_its_function_does(
        kube: KubeClient, rbac_installed: None, case: access.Expectation) -> None:
    assert can(kube, case)


@pytest.mark.parametrize("case", [c for c in access.EXPECTATIONS if not c.allowed],
                         ids=access.Expectation.case_id)
def test_identity_is_denied_what_it_must_not_do(
        kube: KubeClient, rbac_installed: None, case: access.Expectation) -> None:
    assert not can(kube, case)


# -- the opt-in training API (config/api) ------------------------------------------------------

def _api(verb: str, group: str, resource: str, name: str = "", subresource: str = "", *,
         allowed: bool = True) -> access.Expectation:
    return access.Expectation("api", verb, group, resource, "user", name, subresource, allowed)


# What the API's handlers call (functions/api), and writes it has no use for: admission and
# status are the reconcile and status functions' business.
API = [
    _api("create", access.KUBEFLOW, "pytorchjobs"),
    _api("delete", access.KUBEFLOW, "pytorchjobs", "mnist"),
    _api("create", access.TRAINER_API, "trainjobs"),
    _api("get", access.TRAINER_API, "trainjobs", "llm"),
    _api("list", access.TRAINER_API, "trainjobs"),
    _api("delete", access.TRAINER_API, "trainjobs", "llm"),
    _api("get", access.TRAINER_API, "clustertrainingruntimes", "torch-distributed"),
    _api("get", "", "pods", "llm-node-0", "log"),
    _api("patch", access.KUBEFLOW, "pytorchjobs", "mnist", allowed=False),
    _api("patch", access.TRAINER_API, "trainjobs", "llm", allowed=False),
    _api("update", access.TRAINER_API, "trainjobs", "llm", allowed=False),
    _api("patch", access.TRAINER_API, "trainjobs", "llm", "status", allowed=False),
    _api("list", access.TRAINER_API, "clustertrainingruntimes", allowed=False),
    _api("create", access.TRAINER_API, "clustertrainingruntimes", allowed=False),
    _api("delete", access.TRAINER_API, "clustertrainingruntimes", "torch-distributed",
         allowed=False),
    _api("get", access.TRAINER_API, "trainingruntimes", "torch-distributed", allowed=False),
    _api("get", "", "secrets", "credentials", allowed=False),
]


@pytest.fixture(scope="module")
def api_rbac_installed(kube: KubeClient, bin_dir: Path, product_namespace: str) -> None:
    apply_objects(kube, [o for o in build(bin_dir / "kustomize", "config/api")
                         if o["kind"] in RBAC_KINDS], MANAGER)


@pytest.mark.parametrize("case", API, ids=access.Expectation.case_id)
def test_api_identity_is_allowed_exactly_what_it_does(
        kube: KubeClient, api_rbac_installed: None, case: access.Expectation) -> None:
    assert can(kube, case) == case.allowed


# -- the one identity of `func deploy` (config/func) ------------------------------------------

FUNC_ACCOUNT = access.service_account(access.FUNC_IDENTITY)
BINDINGS = ("ClusterRoleBinding", "RoleBinding")


@pytest.fixture(scope="module")
def func_rbac_installed(kube: KubeClient, bin_dir: Path, rbac_installed: None) -> None:
    """config/func's ServiceAccount and the bindings that name it. config/func changes only
    the subjects of config/rbac's bindings, under the same names, so they are applied here
    with a suffix: config/rbac's bindings stay for the other tests of this cluster. The roles
    they bind must be config/rbac's as applied (checked, so a role config/func changed would
    not go unseen)."""
    objs = build(bin_dir / "kustomize", "config/func")
    applied = {(o["kind"], o["metadata"]["name"]): o
               for o in [*build(bin_dir / "kustomize", "config/rbac"),
                         *build(bin_dir / "kustomize", "eventing")]}
    bindings = [o for o in objs if o["kind"] in BINDINGS
                and any(s["name"] == FUNC_ACCOUNT for s in o["subjects"])]
    own_roles = []
    for binding in bindings:
        role = (binding["roleRef"]["kind"], binding["roleRef"]["name"])
        found = next(o for o in objs if (o["kind"], o["metadata"]["name"]) == role)
        if role[1].endswith("-token"):
            # the lifecycle's token Roles name the account they may ask tokens for: config/func
            # makes it its own, applied here under a suffix as well
            assert found["rules"][0]["resourceNames"] == [FUNC_ACCOUNT]
            own_roles.append({**found, "metadata": {**found["metadata"],
                                                    "name": role[1] + "-func"}})
            binding["roleRef"] = {**binding["roleRef"], "name": role[1] + "-func"}
            continue
        assert found == applied[role], f"{role} differs from config/rbac's"
    renamed = [{**o, "metadata": {**o["metadata"], "name": o["metadata"]["name"] + "-func"}}
               for o in bindings]
    account = [o for o in objs
               if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == FUNC_ACCOUNT]
    assert account and len(bindings) >= 5 and len(own_roles) == 2
    apply_objects(kube, [*account, *own_roles, *renamed], MANAGER)


@pytest.mark.parametrize("case", access.expectations_for(access.FUNC_IDENTITY),
                         ids=access.Expectation.case_id)
def test_func_identity_may_do_what_the_three_functions_do(
        kube: KubeClient, func_rbac_installed: None, case: access.Expectation) -> None:
    """The queue's Lease included: without its binding, jobs submitted through the API on
    the `func deploy` path would stay suspended."""
    assert reader.review(kube, NAMESPACE, case, access.FUNC_IDENTITY).allowed


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
def rendered_rbac(upstream_manifests: Path) -> list[Obj]:
    """The RBAC objects the Trainer renders, under their real names."""
    rendered = render_all(trainer_sources(upstream_manifests), NAMESPACE, True, {})
    return [o for o in rendered
            if o["kind"] in ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")]


def test_reconcile_token_may_apply_every_rendered_role_and_binding(
        kube: KubeClient, cluster: Any, rbac_installed: None, rendered_rbac: list[Obj]) -> None:
    """Roles first (an apply that creates, authorized by name, unless another test of this
    cluster left them); then, with the roles stored as a reconcile leaves them, the bindings:
    RBAC judges a binding against the rules of the role it names, which a dry run never
    stores. The roles this test stored are deleted again."""
    reconcile = client_as(kube, cluster.kubeconfig, "reconcile")
    roles = [o for o in rendered_rbac if not o["kind"].endswith("Binding")]
    bindings = [o for o in rendered_rbac if o["kind"].endswith("Binding")]
    assert {o["kind"] for o in roles} == {"ClusterRole", "Role"}
    assert {o["kind"] for o in bindings} == {"ClusterRoleBinding", "RoleBinding"}

    def refused(objs: list[Obj]) -> dict[str, str]:
        found: dict[str, str] = {}
        for obj in objs:
            try:
                reconcile.apply(obj, "trainer", res=kinds.resource_of(
                    kube, obj["apiVersion"], obj["kind"]), dry_run=True)
            except ApiError as exc:
                found[_describe(obj)] = exc.message
        return found

    def stored(obj: Obj) -> bool:
        return kube.get(kinds.resource_of(kube, obj["apiVersion"], obj["kind"]),
                        obj["metadata"]["name"], obj["metadata"].get("namespace")) is not None

    created = [o for o in roles if not stored(o)]  # left by another test of this cluster
    assert refused(roles) == {}
    apply_objects(kube, created, MANAGER)
    try:
        assert refused(bindings) == {}
    finally:
        for obj in created:
            kube.delete(kinds.resource_of(kube, obj["apiVersion"], obj["kind"]),
                        obj["metadata"]["name"], obj["metadata"].get("namespace"))


@pytest.mark.parametrize(("kind", "name"), [
    pytest.param("ClusterRole", "odh-probe-not-upstream", id="clusterrole-of-another-name"),
    pytest.param("CustomResourceDefinition", "widgets.example.com", id="crd-of-another-name"),
])
def test_reconcile_token_may_not_create_objects_of_other_names(
        kube: KubeClient, cluster: Any, rbac_installed: None, kind: str, name: str) -> None:
    """An apply that creates is authorized with the object's name: resourceNames hold."""
    reconcile = client_as(kube, cluster.kubeconfig, "reconcile")
    obj: Obj = ({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
                 "metadata": {"name": name}, "rules": []} if kind == "ClusterRole" else
                {"apiVersion": "apiextensions.k8s.io/v1", "kind": kind, "metadata": {"name": name},
                 "spec": {"group": "example.com", "scope": "Namespaced",
                          "names": {"plural": "widgets", "kind": "Widget"},
                          "versions": [{"name": "v1", "served": True, "storage": True,
                                        "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    with pytest.raises(ApiError) as refused:
        reconcile.apply(obj, "trainer", res=kinds.resource_of(kube, obj["apiVersion"], kind),
                        dry_run=True)
    assert refused.value.status == 403


def test_gc_token_may_not_create_the_trainer_controller_role(
        kube: KubeClient, cluster: Any, rbac_installed: None, rendered_rbac: list[Obj]) -> None:
    gc = client_as(kube, cluster.kubeconfig, "gc")
    role = next(o for o in rendered_rbac if o["kind"] == "ClusterRole"
                and o["metadata"]["name"] == "kubeflow-trainer-controller-manager")
    with pytest.raises(ApiError) as refused:
        gc.apply(role, "trainer", res=kinds.CLUSTERROLES, dry_run=True)
    assert refused.value.status == 403
