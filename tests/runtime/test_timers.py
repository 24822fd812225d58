"""Requeue timers: one pending timer per route, the earliest request wins; many timers cost
one waiting thread and a bounded pool; a transient failure is tried again; cancelled timers
never fire; past the limit a due time is left to the wakes and the resync."""

from __future__ import annotations

import threading
import time

import pytest

from functions.core.keys import ObjectKey
from functions.runtime.outcomes import Outcome, Route
from functions.runtime.timers import RequeueTimers
from tests.runtime.controllers import Calls, recording_controller
from tests.support import wait_for

A = ObjectKey("kubeflow.org/v1", "PyTorchJob", "ns", "a")
B = ObjectKey("kubeflow.org/v1", "PyTorchJob", "ns", "b")
CONTROLLER = recording_controller(Calls())


def key(index: int) -> ObjectKey:
    return ObjectKey("kubeflow.org/v1", "PyTorchJob", "ns", f"job-{index}")


def test_timers_keep_the_earliest_request_per_key() -> None:
    fired: list[tuple[float, ObjectKey]] = []
    started = time.monotonic()

    def run(route: Route) -> Outcome:
        fired.append((time.monotonic() - started, route.key))
        return Outcome("ok")

    timers = RequeueTimers(run)
    timers.schedule(Route(CONTROLLER, A), 0.3)
    timers.schedule(Route(CONTROLLER, A), 0.05)
    timers.schedule(Route(CONTROLLER, A), 0.2)
    timers.schedule(Route(CONTROLLER, B), 0.05)
    assert timers.pending() == 2
    time.sleep(0.5)
    assert sorted(key.name for _, key in fired) == ["a", "b"]
    assert all(elapsed < 0.25 for elapsed, _ in fired)
    timers.schedule(Route(CONTROLLER, A), 10)
    timers.cancel_all()
    assert timers.pending() == 0


def test_thousands_of_timers_take_one_waiting_thread_and_a_bounded_pool() -> None:
    fired: list[ObjectKey] = []
    running = [0, 0]   # now, most at once
    lock = threading.Lock()

    def run(route: Route) -> Outcome:
        with lock:
            running[0] += 1
            running[1] = max(running)
        time.sleep(0.001)
        with lock:
            running[0] -= 1
            fired.append(route.key)
        return Outcome("ok")

    before = set(threading.enumerate())

    def started() -> list[threading.Thread]:
        return [t for t in threading.enumerate()
                if t not in before and t.name.startswith("requeue")]

    timers = RequeueTimers(run, workers=4)
    for index in range(3000):
        timers.schedule(Route(CONTROLLER, key(index)), 0.2 + (index % 50) / 100)
    assert timers.pending() == 3000
    assert [t.name for t in started()] == ["requeue-timers"]
    wait_for(lambda: len(fired) == 3000, 20, 0.05, "every timer to fire")
    assert len(set(fired)) == 3000 and timers.pending() == 0 and 1 <= running[1] <= 4
    # with nothing left to wait for, the waiting thread and the pool end
    wait_for(lambda: not started(), 5, 0.05, "the timers' threads to end")


@pytest.mark.parametrize(("cause", "runs"), [
    pytest.param("temporary", 2, id="transient-failure-tried-again"),
    pytest.param("bug", 1, id="other-failure-left-to-its-wake"),
])
def test_a_transient_failure_is_tried_again(cause: str, runs: int) -> None:
    seen: list[float] = []

    def run(route: Route) -> Outcome:
        seen.append(time.monotonic())
        if len(seen) == 1:
            return Outcome("retry", "busy", 0.05, 1, cause)
        return Outcome("ok")

    timers = RequeueTimers(run)
    timers.schedule(Route(CONTROLLER, A), 0.0)
    time.sleep(0.4)
    assert len(seen) == runs
    timers.cancel_all()


def test_cancelled_timers_never_fire_and_the_limit_is_kept() -> None:
    fired: list[ObjectKey] = []

    def run(route: Route) -> Outcome:
        fired.append(route.key)
        return Outcome("ok")

    timers = RequeueTimers(run, limit=2)
    for index in range(3):
        timers.schedule(Route(CONTROLLER, key(index)), 0.1)
    assert timers.pending() == 2
    timers.cancel_all()
    time.sleep(0.3)
    assert fired == []
    timers.schedule(Route(CONTROLLER, A), 0.0)
    wait_for(lambda: fired == [A], 2, 0.02, "a timer after the cancel")
