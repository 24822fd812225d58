from __future__ import annotations

from typing import Any

import pytest

from devstack.knative_stack import cron_every, with_resync

PING: dict[str, Any] = {"apiVersion": "sources.knative.dev/v1", "kind": "PingSource",
        "metadata": {"name": "odh-training-resync"}, "spec": {"schedule": "*/5 * * * *"}}
BROKER: dict[str, Any] = {"apiVersion": "eventing.knative.dev/v1", "kind": "Broker",
                          "metadata": {"name": "b"}}


@pytest.mark.parametrize(("seconds", "schedule"), [
    pytest.param(1, "* * * * * *", id="every-second"),
    pytest.param(30, "*/30 * * * * *", id="seconds"),
    pytest.param(60, "0 * * * * *", id="one-minute"),
    pytest.param(300, "0 */5 * * * *", id="minutes"),
    pytest.param(3600, "0 0 * * * *", id="one-hour"),
    pytest.param(21600, "0 0 */6 * * *", id="hours"),
])
def test_cron_every(seconds: float, schedule: str) -> None:
    assert cron_every(seconds) == schedule


@pytest.mark.parametrize("seconds", [
    pytest.param(0.5, id="fraction"),
    pytest.param(-5, id="negative"),
    pytest.param(45, id="not-dividing-a-minute"),
    pytest.param(90, id="between-units"),
    pytest.param(86400, id="a-day"),
])
def test_cron_every_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match=r"resync period|cannot fire"):
        cron_every(seconds)


@pytest.mark.parametrize(("resync", "schedules"), [
    pytest.param(None, ["*/5 * * * *"], id="as-written"),
    pytest.param(0, [], id="off"),
    pytest.param(30, ["*/30 * * * * *"], id="overridden"),
])
def test_with_resync(resync: float | None, schedules: list[str]) -> None:
    kept = with_resync([BROKER, PING], resync)
    assert [o["spec"]["schedule"] for o in kept if o["kind"] == "PingSource"] == schedules
    assert BROKER in kept
    assert PING["spec"]["schedule"] == "*/5 * * * *"  # the input is not changed
