"""Dispatch rules that need no API server: verdicts, per-key serialisation, requeue timers."""

from __future__ import annotations

import threading
import time

import pytest

from functions.core.keys import ObjectKey
from functions.runtime.dispatch import (
    Dispatcher,
    KeyLocks,
    Outcome,
    RequeueTimers,
    Route,
    combine,
)
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context, Result
from tests.runtime.controllers import Calls, recording_controller
from tests.runtime.test_app import refusing_kube


def no_recorder() -> EventRecorder:
    return EventRecorder(refusing_kube(None), "test")


A = ObjectKey("kubeflow.org/v1", "PyTorchJob", "ns", "a")
B = ObjectKey("kubeflow.org/v1", "PyTorchJob", "ns", "b")


@pytest.mark.parametrize(("outcomes", "expected"), [
    pytest.param([], Outcome("ignored", "no controller handles this object"), id="nothing"),
    pytest.param([Outcome("ok", runs=1), Outcome("ignored")], Outcome("ok", runs=1),
                 id="ok"),
    pytest.param([Outcome("ok", runs=1), Outcome("invalid", "bad spec", runs=1)],
                 Outcome("invalid", "bad spec", runs=2), id="invalid"),
    pytest.param([Outcome("invalid", "bad", runs=1),
                  Outcome("retry", "api down", 2.0, 1, "temporary"),
                  Outcome("retry", "boom", 30.0, 1, "bug")],
                 Outcome("retry", "api down; boom", 30.0, 3, "bug,temporary"),
                 id="retry-wins-with-the-longest-wait"),
    pytest.param([Outcome("busy", "a is busy", 5.0), Outcome("ok", runs=1)],
                 Outcome("busy", "a is busy", 5.0, 1), id="busy"),
])
def test_combine(outcomes: list[Outcome], expected: Outcome) -> None:
    assert combine(outcomes) == expected


def test_same_key_is_serialised_other_keys_run_in_parallel() -> None:
    locks = KeyLocks()
    active: dict[str, int] = {"a": 0, "b": 0}
    peak: dict[str, int] = {"a": 0, "b": 0}
    overlap = threading.Event()
    guard = threading.Lock()

    def work(key: ObjectKey, label: str) -> None:
        with locks.hold(key, timeout=10) as acquired:
            assert acquired
            with guard:
                active[label] += 1
                peak[label] = max(peak[label], active[label])
                if active["a"] and active["b"]:
                    overlap.set()
            time.sleep(0.02)
            with guard:
                active[label] -= 1

    # Same object under another version shares the lock: versions name one object.
    a_other_version = ObjectKey("kubeflow.org/v2", "PyTorchJob", "ns", "a")
    threads = [threading.Thread(target=work, args=(key, label)) for key, label in
               [(A, "a"), (a_other_version, "a"), (A, "a"), (B, "b"), (B, "b")]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak == {"a": 1, "b": 1}
    assert overlap.is_set()
    assert len(locks) == 0


def test_a_key_held_too_long_answers_busy() -> None:
    calls = Calls()
    dispatcher = Dispatcher("reconcile", [recording_controller(calls)],
                            lambda: refusing_kube(None), no_recorder, lock_timeout=0.05)
    route = Route(dispatcher.controllers[0], A)
    with dispatcher.locks.hold(A, timeout=1):
        outcome = dispatcher.run(route)
    assert (outcome.kind, outcome.retry_after) == ("busy", 5.0)
    assert calls.keys() == []
    assert dispatcher.run(route).kind == "ok"


def test_requeue_after_runs_the_key_again() -> None:
    calls = Calls()
    first = [True]

    def requeue_once(ctx: Context, key: ObjectKey) -> Result | None:
        if first[0]:
            first[0] = False
            return Result(requeue_after=0.05)
        return None

    dispatcher = Dispatcher("reconcile", [recording_controller(calls, requeue_once)],
                            lambda: refusing_kube(None), no_recorder)
    assert dispatcher.run(Route(dispatcher.controllers[0], A)).kind == "ok"
    assert dispatcher.timers.pending() == 1
    deadline = time.monotonic() + 5
    while len(calls.keys()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls.keys() == [A, A]
    assert dispatcher.timers.pending() == 0


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
