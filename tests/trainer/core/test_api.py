"""The Trainer models: defaults, namespace resolution, status serialisation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from functions.trainer.core.api import ManagementState, Trainer, TrainerStatus

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("spec", "namespace", "state"), [
    pytest.param({}, "opendatahub", ManagementState.MANAGED, id="defaults"),
    pytest.param({"appNamespace": ""}, "opendatahub", ManagementState.MANAGED, id="empty-ns"),
    pytest.param({"appNamespace": "redhat-ods-applications", "managementState": "Removed"},
                 "redhat-ods-applications", ManagementState.REMOVED, id="set"),
    pytest.param({"featureGates": {"A": True}, "controllers": [{"name": "c"}], "extra": 1},
                 "opendatahub", ManagementState.MANAGED, id="unused-fields-accepted"),
])
def test_spec(spec: dict[str, Any], namespace: str, state: ManagementState) -> None:
    trainer = Trainer.from_object({"metadata": {"name": "default-trainer"}, "spec": spec})
    assert (trainer.spec.namespace, trainer.spec.management_state) == (namespace, state)


@pytest.mark.parametrize("spec", [
    pytest.param({"managementState": "Unmanaged"}, id="bad-state"),
    pytest.param({"featureGates": {"A": "maybe"}}, id="bad-gate"),
    pytest.param({"controllers": [{}]}, id="controller-without-name"),
])
def test_invalid_spec_raises(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Trainer.from_object({"metadata": {"name": "default-trainer"}, "spec": spec})


def test_sample_parses() -> None:
    sample = yaml.safe_load((REPO / "config" / "samples" / "trainer.yaml").read_text())
    trainer = Trainer.from_object(sample)
    assert trainer.metadata.name == "default-trainer"
    assert not trainer.removed and not trainer.deleting


def test_status_round_trip_drops_empty_fields() -> None:
    stored = {"phase": "Ready", "observedGeneration": 2, "releases": [{"name": "platform"}],
              "conditions": [{"type": "Ready", "status": "True",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    status = TrainerStatus.model_validate(stored)
    assert status.to_object() == stored
