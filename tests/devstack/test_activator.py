"""The dev stack's scale from zero: a function at zero starts at the first event its own
Trigger takes, once, and only events the Broker accepted after it stopped count."""

from __future__ import annotations

import threading
import time

import pytest

from devstack.activator import Activator, trigger_filters
from devstack.recording import RecordedRequest
from tests.support import REPO, wait_for


def ping(function: str) -> RecordedRequest:
    headers = {"ce-specversion": "1.0", "ce-id": function, "ce-type": "dev.knative.sources.ping",
               "ce-source": f"/pingsources/odh-training-wake-{function}",
               "ce-function": function}
    return RecordedRequest(headers=headers, body=b"{}", path="/", received="")


@pytest.fixture
def activator() -> tuple[Activator, list[RecordedRequest], list[str]]:
    events: list[RecordedRequest] = []
    actions: list[str] = []
    guard = threading.Lock()

    def record(action: str) -> None:
        with guard:
            actions.append(action)

    made = Activator(lambda: list(events),
                     trigger_filters(REPO / "eventing", REPO / "config" / "serving"),
                     lambda f: record(f"start {f}"), lambda f: record(f"stop {f}"))
    return made, events, actions


def test_a_function_at_zero_starts_at_the_first_event_its_trigger_takes(
        activator: tuple[Activator, list[RecordedRequest], list[str]]) -> None:
    made, events, actions = activator
    events.append(ping("gc"))          # before the scale to zero: does not count
    for function in ("status", "gc"):
        made.scale_to_zero(function)
    events.append(ping("reconcile"))   # no Trigger of theirs takes it
    time.sleep(0.3)
    assert made.at_zero() == {"status", "gc"}
    events.append(ping("status"))
    wait_for(lambda: "start status" in actions, 5, 0.05, "status started")
    assert made.at_zero() == {"gc"}
    [activation] = made.activations
    assert (activation.function, activation.attributes["function"]) == ("status", "status")
    made.wake_up("gc")
    assert actions == ["stop status", "stop gc", "start status", "start gc"]
    made.close()


def test_only_functions_with_a_trigger_scale_to_zero(
        activator: tuple[Activator, list[RecordedRequest], list[str]]) -> None:
    with pytest.raises(ValueError, match="no Trigger"):
        activator[0].scale_to_zero("dead-letters")
