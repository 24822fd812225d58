"""Knative Eventing installed into the local cluster as a user's cluster has it, and the part
of Knative Serving our event path needs (Knative Services' addresses).

The manifests are Knative Eventing's own, taken as data from the ``knative.dev/eventing``
module the binaries are built from (``hack/ensure-testbin.sh``: ``<bin dir>/knative-eventing``
and the CRDs in ``<bin dir>/crds/eventing``): the namespace, ServiceAccounts and RBAC, the
``config-*`` ConfigMaps exactly as released (so the feature flags are the release defaults:
see :data:`FEATURE_FLAGS`), the webhook configurations, and the Deployments of the core
(controller, webhook, PingSource adapter), the multi-tenant channel-based Broker (controller,
ingress, filter) and the in-memory channel (controller, dispatcher). Left out: the
HorizontalPodAutoscalers (no metrics server here) and the Deployments and StatefulSets no
binary is built for (``job-sink``, ``request-reply``: features our manifests do not use).

No Serving controller runs: a Knative Service we apply is published as Ready with the
address Knative Serving gives a cluster-local Service,
``http://<name>.<namespace>.svc.cluster.local``, which the cluster network routes to the
local function (:mod:`devstack.network`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devstack.cluster.manifests import FIELD_MANAGER, apply_objects, load_documents
from devstack.core.podspec import IMAGE_BINARIES
from functions.kube.client import KubeClient

Obj = dict[str, Any]
SYSTEM_NAMESPACE = "knative-eventing"
# Install order within the data directory (namespace and RBAC before the Deployments).
DATA_DIRS = ("core", "integrations", "mt-channel-broker", "in-memory-channel")
SKIPPED_KINDS = frozenset({"HorizontalPodAutoscaler"})
WORKLOADS = frozenset({"Deployment", "StatefulSet", "DaemonSet"})
# Install waves, each applied concurrently: what everything else lives in or is validated
# against; then the objects a workload or webhook refers to; then the webhook
# configurations and the workloads (their pods need their ServiceAccounts).
FIRST_WAVE = frozenset({"CustomResourceDefinition", "Namespace"})
LAST_WAVE = WORKLOADS | {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
INSTALL_WORKERS = 8
# config-features of knative.dev/eventing v0.49.2 as released, which is what a user's cluster
# has unless its admin changed it. The ones that matter here: Retry-After is ignored
# (delivery-retryafter disabled), delivery timeouts are honoured, Trigger ``filters`` are GA,
# ApiServerSource ``filters`` are off, and there is no TLS or OIDC between components. The
# local stack turns OIDC on (:data:`OIDC_FEATURE`, devstack.knative_stack), as the
# functions require; TLS stays off.
FEATURE_FLAGS = {
    "delivery-timeout": "enabled",
    "delivery-retryafter": "disabled",
    "new-apiserversource-filters": "disabled",
    "transport-encryption": "disabled",
    "authentication-oidc": "disabled",
    "eventtype-auto-create": "disabled",
    "kreference-group": "disabled",
    "kreference-mapping": "disabled",
    "cross-namespace-event-links": "disabled",
}
# Knative's OIDC authentication between senders and receivers (eventing pkg/auth): its
# verifiers fetch the ServiceAccount issuer's discovery document from the default
# oidc-discovery-base-url, https://kubernetes.default.svc, which the local API server's
# certificate and the cluster network serve (devstack.cluster.pki, devstack.core.routes).
OIDC_FEATURE = "authentication-oidc"
WEBHOOKS = (
    ("MutatingWebhookConfiguration", "webhook.eventing.knative.dev"),
    ("ValidatingWebhookConfiguration", "validation.webhook.eventing.knative.dev"),
    ("MutatingWebhookConfiguration", "inmemorychannel.eventing.knative.dev"),
    ("ValidatingWebhookConfiguration", "validation.inmemorychannel.eventing.knative.dev"),
)
ADMISSION = "admissionregistration.k8s.io/v1"
SERVING = "serving.knative.dev/v1"


def runs_locally(obj: Obj) -> bool:
    """Whether ``obj`` is kept: not a workload, or one whose images are all built here."""
    if obj.get("kind") not in WORKLOADS:
        return True
    containers = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers") or []
    return all(c.get("image") in IMAGE_BINARIES for c in containers)


def eventing_manifests(bin_dir: Path) -> list[Obj]:
    """Every object of the install, CRDs first, in install order."""
    data = bin_dir / "knative-eventing"
    if not data.is_dir():
        raise FileNotFoundError(f"{data} is missing: rebuild the knative group of "
                                "hack/ensure-testbin.sh")
    objects = load_documents([bin_dir / "crds" / "eventing",
                              data / "in-memory-channel" / "resources"])
    for name in DATA_DIRS:
        objects += [o for o in load_documents([data / name])
                    if o.get("kind") != "CustomResourceDefinition"]
    return [o for o in objects if o.get("kind") not in SKIPPED_KINDS and runs_locally(o)]


def install_waves(objects: Sequence[Obj]) -> list[list[Obj]]:
    """``objects`` in the order a file-ordered install has them: :data:`FIRST_WAVE`, then
    all but :data:`LAST_WAVE`, then those."""
    first = [o for o in objects if o.get("kind") in FIRST_WAVE]
    last = [o for o in objects if o.get("kind") in LAST_WAVE]
    middle = [o for o in objects if o.get("kind") not in FIRST_WAVE | LAST_WAVE]
    return [first, middle, last]


def install(kube: KubeClient, bin_dir: Path, features: Mapping[str, str] | None = None) -> None:
    """Apply the install, each wave's objects concurrently (CRDs established before the
    rest); ``features`` changes flags of ``config-features`` before its first apply, as an
    admin configures Knative (the webhook reads them when it starts)."""
    objects = eventing_manifests(bin_dir)
    if features:
        objects = [with_features(o, features) for o in objects]
    first, *rest = install_waves(objects)
    apply_objects(kube, first, timeout=60.0)
    with ThreadPoolExecutor(INSTALL_WORKERS, thread_name_prefix="knative-install") as pool:
        for wave in rest:
            list(pool.map(lambda obj: kube.apply(obj, FIELD_MANAGER), wave))


def with_features(obj: Obj, features: Mapping[str, str]) -> Obj:
    """``obj``, or a copy of ``config-features`` with ``features`` set in its data."""
    meta = obj.get("metadata") or {}
    if obj.get("kind") != "ConfigMap" or meta.get("name") != "config-features":
        return obj
    return {**obj, "data": {**(obj.get("data") or {}), **features}}


def features(kube: KubeClient) -> dict[str, str]:
    """The live ``config-features`` (to report what the local cluster runs with)."""
    res = kube.resource_for("v1", "ConfigMap")
    found = kube.get(res, "config-features", SYSTEM_NAMESPACE) or {}
    return {k: str(v) for k, v in (found.get("data") or {}).items() if not k.startswith("_")}


def webhooks_configured(kube: KubeClient) -> list[str]:
    """The Knative webhook configurations not yet filled in by their webhooks (rules and CA
    bundle): until then Knative objects are neither defaulted nor validated."""
    missing = []
    for kind, name in WEBHOOKS:
        obj = kube.get(kube.resource_for(ADMISSION, kind), name) or {}
        hooks = obj.get("webhooks") or []
        if not hooks or not all(h.get("rules") and (h.get("clientConfig") or {}).get("caBundle")
                                for h in hooks):
            missing.append(f"{kind} {name}")
    return missing


@dataclass(frozen=True)
class Ref:
    api_version: str
    kind: str
    namespace: str | None
    name: str

    def describe(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


def refs_of(objects: Iterable[Obj]) -> list[Ref]:
    return [Ref(str(o["apiVersion"]), str(o["kind"]), o["metadata"].get("namespace"),
                str(o["metadata"]["name"])) for o in objects]


def ready_condition(obj: Obj | None) -> Obj:
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == "Ready":
            return dict(item)
    return {}


def not_ready(kube: KubeClient, refs: Sequence[Ref]) -> list[str]:
    """Each object in ``refs`` that is not Ready, with why (its Ready condition)."""
    found = []
    for ref in refs:
        obj = kube.get(kube.resource_for(ref.api_version, ref.kind), ref.name, ref.namespace)
        ready = ready_condition(obj)
        if obj is None:
            found.append(f"{ref.describe()}: not found")
        elif ready.get("status") != "True":
            found.append(f"{ref.describe()}: {ready.get('reason', 'no Ready condition')} "
                         f"{ready.get('message', '')}".rstrip())
    return found


def wait_until(check: Any, timeout: float, what: str, interval: float = 0.2) -> None:
    """Poll ``check()`` (a list of what is still missing) until it is empty."""
    deadline = time.monotonic() + timeout
    while True:
        missing = check()
        if not missing:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout:.0f}s:\n  " + "\n  ".join(missing))
        time.sleep(interval)


def service_address(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"http://{meta['name']}.{meta.get('namespace') or 'default'}.svc.cluster.local"


def publish_service(kube: KubeClient, obj: Obj, ready: bool) -> None:
    """Write the status Knative Serving would give a cluster-local Service whose revision is
    (or is not) ready."""
    meta = obj["metadata"]
    live = kube.get(kube.resource_for(SERVING, "Service"), meta["name"],
                    meta.get("namespace")) or obj
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    state = "True" if ready else "Unknown"
    url = service_address(obj)
    revision = f"{meta['name']}-00001"
    status = {
        "observedGeneration": (live.get("metadata") or {}).get("generation", 1),
        "conditions": [{"type": t, "status": state, "lastTransitionTime": now}
                       for t in ("ConfigurationsReady", "Ready", "RoutesReady")],
        "url": url, "address": {"url": url},
        "latestCreatedRevisionName": revision,
        "latestReadyRevisionName": revision if ready else None,
        "traffic": [{"revisionName": revision, "latestRevision": True, "percent": 100}],
    }
    kube.patch(kube.resource_for(SERVING, "Service"), meta["name"], {"status": status},
               meta.get("namespace"), subresource="status")


def sources_not_watching(kube: KubeClient, namespace: str, namespace_of_sources: str) -> list[str]:
    """What keeps the ApiServerSources of ``namespace_of_sources`` that watch every namespace
    (``namespaceSelector``) from delivering ``namespace``'s changes: the source has not listed
    the namespace yet, or its adapter's Deployment (which the controller rewrites for each new
    namespace) has not rolled out to one Ready pod. Empty when every such adapter watches it."""
    sources = kube.resource_for("sources.knative.dev/v1", "ApiServerSource")
    deployments = kube.list(kube.resource_for("apps/v1", "Deployment"), namespace_of_sources)
    pods = kube.list(kube.resource_for("v1", "Pod"), namespace_of_sources)
    missing = []
    for source in kube.list(sources, namespace_of_sources):
        name = source["metadata"]["name"]
        if "namespaceSelector" not in (source.get("spec") or {}):
            continue
        if namespace not in ((source.get("status") or {}).get("namespaces") or []):
            missing.append(f"ApiServerSource {name}: {namespace} not among its namespaces")
            continue
        owned = [d for d in deployments if any(
            o.get("kind") == "ApiServerSource" and o.get("name") == name
            for o in d["metadata"].get("ownerReferences") or [])]
        for deployment in owned:
            status = deployment.get("status") or {}
            labels = (deployment["spec"].get("selector") or {}).get("matchLabels") or {}
            running = [p for p in pods if labels.items() <= (p["metadata"].get("labels") or {})
                       .items() and not p["metadata"].get("deletionTimestamp")]
            if not (status.get("observedGeneration") == deployment["metadata"]["generation"]
                    and status.get("updatedReplicas") == status.get("readyReplicas") == 1
                    and len(running) == 1):
                missing.append(f"Deployment {deployment['metadata']['name']}: rolling out")
    return missing
