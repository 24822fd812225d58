"""Requeue timers: one pending timer per route, the earliest request wins."""

from __future__ import annotations

import time

from functions.core.keys import ObjectKey
from functions.runtime.outcomes import Outcome, Route
from functions.runtime.passes import RequeueTimers
from tests.runtime.controllers import Calls, recording_controller

A = ObjectKey("kubeflow.org/v1", "PyTorchJob", "ns", "a")
B = ObjectKey("kubeflow.org/v1", "PyTorchJob", "ns", "b")


def test_timers_keep_the_earliest_request_per_key() -> None:
    fired: list[tuple[float, ObjectKey]] = []
    started = time.monotonic()

    def run(route: Route) -> Outcome:
        fired.append((time.monotonic() - started, route.key))
        return Outcome("ok")

    calls = Calls()
    controller = recording_controller(calls)
    timers = RequeueTimers(run)
    timers.schedule(Route(controller, A), 0.3)
    timers.schedule(Route(controller, A), 0.05)
    timers.schedule(Route(controller, A), 0.2)
    timers.schedule(Route(controller, B), 0.05)
    assert timers.pending() == 2
    time.sleep(0.5)
    assert sorted(key.name for _, key in fired) == ["a", "b"]
    assert all(elapsed < 0.25 for elapsed, _ in fired)
    timers.schedule(Route(controller, A), 10)
    timers.cancel_all()
    assert timers.pending() == 0
