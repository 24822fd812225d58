"""When a function catches up on what a stopped ApiServerSource adapter missed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from functions.core.event_sources import (
    SETTLE_SECONDS,
    after_adapter_event,
    is_adapter_pod,
)

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).isoformat().replace("+00:00", "Z")


def pod(name: str = "a", *, up: float | None = 60.0, ready: bool = True,
        terminating: bool = False, restarted: float | None = None,
        source: str = "odh-training-objects") -> dict[str, Any]:
    """An adapter pod of ``source``: its container running for ``up`` seconds (``None``: not
    running), its last run ended ``restarted`` seconds ago."""
    status: dict[str, Any] = {"name": "receive-adapter", "restartCount": 0,
                              "state": {"running": {"startedAt": stamp(up)}} if up is not None
                              else {"waiting": {"reason": "ContainerCreating"}}}
    if restarted is not None:
        status["restartCount"] = 1
        status["lastState"] = {"terminated": {"exitCode": 2, "finishedAt": stamp(restarted)}}
    meta: dict[str, Any] = {"name": name, "namespace": "opendatahub", "labels": {
        "eventing.knative.dev/source": "apiserver-source-controller",
        "eventing.knative.dev/sourceName": source}}
    if terminating:
        meta["deletionTimestamp"] = stamp(1)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": {
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": [status]}}


@pytest.mark.parametrize(("operation", "event_pod", "now_pods", "action", "wait"), [
    pytest.param("delete", pod("old"), [pod("new", up=60)], "resync", 0.0,
                 id="deleted-successor-settled"),
    pytest.param("delete", pod("old"), [pod("new", up=4)], "wait", SETTLE_SECONDS - 4,
                 id="deleted-successor-just-started"),
    pytest.param("delete", pod("old"), [pod("new", up=60, ready=False)], "wait",
                 SETTLE_SECONDS, id="deleted-successor-not-ready"),
    pytest.param("delete", pod("old"), [pod("new", up=None, ready=False)], "wait",
                 SETTLE_SECONDS, id="deleted-successor-not-running"),
    pytest.param("delete", pod("old"), [pod("old", terminating=True)], "wait", SETTLE_SECONDS,
                 id="deleted-no-successor-yet"),
    pytest.param("delete", pod("old"), [], "ignore", 0.0, id="deleted-source-gone"),
    pytest.param("delete", pod("old"), [pod("new", up=60), pod("newer", up=2)], "wait",
                 SETTLE_SECONDS - 2, id="deleted-newest-successor-decides"),
    pytest.param("update", pod("a", up=60, restarted=61), [pod("a", up=60, restarted=61)],
                 "resync", 0.0, id="container-restarted-and-settled"),
    pytest.param("update", pod("a", up=3, restarted=4), [pod("a", up=3, restarted=4)],
                 "wait", SETTLE_SECONDS - 3, id="container-restarted-just-now"),
    pytest.param("update", pod("a", up=600, restarted=601), [pod("a", up=600, restarted=601)],
                 "ignore", 0.0, id="container-restart-long-ago"),
    pytest.param("update", pod("new", up=1), [pod("old"), pod("new", up=1)], "ignore", 0.0,
                 id="successor-starting-beside-a-running-adapter"),
    pytest.param("add", pod("new", up=None), [pod("old"), pod("new", up=None)], "ignore", 0.0,
                 id="successor-created"),
])
def test_a_stopped_adapter_is_caught_up_on_once_its_successor_settled(
        operation: str, event_pod: dict[str, Any], now_pods: list[dict[str, Any]],
        action: str, wait: float) -> None:
    decision = after_adapter_event(operation, event_pod, now_pods, NOW)
    assert decision.action == action, decision
    assert decision.wait_seconds == pytest.approx(wait), decision
    assert "odh-training-objects" in decision.reason


@pytest.mark.parametrize(("labels", "expected"), [
    pytest.param({"eventing.knative.dev/source": "apiserver-source-controller",
                  "eventing.knative.dev/sourceName": "s"}, True, id="adapter"),
    pytest.param({"eventing.knative.dev/source": "apiserver-source-controller"}, False,
                 id="no-source-name"),
    pytest.param({"eventing.knative.dev/source": "ping-source-controller",
                  "eventing.knative.dev/sourceName": "s"}, False, id="another-controller"),
    pytest.param({"training.kubeflow.org/job-name": "j"}, False, id="job-pod"),
    pytest.param(None, False, id="no-labels"),
])
def test_adapter_pods_are_told_by_the_controllers_labels(labels: dict[str, str] | None,
                                                         expected: bool) -> None:
    assert is_adapter_pod({"metadata": {"name": "p", "labels": labels}}) is expected
