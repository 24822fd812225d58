"""Reads a live cluster into a :class:`~functions.doctor.core.model.Snapshot`. Read-only: the
only objects it creates are SubjectAccessReviews, which the API server answers without storing
anything.

A read refused (403) or of an API that is not served (404) leaves its part of the snapshot
empty; the checks then say what they could not see.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from functions.doctor.core import access, knative
from functions.doctor.core.checks import IDENTITIES, KNATIVE_NAMESPACES
from functions.doctor.core.model import AccessReview, Component, Snapshot, Workload
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from functions.platform import coexistence
from functions.platform.core.coexistence import REQUIRED_VERSIONS

Obj = dict[str, Any]
_QUIET = (403, 404, 405)

NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io", "v1", "subjectaccessreviews",
                                  "SubjectAccessReview", namespaced=False)
KNATIVE_SERVING_CR = Resource("operator.knative.dev", "v1beta1", "knativeservings",
                              "KnativeServing")
KNATIVE_EVENTING_CR = Resource("operator.knative.dev", "v1beta1", "knativeeventings",
                               "KnativeEventing")
INSTALLED = {
    "Service": Resource("serving.knative.dev", "v1", "services", "Service"),
    "Broker": Resource("eventing.knative.dev", "v1", "brokers", "Broker"),
    "Trigger": Resource("eventing.knative.dev", "v1", "triggers", "Trigger"),
    "ApiServerSource": Resource("sources.knative.dev", "v1", "apiserversources",
                                "ApiServerSource"),
    "PingSource": Resource("sources.knative.dev", "v1", "pingsources", "PingSource"),
    "KafkaSink": Resource("eventing.knative.dev", "v1alpha1", "kafkasinks", "KafkaSink"),
}
OUR_PREFIX = "odh-training"
ALWAYS_ASKED = ("serving.knative.dev/v1", "eventing.knative.dev/v1", "sources.knative.dev/v1",
                "jobset.x-k8s.io/v1alpha2")


def _list(kube: KubeClient, res: Resource, namespace: str | None = None) -> list[Obj] | None:
    try:
        return kube.list(res, namespace)
    except ApiError as exc:
        if exc.status in _QUIET:
            return None
        raise


def _get(kube: KubeClient, res: Resource, name: str, namespace: str | None = None
         ) -> Obj | None:
    try:
        return kube.get(res, name, namespace)
    except ApiError as exc:
        if exc.status in _QUIET:
            return None
        raise


def served(kube: KubeClient, group_versions: Iterable[str]) -> frozenset[str]:
    """``group/version/plural`` of every top-level resource of the given group versions."""
    found: set[str] = set()
    for api_version in sorted(set(group_versions)):
        try:
            found.update(f"{api_version}/{r.plural}" for r in kube.discover(api_version))
        except ApiError as exc:
            if exc.status not in _QUIET:
                raise
    return frozenset(found)


def component(kube: KubeClient, namespace: str, operator_cr: Resource) -> Component:
    deployments = _list(kube, resources.DEPLOYMENTS, namespace) or []
    crs = _list(kube, operator_cr, namespace) or []
    features = _get(kube, resources.CONFIGMAPS, "config-features", namespace)
    version = next((str(v) for cr in crs if (v := (cr.get("status") or {}).get("version"))),
                   None)
    return Component(deployments=tuple(Workload.from_object(d) for d in deployments),
                     operator_version=version,
                     features=None if features is None else dict(features.get("data") or {}))


def ours(kube: KubeClient, namespace: str) -> dict[str, tuple[Obj, ...]]:
    """Our install's objects in the namespace (by name prefix), and the Trainer."""
    found: dict[str, tuple[Obj, ...]] = {}
    for kind, res in INSTALLED.items():
        objs = _list(kube, res, namespace) or []
        found[kind] = tuple(o for o in objs
                            if str(o["metadata"]["name"]).startswith(OUR_PREFIX))
    trainers = _list(kube, resources.TRAINERS) or []
    found["Trainer"] = tuple(trainers)
    return found


def _source_group_versions(installed: dict[str, tuple[Obj, ...]]) -> set[str]:
    return {str(r.get("apiVersion")) for s in installed.get("ApiServerSource", ())
            for r in (s.get("spec") or {}).get("resources") or []}


def review(kube: KubeClient, namespace: str, expectation: access.Expectation,
           identity: str) -> AccessReview:
    """One SubjectAccessReview as ``identity``'s ServiceAccount."""
    account = access.service_account(identity)
    target = expectation.namespace(namespace)
    answer = kube.create({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
        "spec": {"user": f"system:serviceaccount:{namespace}:{account}",
                 "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                            "system:authenticated"],
                 "resourceAttributes": {"verb": expectation.verb, "group": expectation.group,
                                        "resource": expectation.resource,
                                        "subresource": expectation.subresource,
                                        "name": expectation.name, "namespace": target}}},
        res=SUBJECT_ACCESS_REVIEWS)
    return AccessReview(function=identity, verb=expectation.verb, group=expectation.group,
                        resource=expectation.resource, subresource=expectation.subresource,
                        namespace=target, name=expectation.name, expected=expectation.allowed,
                        allowed=bool((answer.get("status") or {}).get("allowed")))


def reviews(kube: KubeClient, namespace: str, accounts: frozenset[str] | None
            ) -> tuple[AccessReview, ...]:
    found: list[AccessReview] = []
    for identity in IDENTITIES:
        if accounts is not None and access.service_account(identity) not in accounts:
            continue
        try:
            found += [review(kube, namespace, e, identity)
                      for e in access.expectations_for(identity)]
        except ApiError as exc:
            if exc.status not in _QUIET:
                raise
            return ()
    return tuple(found)


def read(kube: KubeClient, namespace: str) -> Snapshot:
    installed = ours(kube, namespace)
    group_versions = {*ALWAYS_ASKED, *_source_group_versions(installed),
                      *(f"{crd.partition('.')[2]}/{version}"
                        for crd, version in REQUIRED_VERSIONS.items())}
    namespaces = {name: {str(k): str(v) for k, v in (ns["metadata"].get("labels") or {}).items()}
                  for name in KNATIVE_NAMESPACES
                  if (ns := _get(kube, resources.NAMESPACES, name)) is not None}
    eventing = component(kube, knative.EVENTING_NAMESPACE, KNATIVE_EVENTING_CR)
    defaults = _get(kube, resources.CONFIGMAPS, "config-br-defaults", knative.EVENTING_NAMESPACE)
    configmaps = {f"{b['spec']['config'].get('namespace', namespace)}/"
                  f"{b['spec']['config'].get('name')}"
                  for b in installed.get("Broker", ()) if (b.get("spec") or {}).get("config")}
    existing = frozenset(
        where for where in configmaps
        if _get(kube, resources.CONFIGMAPS, where.partition("/")[2], where.partition("/")[0]))
    accounts_listed = _list(kube, resources.SERVICEACCOUNTS, namespace)
    accounts = None if accounts_listed is None else frozenset(
        str(a["metadata"]["name"]) for a in accounts_listed)
    return Snapshot(
        namespace=namespace,
        served=served(kube, group_versions),
        serving=component(kube, knative.SERVING_NAMESPACE, KNATIVE_SERVING_CR),
        eventing=eventing,
        broker_defaults=None if defaults is None else dict(defaults.get("data") or {}),
        configmaps=existing,
        namespaces=namespaces,
        network_policies=None if (policies := _list(kube, NETWORK_POLICIES, namespace)) is None
        else tuple(policies),
        platform=coexistence.observe(kube, jobs=True, crd_names=tuple(REQUIRED_VERSIONS)),
        service_accounts=accounts,
        access=reviews(kube, namespace, accounts),
        installed=installed,
    )
