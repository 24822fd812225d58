"""The doctor's checks that are not about Knative itself, and the list of all checks in order.

Each check is a pure function ``Snapshot -> Finding``; :func:`run` calls them in the order a
user would fix things (the platform first, our install last).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from functions.doctor.core import access, delivery, knative
from functions.doctor.core.model import Finding, Snapshot, Status
from functions.doctor.core.netpol import Endpoint, admits, isolating
from functions.platform.core.coexistence import Scope, conflicts

Obj = Mapping[str, Any]
Check = Callable[[Snapshot], Finding]

# Where Knative's data plane runs: activator and autoscaler (Serving), the ingress gateway
# (OpenShift Serverless: knative-serving-ingress; upstream Kourier: kourier-system), Broker and
# Kafka data planes (Eventing).
KNATIVE_NAMESPACES = ("knative-serving", "knative-serving-ingress", "kourier-system",
                      "knative-eventing", "knative-kafka")
# The queue-proxy port in front of every Knative Service pod: where deliveries arrive.
QUEUE_PROXY = ("queue-port", 8012)
# The Knative Services the Broker delivers to, and the labels their pods carry before install.
RECEIVERS = ("odh-training-reconcile", "odh-training-gc", "odh-training-status",
             "odh-training-dead-letters")
JOBSET = ("jobset.x-k8s.io/v1alpha2", "jobsets")
# The Trainer's operand namespace when spec.appNamespace is empty.
DEFAULT_APP_NAMESPACE = "opendatahub"


def _conflict_check(check: str, scope: Scope, what: str) -> Check:
    def run(snapshot: Snapshot) -> Finding:
        found = [c for c in conflicts(snapshot.platform) if c.scope is scope]
        if not found:
            return Finding(check=check, status=Status.PASS,
                           summary=f"no other controller of {what} found")
        return Finding(check=check, status=Status.FAIL,
                       summary=f"another controller manages {what}: "
                               + "; ".join(c.message for c in found),
                       fix="; ".join(dict.fromkeys(c.fix for c in found)))
    return run


platform_trainer = _conflict_check("conflicts-trainer", Scope.TRAINER,
                                   "the Trainer component")
platform_jobs = _conflict_check("conflicts-jobs", Scope.JOBS, "the kubeflow.org job kinds")


def jobset(snapshot: Snapshot) -> Finding:
    if snapshot.serves(*JOBSET):
        return Finding(check="jobset", status=Status.PASS,
                       summary="JobSet (jobsets.jobset.x-k8s.io v1alpha2) is served")
    return Finding(check="jobset", status=Status.FAIL,
                   summary="JobSet is not installed: the Trainer reports Degraded",
                   fix="OpenShift: install the Job Set Operator and create its JobSetOperator "
                       "CR named cluster; Kubernetes: apply JobSet's release manifest")


def _labels(obj: Obj) -> dict[str, str]:
    return {str(k): str(v) for k, v in ((obj.get("metadata") or {}).get("labels") or {}).items()}


def receivers(snapshot: Snapshot) -> dict[str, dict[str, str]]:
    """The pods deliveries reach, by Knative Service: the installed Services' pod labels, or
    the labels config/serving gives them."""
    found: dict[str, dict[str, str]] = {}
    for ksvc in snapshot.objects("Service"):
        name = str((ksvc.get("metadata") or {}).get("name"))
        template = ((ksvc.get("spec") or {}).get("template") or {}).get("metadata") or {}
        found[name] = {**_labels({"metadata": template}), "serving.knative.dev/service": name}
    for name in RECEIVERS:
        found.setdefault(name, {"app.kubernetes.io/name": name,
                                "app.kubernetes.io/part-of": "odh-training",
                                "serving.knative.dev/service": name})
    return found


def network_policies(snapshot: Snapshot) -> Finding:
    check = "network-policy"
    if snapshot.network_policies is None:
        return Finding(check=check, status=Status.SKIP,
                       summary=f"NetworkPolicies of {snapshot.namespace} not readable")
    sources = {name: snapshot.namespaces[name] for name in KNATIVE_NAMESPACES
               if name in snapshot.namespaces}
    blocked: list[str] = []
    isolated = 0
    for service, labels in sorted(receivers(snapshot).items()):
        target = Endpoint(snapshot.namespace, labels=labels, ports=dict([QUEUE_PROXY]))
        isolated += bool(isolating(snapshot.network_policies, target))
        blocked += [f"{namespace} -> {service}" for namespace, ns_labels in sorted(sources.items())
                    if not admits(snapshot.network_policies,
                                  Endpoint(namespace, namespace_labels=ns_labels), target,
                                  QUEUE_PROXY[1])]
    if blocked:
        return Finding(check=check, status=Status.FAIL,
                       summary=f"NetworkPolicies in {snapshot.namespace} block Knative's "
                               "deliveries to the functions",
                       fix="apply the install's NetworkPolicy (odh-training-allow-knative; "
                           "OpenShift: its namespaces carry knative.openshift.io/part-of="
                           "openshift-serverless)",
                       details=tuple(blocked))
    if not sources:
        return Finding(check=check, status=Status.SKIP, summary="no Knative namespace found")
    how = "admitted by the NetworkPolicies" if isolated else "no NetworkPolicy isolates them"
    return Finding(check=check, status=Status.PASS,
                   summary=f"Knative ({', '.join(sorted(sources))}) reaches the functions: {how}")


def _guess_plural(kind: str) -> str:
    lowered = kind.lower()
    if lowered.endswith("s"):
        return lowered + "es"
    return lowered[:-1] + "ies" if lowered.endswith("y") else lowered + "s"


def event_sources(snapshot: Snapshot) -> Finding:
    check = "event-sources"
    sources = snapshot.objects("ApiServerSource")
    if not sources:
        return Finding(check=check, status=Status.SKIP, summary="no ApiServerSource installed")
    unserved = [f"{(s.get('metadata') or {}).get('name')}: {r.get('kind')} {r.get('apiVersion')}"
                for s in sources for r in (s.get("spec") or {}).get("resources") or []
                if not snapshot.serves(str(r.get("apiVersion")), _guess_plural(str(r.get("kind"))))]
    if unserved:
        return Finding(check=check, status=Status.FAIL,
                       summary="an ApiServerSource watches a kind the cluster does not serve: "
                               "that source's adapter stops (the other sources keep flowing)",
                       fix="install the CRD at the version the source names (config/crd), "
                           "after removing the other operator's definition",
                       details=tuple(unserved))
    return Finding(check=check, status=Status.PASS,
                   summary=f"every kind of {len(sources)} ApiServerSources is served")


def _ready(obj: Obj) -> tuple[bool, str]:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True", str(condition.get("message") or
                                                          condition.get("reason") or "")
    return False, "no Ready condition yet"


def _not_ready(objs: Iterable[tuple[str, Obj]]) -> list[str]:
    found: list[str] = []
    for kind, obj in objs:
        ready, why = _ready(obj)
        if not ready:
            found.append(f"{kind} {(obj.get('metadata') or {}).get('name')}: {why}")
    return found


def event_path(snapshot: Snapshot) -> Finding:
    check = "event-path"
    kinds = ("Service", "Broker", "Trigger", "ApiServerSource", "PingSource", "KafkaSink")
    objs = [(kind, o) for kind in kinds for o in snapshot.objects(kind)]
    if not objs:
        return Finding(check=check, status=Status.SKIP, summary="not installed yet")
    waiting = _not_ready(objs)
    if waiting:
        return Finding(check=check, status=Status.FAIL,
                       summary=f"{len(waiting)} of {len(objs)} objects of the event path are "
                               "not Ready", fix="kubectl describe each; the messages below say "
                                                "why", details=tuple(waiting))
    return Finding(check=check, status=Status.PASS,
                   summary=f"{len(objs)} Services, Broker, Triggers, sources and sinks Ready")


def trainer(snapshot: Snapshot) -> Finding:
    check = "trainer"
    found = snapshot.objects("Trainer")
    if not found:
        return Finding(check=check, status=Status.SKIP,
                       summary="no Trainer yet (kubectl apply -f config/samples/trainer.yaml)")
    operand = str((found[0].get("spec") or {}).get("appNamespace") or DEFAULT_APP_NAMESPACE)
    if operand != snapshot.namespace:
        return Finding(check=check, status=Status.FAIL,
                       summary=f"the Trainer deploys into {operand}, not into the install's "
                               f"namespace {snapshot.namespace}",
                       fix=f"set spec.appNamespace: {snapshot.namespace} (the functions' "
                           "namespaced Roles and the Trainer's event source are there)")
    waiting = _not_ready(("Trainer", t) for t in found)
    if waiting:
        return Finding(check=check, status=Status.FAIL, summary="the Trainer is not Ready",
                       fix="its conditions say why (kubectl get trainer default-trainer -o "
                           "yaml)", details=tuple(waiting))
    return Finding(check=check, status=Status.PASS, summary="Trainer default-trainer is Ready")


def _permissions_of(identity: str) -> Check:
    def run(snapshot: Snapshot) -> Finding:
        return access.permissions(identity, snapshot.access)
    return run


IDENTITIES = ("reconcile", "gc", "status", "events", "dead-letters", access.FUNC_IDENTITY)


CHECKS: tuple[Check, ...] = (
    knative.serving, knative.eventing, knative.trigger_filters, knative.delivery_features,
    delivery.delivery_auth, knative.broker, network_policies, platform_trainer, platform_jobs,
    jobset, event_sources, *(_permissions_of(i) for i in IDENTITIES), event_path, trainer,
)


def run(snapshot: Snapshot) -> list[Finding]:
    return [check(snapshot) for check in CHECKS]


def failed(findings: Iterable[Finding]) -> bool:
    return any(f.status is Status.FAIL for f in findings)
