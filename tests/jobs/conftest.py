"""Cluster tests of the training jobs need pods that the scheduler can place on kwok nodes."""

from __future__ import annotations

import pytest

from functions.kube import resources
from functions.kube.client import KubeClient

NOT_READY = "node.kubernetes.io/not-ready"


def untaint_nodes(kube: KubeClient) -> None:
    """Drop the not-ready taint admission puts on new nodes (no node-lifecycle controller runs
    in the local cluster to remove it once kwok reports them Ready)."""
    for node in kube.list(resources.NODES):
        taints = node.get("spec", {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != NOT_READY]
        if kept != taints:
            kube.patch(resources.NODES, node["metadata"]["name"], {"spec": {"taints": kept}})


@pytest.fixture(autouse=True)
def _schedulable_nodes(request: pytest.FixtureRequest) -> None:
    if "kube" in request.fixturenames:
        untaint_nodes(request.getfixturevalue("kube"))
