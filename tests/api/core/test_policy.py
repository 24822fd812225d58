"""The queue priority policy: read from ConfigMap data, refusals, and the capped priority."""

from __future__ import annotations

import pytest

from functions.api.core.policy import PriorityPolicy, policy_from_data


@pytest.mark.parametrize(("data", "policy", "ignored"), [
    pytest.param(None, PriorityPolicy(0, {}), [], id="no-configmap-nobody-above-0"),
    pytest.param({}, PriorityPolicy(0, {}), [], id="empty"),
    pytest.param({"maxPriority": "10", "maxPriority.team-a": "100", "maxPriority.team-b": "0"},
                 PriorityPolicy(10, {"team-a": 100, "team-b": 0}), [], id="default-and-two"),
    pytest.param({"maxPriority": " 7 "}, PriorityPolicy(7, {}), [], id="spaces"),
    pytest.param({"maxPriority": "ten", "maxPriority.x": "5000", "maxPriority.y": "-1",
                  "priority": "5"},
                 PriorityPolicy(0, {}),
                 ["maxPriority", "maxPriority.x", "maxPriority.y", "priority"],
                 id="bad-entries-grant-nothing"),
])
def test_policy_from_data(data: dict[str, str] | None, policy: PriorityPolicy,
                          ignored: list[str]) -> None:
    found, problems = policy_from_data(data)
    assert found == policy
    assert [p.split(":")[0] for p in problems] == ignored


POLICY = PriorityPolicy(10, {"vip": 500, "low": 0})


@pytest.mark.parametrize(("namespace", "priority", "refused", "effective"), [
    pytest.param("any", 10, False, 10, id="at-the-default"),
    pytest.param("any", 11, True, 10, id="above-the-default"),
    pytest.param("vip", 500, False, 500, id="namespace-above-the-default"),
    pytest.param("vip", 1000, True, 500, id="above-the-namespace-max"),
    pytest.param("low", 1, True, 0, id="namespace-below-the-default"),
    pytest.param("low", -1000, False, -1000, id="lowering-is-always-allowed"),
])
def test_refusal_and_effective_priority(namespace: str, priority: int, refused: bool,
                                        effective: int) -> None:
    reason = POLICY.refusal(namespace, priority)
    assert (reason is not None) is refused
    if reason:
        assert str(POLICY.max_for(namespace)) in reason and namespace in reason
    assert POLICY.effective(namespace, priority) == effective
