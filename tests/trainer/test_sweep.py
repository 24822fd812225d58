"""The sweep under least privilege: a namespaced type it may not list everywhere is listed in
the operand namespace, and an object it may not delete is left alone."""

from __future__ import annotations

from typing import Any

import pytest

from functions.kube import resources
from functions.kube.client import ApiError
from functions.trainer import sweep
from tests.trainer.scripted import FORBIDDEN, Answer, items, scripted

LABEL = "platform.opendatahub.io/part-of"
STALE = {"platform.opendatahub.io/version": "0.9.0"}  # any stamp counts as stale on cleanup


def configmap(name: str, namespace: str = "apps") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": {LABEL: "trainer"},
                         "annotations": STALE}}


@pytest.mark.parametrize(("answers", "namespace", "names"), [
    pytest.param({("GET", "/api/v1/configmaps"): (200, items(configmap("a", "x")))}, "apps",
                 ["a"], id="everywhere-when-allowed"),
    pytest.param({("GET", "/api/v1/configmaps"): FORBIDDEN,
                  ("GET", "/api/v1/namespaces/apps/configmaps"): (200, items(configmap("b")))},
                 "apps", ["b"], id="operand-namespace-when-forbidden-everywhere"),
    pytest.param({("GET", "/api/v1/configmaps"): FORBIDDEN}, None, [],
                 id="forbidden-without-a-namespace-is-empty"),
    pytest.param({}, "apps", [], id="not-served-is-empty"),
])
def test_labelled_everywhere(answers: dict[tuple[str, str], Answer], namespace: str | None,
                             names: list[str]) -> None:
    kube, _ = scripted(answers)
    found = sweep.labelled_everywhere(kube, resources.CONFIGMAPS, namespace)
    assert [o["metadata"]["name"] for o in found] == names


@pytest.mark.parametrize(("status", "expected"), [
    pytest.param(200, True, id="deleted"),
    pytest.param(404, False, id="already-gone"),
    pytest.param(403, False, id="not-ours-to-delete"),
])
def test_delete_object(status: int, expected: bool) -> None:
    kube, _ = scripted({("DELETE", "/api/v1/namespaces/apps/configmaps/c"): (status, {})})
    assert sweep.delete_object(kube, configmap("c"), resources.CONFIGMAPS, "Foreground") \
        is expected


def test_delete_object_raises_what_is_not_about_permission() -> None:
    kube, _ = scripted({("DELETE", "/api/v1/namespaces/apps/configmaps/c"): (
        422, {"reason": "Invalid", "message": "no"})})
    with pytest.raises(ApiError):
        sweep.delete_object(kube, configmap("c"), resources.CONFIGMAPS, "Foreground")


def test_sweep_reports_only_what_it_deleted() -> None:
    discovery = {"resources": [{"name": "configmaps", "kind": "ConfigMap", "namespaced": True,
                                "verbs": ["list", "delete"]}]}
    kube, transport = scripted({
        ("GET", "/api/v1"): (200, discovery),
        ("GET", "/apis"): (200, {"groups": []}),
        ("GET", "/api/v1/configmaps"): FORBIDDEN,
        ("GET", "/api/v1/namespaces/apps/configmaps"): (
            200, items(configmap("ours"), configmap("theirs"))),
        ("DELETE", "/api/v1/namespaces/apps/configmaps/ours"): (200, {}),
        ("DELETE", "/api/v1/namespaces/apps/configmaps/theirs"): FORBIDDEN,
    })
    assert sweep.sweep(kube, stamp=None, namespace="apps") == ["ConfigMap/apps/ours"]
    assert ("DELETE", "/api/v1/namespaces/apps/configmaps/theirs") in transport.seen
