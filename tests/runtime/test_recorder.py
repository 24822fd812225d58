"""When a background recorder sends its Events: Normal ones wait for the function to be idle
(for at most the hold), Warnings never wait; a function's recorder knows when its passes are
in flight. The Events' content and their counts on repeats
are checked against a real API server by the controllers' cluster tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from flask import Flask

from functions.core.keys import ObjectKey
from functions.kube.client import KubeClient
from functions.kube.transport import Request, Response
from functions.runtime.app import create_app, runtime_of
from functions.runtime.recorder import NORMAL, WARNING, EventRecorder
from functions.runtime.registry import Context
from tests.core.test_events import load_sample
from tests.runtime.controllers import Calls, recording_controller

JOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
       "metadata": {"name": "mnist", "namespace": "team-a", "uid": "u-1"}}


@dataclass
class CreatedEvents:
    """Answers every Event create 201 and notes the reason and when it arrived."""

    sent: list[tuple[str, float]] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)

    def send(self, request: Request, timeout: float) -> Response:
        assert request.method == "POST" and request.path.endswith("/events"), request.path
        event = json.loads(request.body or b"{}")
        self.sent.append((event["reason"], time.monotonic()))
        self.arrived.set()
        return Response(201, {"Content-Type": "application/json"}, request.body or b"{}")

    def refresh_credentials(self) -> None:
        pass


class Busy:
    """A switch standing in for "a pass is in flight"."""

    def __init__(self, busy: bool) -> None:
        self.busy = busy

    def __call__(self) -> bool:
        return self.busy


_made: list[EventRecorder] = []


@pytest.fixture(autouse=True)
def _close_recorders() -> Iterator[None]:
    yield
    while _made:
        _made.pop().close()


def made(found: EventRecorder) -> EventRecorder:
    """``found``, closed (its sender stopped) after the test."""
    _made.append(found)
    return found


def recorder(busy: Busy | None, hold: float = 30.0) -> tuple[EventRecorder, CreatedEvents]:
    transport = CreatedEvents()
    found = made(EventRecorder(KubeClient(transport, retries=0), "test", background=True,
                               busy=busy, hold_seconds=hold))
    found.quiet_seconds, found.poll_seconds = 0.1, 0.01
    return found, transport


def wait_sent(transport: CreatedEvents, count: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while len(transport.sent) < count:
        assert time.monotonic() < deadline, transport.sent
        time.sleep(0.01)


@pytest.mark.parametrize("busy", [
    pytest.param(None, id="no-busy-signal"),
    pytest.param(Busy(False), id="idle"),
])
def test_an_idle_function_sends_at_once(busy: Busy | None) -> None:
    found, transport = recorder(busy)
    started = time.monotonic()
    found.record(JOB, NORMAL, "SuccessfulCreatePod", "Created pod: mnist-master-0")
    wait_sent(transport, 1)
    assert transport.sent[0][1] - started < 1.0


def test_a_normal_event_waits_until_the_function_is_idle_then_the_rest_follow() -> None:
    busy = Busy(True)
    found, transport = recorder(busy)
    for index in range(3):
        found.record(JOB, NORMAL, f"Created{index}", "Created")
    time.sleep(0.5)
    assert transport.sent == []
    idle_at = time.monotonic()
    busy.busy = False
    wait_sent(transport, 3)
    assert [reason for reason, _ in transport.sent] == ["Created0", "Created1", "Created2"]
    assert transport.sent[0][1] - idle_at >= found.quiet_seconds
    assert transport.sent[2][1] - transport.sent[0][1] < found.quiet_seconds


def test_a_warning_does_not_wait_for_a_busy_function() -> None:
    found, transport = recorder(Busy(True))
    found.record(JOB, WARNING, "InvalidSpec", "replica spec Master: replicas must be 1")
    wait_sent(transport, 1)
    assert transport.sent[0][0] == "InvalidSpec"


def test_a_warning_overtakes_the_normal_events_held_before_it() -> None:
    busy = Busy(True)
    found, transport = recorder(busy)
    found.record(JOB, NORMAL, "SuccessfulCreatePod", "Created pod: mnist-master-0")
    found.record(JOB, WARNING, "FailedCreatePod", "Error creating: quota exceeded")
    wait_sent(transport, 1)
    assert [reason for reason, _ in transport.sent] == ["FailedCreatePod"]
    busy.busy = False
    wait_sent(transport, 2)
    assert transport.sent[1][0] == "SuccessfulCreatePod"


def test_a_burst_of_held_events_wakes_the_sender_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sender is woken only when it may be waiting with no timeout (nothing queued) or
    for a Warning: Normal Events recorded while others are held cost no wake-up each."""
    notified: list[threading.Condition] = []

    class Counting(threading.Condition):
        def notify(self, n: int = 1) -> None:
            notified.append(self)
            super().notify(n)

    monkeypatch.setattr(threading, "Condition", Counting)
    busy = Busy(True)
    found, transport = recorder(busy)
    notified.clear()  # the sender thread's start notifies too
    for index in range(50):
        found.record(JOB, NORMAL, f"Created{index}", "Created")
    assert notified == [found._ready]
    found.record(JOB, WARNING, "FailedCreatePod", "Error creating: quota exceeded")
    assert notified == [found._ready] * 2
    wait_sent(transport, 1)
    busy.busy = False
    wait_sent(transport, 51)
    assert transport.sent[-1][0] == "Created49"


def test_a_normal_event_waits_no_longer_than_the_hold() -> None:
    found, transport = recorder(Busy(True), hold=0.3)
    queued = time.monotonic()
    found.record(JOB, NORMAL, "SuccessfulCreatePod", "Created pod: mnist-master-0")
    wait_sent(transport, 1)
    assert 0.3 <= transport.sent[0][1] - queued < 1.5


def test_a_full_queue_drops_what_does_not_fit() -> None:
    class Small(EventRecorder):
        queue_size = 2

    transport = CreatedEvents()
    found = made(Small(KubeClient(transport, retries=0), "test", background=True,
                       busy=Busy(True), hold_seconds=0.3))
    for index in range(5):
        found.record(JOB, NORMAL, f"Created{index}", "Created")
    wait_sent(transport, 2)
    time.sleep(0.5)
    assert [reason for reason, _ in transport.sent] == ["Created0", "Created1"]


def pass_in_flight(transport: CreatedEvents, release: threading.Event,
                   answers: list[int]) -> tuple[Flask, threading.Thread]:
    """A reconcile app whose handler records an Event and then waits for ``release``, and the
    delivery (started) whose pass it is; the delivery's status code goes to ``answers``."""
    def behaviour(ctx: Context, key: ObjectKey) -> None:
        ctx.recorder.record(JOB, NORMAL, "SuccessfulCreatePod", "Created pod: mnist-master-0")
        release.wait(5)

    app = create_app("reconcile", controllers=[recording_controller(Calls(), behaviour)],
                     kube_factory=lambda hook: KubeClient(transport, on_request=hook),
                     warm_up="now")
    headers, body = load_sample("02-captured-resource-update-pytorchjob-status.http.json")
    delivery = threading.Thread(
        target=lambda: answers.append(app.test_client().post("/", headers=headers,
                                                             data=body).status_code))
    delivery.start()
    return app, delivery


def test_a_functions_events_wait_for_its_passes_in_flight() -> None:
    """Through an app: the Event a handler records goes out only once its pass is over."""
    transport = CreatedEvents()
    release = threading.Event()
    answers: list[int] = []
    app, delivery = pass_in_flight(transport, release, answers)
    runtime_of(app).recorder().quiet_seconds = 0.1
    time.sleep(0.5)
    assert transport.sent == []  # recorded, held while the pass runs
    release.set()
    delivery.join(5)
    wait_sent(transport, 1)
    assert answers == [202]
    assert transport.sent[0][0] == "SuccessfulCreatePod"


@dataclass
class SlowEvents(CreatedEvents):
    """Takes ``seconds`` over each Event; ``started`` is set once the first is on its way."""

    seconds: float = 0.3
    started: threading.Event = field(default_factory=threading.Event)

    def send(self, request: Request, timeout: float) -> Response:
        self.started.set()
        time.sleep(self.seconds)
        return super().send(request, timeout)


def sender_ends(found: EventRecorder, timeout: float = 2.0) -> bool:
    for thread in found._senders:
        thread.join(timeout)
    return not any(thread.is_alive() for thread in found._senders)


def test_closing_sends_the_held_events_at_once() -> None:
    """A stopping function sends what it holds (its passes may still be in flight)."""
    found, transport = recorder(Busy(True), hold=30.0)
    reasons = ["SuccessfulCreatePod", "SuccessfulCreateService", "JobCreated"]
    for reason in reasons:
        found.record(JOB, NORMAL, reason, "Created")
    time.sleep(0.2)
    assert transport.sent == []  # held: the function is busy
    started = time.monotonic()
    assert found.close(flush_seconds=5.0) == 0
    assert time.monotonic() - started < 2.0
    assert [reason for reason, _ in transport.sent] == reasons
    assert sender_ends(found)


def test_closing_stops_at_its_deadline_and_counts_what_was_left() -> None:
    transport = SlowEvents()
    found = made(EventRecorder(KubeClient(transport, retries=0), "test", background=True))
    for index in range(5):
        found.record(JOB, NORMAL, f"Created{index}", "Created")
    assert transport.started.wait(2.0)
    assert found.close(flush_seconds=0.1) == 4  # the first was on its way
    assert sender_ends(found)
    assert [reason for reason, _ in transport.sent] == ["Created0"]


def test_events_recorded_after_closing_are_dropped() -> None:
    found, transport = recorder(None)
    assert found.close() == 0
    found.record(JOB, WARNING, "BackoffLimitExceeded", "failed")
    time.sleep(0.2)
    assert transport.sent == []
    assert sender_ends(found)


def test_a_stopping_worker_sends_the_events_its_pass_in_flight_recorded() -> None:
    """Through an app and the gunicorn hook a worker exits by: the Event stays held while the
    pass runs, and goes out when the worker stops, the pass still in flight."""
    from types import SimpleNamespace

    from functions.runtime.serve import gunicorn_options

    transport = CreatedEvents()
    release = threading.Event()
    answers: list[int] = []
    app, delivery = pass_in_flight(transport, release, answers)
    try:
        time.sleep(0.5)
        assert transport.sent == []
        gunicorn_options(8080, 1, 2)["worker_exit"](None, SimpleNamespace(wsgi=app))
        assert [reason for reason, _ in transport.sent] == ["SuccessfulCreatePod"]
        assert sender_ends(runtime_of(app).recorder())
    finally:
        release.set()
        delivery.join(5)
    assert answers == [202]
