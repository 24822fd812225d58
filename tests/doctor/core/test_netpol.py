"""NetworkPolicy ingress semantics on the objects."""

from __future__ import annotations

from typing import Any

import pytest

from functions.doctor.core.netpol import Endpoint, admits, isolating, selector_matches

Obj = dict[str, Any]
TARGET = Endpoint("apps", {"kubernetes.io/metadata.name": "apps"}, {"app": "fn", "tier": "x"},
                  {"queue-port": 8012})
KNATIVE = Endpoint("knative-serving", {"knative.openshift.io/part-of": "openshift-serverless"})
USER = Endpoint("team-a", {"kubernetes.io/metadata.name": "team-a"})
NEIGHBOUR = Endpoint("apps", {"kubernetes.io/metadata.name": "apps"}, {"app": "web"})


def policy(ingress: list[Obj] | None, pods: Obj | None = None, namespace: str = "apps",
           types: list[str] | None = None, egress: list[Obj] | None = None) -> Obj:
    spec: Obj = {"podSelector": {} if pods is None else pods}
    if ingress is not None:
        spec["ingress"] = ingress
    if types is not None:
        spec["policyTypes"] = types
    if egress is not None:
        spec["egress"] = egress
    return {"metadata": {"name": "p", "namespace": namespace}, "spec": spec}


FROM_KNATIVE = {"from": [{"namespaceSelector": {"matchLabels": {
    "knative.openshift.io/part-of": "openshift-serverless"}}}]}


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    pytest.param(None, {"a": "1"}, True, id="absent-matches-all"),
    pytest.param({}, {}, True, id="empty-matches-all"),
    pytest.param({"matchLabels": {"a": "1"}}, {"a": "1"}, True, id="labels-match"),
    pytest.param({"matchLabels": {"a": "1"}}, {"a": "2"}, False, id="labels-differ"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
                 {"a": "2"}, True, id="in"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]},
                 {}, False, id="in-absent"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
                 {}, True, id="notin-absent"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
                 {"a": "1"}, False, id="notin-present"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True,
                 id="exists"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""},
                 False, id="does-not-exist"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "Weird"}]}, {"a": ""}, False,
                 id="unknown-operator"),
])
def test_selector_matches(selector: Obj | None, labels: dict[str, str], expected: bool) -> None:
    assert selector_matches(selector, labels) is expected


@pytest.mark.parametrize(("policies", "source", "port", "expected"), [
    pytest.param([], USER, 8012, True, id="no-policy-admits-all"),
    pytest.param([policy([], types=["Ingress"])], KNATIVE, 8012, False, id="deny-all"),
    pytest.param([policy(None, types=["Egress"])], USER, 8012, True, id="egress-only-policy"),
    pytest.param([policy(None, egress=[{}])], USER, 8012, False,
                 id="ingress-type-implied-without-policy-types"),
    pytest.param([policy([FROM_KNATIVE])], KNATIVE, 8012, True, id="knative-admitted"),
    pytest.param([policy([FROM_KNATIVE])], USER, 8012, False, id="user-blocked"),
    pytest.param([policy([{}])], USER, 8012, True, id="empty-rule-admits-all"),
    pytest.param([policy([FROM_KNATIVE], namespace="other")], USER, 8012, True,
                 id="policy-of-another-namespace"),
    pytest.param([policy([FROM_KNATIVE], pods={"matchLabels": {"app": "web"}})], USER, 8012,
                 True, id="policy-selects-other-pods"),
    pytest.param([policy([]), policy([FROM_KNATIVE])], KNATIVE, 8012, True,
                 id="policies-add-up"),
    pytest.param([policy([{"from": [{"podSelector": {}}]}])], NEIGHBOUR, 8012, True,
                 id="pod-selector-same-namespace"),
    pytest.param([policy([{"from": [{"podSelector": {}}]}])], KNATIVE, 8012, False,
                 id="pod-selector-not-other-namespace"),
    pytest.param([policy([{"from": [{"namespaceSelector": {}, "podSelector": {
        "matchLabels": {"app": "activator"}}}]}])], KNATIVE, 8012, False,
                 id="namespace-and-pod-both-needed"),
    pytest.param([policy([{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}])], USER, 8012, False,
                 id="ip-blocks-not-evaluated"),
    pytest.param([policy([{"ports": [{"port": 8012}]}])], USER, 8012, True, id="port-number"),
    pytest.param([policy([{"ports": [{"port": 9090}]}])], USER, 8012, False, id="other-port"),
    pytest.param([policy([{"ports": [{"port": "queue-port"}]}])], USER, 8012, True,
                 id="named-port"),
    pytest.param([policy([{"ports": [{"port": 8000, "endPort": 8100}]}])], USER, 8012, True,
                 id="port-range"),
    pytest.param([policy([{"ports": [{"port": 8012, "protocol": "UDP"}]}])], USER, 8012, False,
                 id="other-protocol"),
])
def test_admits(policies: list[Obj], source: Endpoint, port: int, expected: bool) -> None:
    assert admits(policies, source, TARGET, port) is expected


def test_isolating_lists_the_selecting_policies() -> None:
    selecting = policy([FROM_KNATIVE])
    assert isolating([selecting, policy([], namespace="other")], TARGET) == [selecting]
