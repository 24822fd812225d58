"""The Trainer's lifecycle: Ready, Degraded and Removed from its conditions, and the event."""

from __future__ import annotations

from typing import Any

import pytest

from functions.core.lifecycle import event_id
from functions.trainer.core import lifecycle

Obj = dict[str, Any]


def cond(type_: str, status: str, second: int, reason: str = "") -> Obj:
    return {"type": type_, "status": status, "reason": reason, "message": f"{type_} {status}",
            "lastTransitionTime": f"2026-01-01T00:00:{second:02d}Z"}


@pytest.mark.parametrize(("conditions", "shown"), [
    pytest.param([cond("Ready", "True", 5), cond("Degraded", "False", 1)], [("ready", 5)],
                 id="ready"),
    pytest.param([cond("Ready", "False", 5, "DeploymentsNotReady")], [], id="not-ready"),
    pytest.param([cond("Ready", "False", 7, "Removed")], [("removed", 7)], id="removed"),
    pytest.param([cond("Ready", "False", 7, "JobSetOperatorDegraded"),
                  cond("Degraded", "True", 6)], [("degraded", 6)], id="degraded"),
    pytest.param([cond("ProvisioningSucceeded", "True", 3)], [], id="other-conditions"),
])
def test_transitions(conditions: list[Obj], shown: list[tuple[str, int]]) -> None:
    found = lifecycle.RULES.transitions({"conditions": conditions})
    assert [(t.name, t.at.second) for t in found] == shown


def test_the_event_of_ready() -> None:
    status: Obj = {"phase": "Ready", "conditions": [cond("Ready", "True", 5)],
                   "releases": [{"name": "trainer", "version": "v2.0.0"}]}
    trainer = {"metadata": {"name": "default-trainer", "uid": "uid-t"},
               "spec": {"appNamespace": "opendatahub"}, "status": status}
    [ready] = lifecycle.RULES.transitions(status)
    attributes, data = lifecycle.lifecycle_event(trainer, ready)
    assert attributes == {
        "specversion": "1.0", "id": event_id("uid-t", ready),
        "type": "org.opendatahub.training.trainer.ready",
        "source": "/apis/components.platform.opendatahub.io/v1alpha1/trainers/default-trainer",
        "subject": "default-trainer", "time": "2026-01-01T00:00:05Z",
        "datacontenttype": "application/json"}
    assert data.model_dump(exclude_none=True) == {
        "transition": "ready", "kind": "Trainer",
        "apiVersion": "components.platform.opendatahub.io/v1alpha1", "name": "default-trainer",
        "uid": "uid-t", "time": "2026-01-01T00:00:05Z", "reason": "", "message": "Ready True",
        "phase": "Ready", "appNamespace": "opendatahub",
        "releases": [{"name": "trainer", "version": "v2.0.0"}]}
