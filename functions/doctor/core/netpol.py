"""Kubernetes NetworkPolicy ingress semantics, evaluated on the objects.

No CNI runs where the tests run, and the doctor cannot send traffic on a cluster's behalf, so
whether a policy set admits a connection is computed from the policies as the API defines them
(networking.k8s.io/v1): a pod selected by no policy with an Ingress type admits everything;
a selected pod admits a connection when any rule of any selecting policy matches its source
and port (rules add up, nothing subtracts). ``ipBlock`` peers are not evaluated (pod traffic
is judged by namespace and pod labels): they never match here, which errs towards "blocked".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = Mapping[str, Any]


def selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector against labels; an empty (or absent) selector matches everything."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key = expression.get("key")
        operator = expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False  # an unknown operator selects nothing
    return True


@dataclass(frozen=True)
class Endpoint:
    """A pod: its namespace (with the namespace's labels), its labels and named ports."""

    namespace: str
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    ports: Mapping[str, int] = field(default_factory=dict)


def _types(policy: Obj) -> list[str]:
    spec = policy.get("spec") or {}
    types = spec.get("policyTypes")
    if types:
        return list(types)
    return ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]


def isolating(policies: Iterable[Obj], target: Endpoint) -> list[Obj]:
    """The policies that select ``target`` for ingress."""
    return [p for p in policies
            if (p.get("metadata") or {}).get("namespace") == target.namespace
            and "Ingress" in _types(p)
            and selector_matches((p.get("spec") or {}).get("podSelector"), target.labels)]


def _peer_matches(peer: Obj, policy_namespace: str, source: Endpoint) -> bool:
    if "ipBlock" in peer:
        return False
    pods = peer.get("podSelector")
    namespaces = peer.get("namespaceSelector")
    if namespaces is None:
        in_scope = source.namespace == policy_namespace
    else:
        in_scope = selector_matches(namespaces, source.namespace_labels)
    return in_scope and (pods is None or selector_matches(pods, source.labels))


def _port_matches(rule_port: Obj, target: Endpoint, port: int, protocol: str) -> bool:
    if rule_port.get("protocol", "TCP") != protocol:
        return False
    wanted = rule_port.get("port")
    if wanted is None:
        return True
    if isinstance(wanted, str) and not wanted.isdigit():
        return target.ports.get(wanted) == port
    end = rule_port.get("endPort")
    return int(wanted) <= port <= int(end if end is not None else wanted)


def _rule_admits(rule: Obj, policy_namespace: str, source: Endpoint, target: Endpoint,
                 port: int, protocol: str) -> bool:
    peers = rule.get("from") or []
    ports = rule.get("ports") or []
    return (not peers or any(_peer_matches(p, policy_namespace, source) for p in peers)) and \
        (not ports or any(_port_matches(p, target, port, protocol) for p in ports))


def admits(policies: Iterable[Obj], source: Endpoint, target: Endpoint, port: int,
           protocol: str = "TCP") -> bool:
    """Whether a connection from ``source`` to ``target:port`` is admitted on ingress."""
    selecting = isolating(policies, target)
    if not selecting:
        return True
    return any(_rule_admits(rule, target.namespace, source, target, port, protocol)
               for policy in selecting
               for rule in (policy.get("spec") or {}).get("ingress") or [])
