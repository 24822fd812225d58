"""Trigger filters must agree with a Knative Broker on what matches."""

from __future__ import annotations

from typing import Any

import pytest

from functions.core.triggers import (
    TriggerSpecError,
    binary_attributes,
    compile_trigger_filter,
    structured_attributes,
)

POD_ADD = {"specversion": "1.0", "id": "1", "source": "https://10.96.0.1:443",
           "type": "dev.knative.apiserver.resource.add", "kind": "Pod", "name": "p",
           "namespace": "ns"}
PING = {"specversion": "1.0", "id": "2", "type": "dev.knative.sources.ping",
        "source": "/apis/v1/namespaces/opendatahub/pingsources/resync"}


@pytest.mark.parametrize(("spec", "attributes", "expected"), [
    pytest.param({}, POD_ADD, True, id="no-filter-matches-all"),
    pytest.param({"filter": {"attributes": {"type": "dev.knative.apiserver.resource.add"}}},
                 POD_ADD, True, id="legacy-exact"),
    pytest.param({"filter": {"attributes": {"type": "dev.knative.apiserver.resource.add",
                                            "kind": "Service"}}}, POD_ADD, False,
                 id="legacy-all-pairs-must-match"),
    pytest.param({"filter": {"attributes": {"kind": ""}}}, PING, True,
                 id="legacy-empty-value-matches-missing"),
    pytest.param({"filter": {"attributes": {"controller": "x"}}}, POD_ADD, False,
                 id="legacy-missing-extension"),
    pytest.param({"filters": [{"prefix": {"type": "dev.knative.apiserver.resource."}}]},
                 POD_ADD, True, id="prefix"),
    pytest.param({"filters": [{"prefix": {"type": "dev.knative.apiserver.ref."}}]},
                 POD_ADD, False, id="prefix-mismatch"),
    pytest.param({"filters": [{"suffix": {"type": ".add"}}]}, POD_ADD, True, id="suffix"),
    pytest.param({"filters": [{"exact": {"kind": "pod"}}]}, POD_ADD, False,
                 id="exact-is-case-sensitive"),
    pytest.param({"filters": [{"exact": {"kind": "Pod"}}, {"suffix": {"type": ".delete"}}]},
                 POD_ADD, False, id="filters-list-is-anded"),
    pytest.param({"filters": [{"any": [{"exact": {"kind": "Job"}}, {"exact": {"kind": "Pod"}}]}]},
                 POD_ADD, True, id="any"),
    pytest.param({"filters": [{"all": [{"exact": {"kind": "Pod"}}, {"exact": {"name": "q"}}]}]},
                 POD_ADD, False, id="all"),
    pytest.param({"filters": [{"not": {"exact": {"kind": "Pod"}}}]}, POD_ADD, False, id="not"),
    pytest.param({"filters": [{"not": {"exact": {"kind": "Pod"}}}]}, PING, True,
                 id="not-of-missing-attribute"),
    pytest.param({"filters": [{"prefix": {"kind": "P"}}]}, PING, False,
                 id="prefix-on-missing-attribute"),
    pytest.param({"filters": [{"exact": {"kind": "Service"}}],
                  "filter": {"attributes": {"kind": "Pod"}}}, POD_ADD, False,
                 id="filters-override-filter"),
    pytest.param({"filters": [{"any": [
        {"all": [{"prefix": {"type": "dev.knative.apiserver.resource."}},
                 {"exact": {"kind": "Pod"}}]},
        {"exact": {"type": "dev.knative.sources.ping"}}]}]}, PING, True,
                 id="nested-resource-or-ping"),
])
def test_matching(spec: dict[str, Any], attributes: dict[str, str], expected: bool) -> None:
    assert compile_trigger_filter(spec).matches(attributes) is expected


@pytest.mark.parametrize(("spec", "message"), [
    pytest.param({"filters": [{"cesql": "kind = 'Pod'"}]}, "cesql", id="cesql"),
    pytest.param({"filters": [{"exact": {"kind": "Pod"}, "prefix": {"type": "x"}}]},
                 "exactly one", id="two-dialects"),
    pytest.param({"filters": [{"any": []}]}, "non-empty", id="empty-any"),
    pytest.param({"filters": [{"regex": {"kind": "P.*"}}]}, "unknown", id="unknown-dialect"),
    pytest.param({"filters": [{"exact": {"kind": ""}}]}, "empty", id="empty-exact-value"),
    pytest.param({"filters": {"exact": {"kind": "Pod"}}}, "list", id="filters-not-a-list"),
])
def test_unsupported_filters_are_refused(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(TriggerSpecError, match=message):
        compile_trigger_filter(spec)


def test_attributes_of_both_content_modes() -> None:
    binary = binary_attributes({"Ce-Type": "t", "ce-id": "1", "Ce-Controller": "a%20b",
                                "Content-Type": "application/json", "Kn-Namespace": "x"})
    assert binary == {"type": "t", "id": "1", "controller": "a b",
                      "datacontenttype": "application/json"}
    structured = structured_attributes({"type": "t", "id": "1", "data": {"a": 1},
                                        "sequence": 3, "flag": True})
    assert structured == {"type": "t", "id": "1", "sequence": "3", "flag": "true"}
