"""A function's wakes against an API that keeps PingSources in memory: made only when no
wake yet to fire covers a due time, left alone for short ones, deleted once fired; a cluster
without Knative's sources (or refusing them) turns them off and the pass goes on; and the
dispatcher routes a wake to its own function's pass over every parent."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import pytest

from functions.core import wakes
from functions.core.events import ApiEvent
from functions.core.keys import ObjectKey
from functions.kube.client import KubeClient
from functions.kube.transport import Request, Response
from functions.runtime.dispatch import Dispatcher
from functions.runtime.registry import Context, FunctionName, Result
from functions.runtime.wakes import Wakes
from tests.runtime.controllers import Calls, recording_controller
from tests.runtime.test_dispatch import no_recorder

SOURCES = "/apis/sources.knative.dev/v1/namespaces/opendatahub/pingsources"
JOBS = "/apis/kubeflow.org/v1/pytorchjobs"


@dataclass
class Api:
    """PingSources of one namespace and a fixed list of PyTorchJobs; ``refuse`` answers
    every PingSource request with that status."""

    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)
    refuse: int = 0
    seen: list[str] = field(default_factory=list)

    def send(self, request: Request, timeout: float) -> Response:
        self.seen.append(f"{request.method} {request.path}")
        if request.path.startswith(SOURCES) and self.refuse:
            return _json(self.refuse, {"kind": "Status", "reason": "Refused", "message": "no"})
        if request.method == "GET" and request.path == JOBS:
            items = [{"metadata": {"name": n, "namespace": "ns"}} for n in self.jobs]
            return _json(200, {"metadata": {}, "items": items})
        if request.method == "GET" and request.path == SOURCES:
            selector = parse_qs(request.url_path().partition("?")[2]).get("labelSelector", [""])
            key, _, value = selector[0].partition("=")
            items = [s for s in self.sources.values()
                     if s["metadata"]["labels"].get(key) == value]
            return _json(200, {"metadata": {}, "items": items})
        if request.method == "POST" and request.path == SOURCES:
            assert request.body is not None
            obj = json.loads(request.body)
            name = obj["metadata"]["name"]
            if name in self.sources:
                return _json(409, {"kind": "Status", "reason": "AlreadyExists", "message": name})
            self.sources[name] = obj
            return _json(201, obj)
        if request.method == "DELETE" and request.path.startswith(SOURCES + "/"):
            gone = self.sources.pop(request.path.rpartition("/")[2], None)
            return _json(200 if gone else 404, gone or {"kind": "Status", "reason": "NotFound",
                                                         "message": "gone"})
        return _json(404, {"kind": "Status", "reason": "NotFound", "message": request.path})

    def refresh_credentials(self) -> None:
        pass


def _json(status: int, body: dict[str, Any]) -> Response:
    return Response(status, {"Content-Type": "application/json"}, json.dumps(body).encode())


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 6, 12, 3, 20, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def made(api: Api, clock: Clock, function: str = "status") -> tuple[Wakes, KubeClient]:
    kube = KubeClient(api, retries=0)
    return Wakes(function, lambda: kube, namespace="opendatahub", broker="odh-training",
                 clock=clock), kube


def minutes(api: Api) -> list[str]:
    return sorted(s["metadata"]["annotations"][wakes.MINUTE_ANNOTATION]
                  for s in api.sources.values())


def test_a_wake_is_made_only_for_a_due_time_no_pending_wake_covers() -> None:
    api, clock = Api(), Clock()
    wake, _ = made(api, clock)
    wake.ask(10.0)                     # stays in the process
    assert api.seen == []
    wake.ask(400.0)                    # 12:10:00
    wake.ask(900.0)                    # covered by 12:10
    wake.ask(100.0)                    # 12:05:00, earlier: a wake of its own
    assert minutes(api) == ["2026-12-06T12:05:00Z", "2026-12-06T12:10:00Z"]
    assert [s for s in api.seen if s.startswith("GET")] == [f"GET {SOURCES}"]  # listed once
    clock.now += timedelta(minutes=3)  # 12:05 has fired: it no longer covers anything
    wake.ask(60.0)                     # 12:07:20, met at 12:08
    assert "2026-12-06T12:08:00Z" in minutes(api)


def test_another_replicas_wake_for_the_same_minute_is_taken_as_made() -> None:
    api, clock = Api(), Clock()
    first, _ = made(api, clock)
    second, _ = made(api, clock)
    first.ask(30.0)
    second.ask(35.0)     # listed after the first made it: covered, nothing sent
    third, _ = made(api, clock)
    third._pending = set()  # knows of none: its create meets a 409
    third.ask(36.0)
    assert minutes(api) == ["2026-12-06T12:04:00Z"]
    assert first.off is second.off is third.off is None


def test_fired_wakes_are_deleted_and_later_ones_kept() -> None:
    api, clock = Api(), Clock()
    wake, _ = made(api, clock)
    wake.ask(100.0)
    other, _ = made(api, clock, "gc")
    other.ask(100.0)
    clock.now = clock.now.replace(minute=5, second=1)
    wake.ask(599.0)      # 12:15 is covered by nothing yet to fire: made
    assert wake.fired() == 1
    assert minutes(api) == ["2026-12-06T12:05:00Z", "2026-12-06T12:15:00Z"]  # gc's stays
    assert wake.fired() == 0


@pytest.mark.parametrize("status", [pytest.param(404, id="not-served"),
                                    pytest.param(403, id="forbidden")])
def test_a_cluster_without_pingsources_turns_wakes_off(status: int) -> None:
    api, clock = Api(refuse=status), Clock()
    wake, _ = made(api, clock)
    wake.ask(100.0)
    assert wake.off is not None and "PingSources" in wake.off
    sent = len(api.seen)
    wake.ask(200.0)
    assert wake.fired() == 0
    assert len(api.seen) == sent


def test_a_transient_failure_leaves_wakes_on() -> None:
    api, clock = Api(refuse=500), Clock()
    wake, _ = made(api, clock)
    wake.ask(100.0)
    assert wake.off is None
    api.refuse = 0
    wake.ask(100.0)
    assert minutes(api) == ["2026-12-06T12:05:00Z"]


def ping(function: str | None) -> ApiEvent:
    extensions = {wakes.EXTENSION: function} if function else {}
    return ApiEvent.model_construct(operation="resync", mode="ping", ref=None, object=None,
                                    id="1", source="/ping", type="dev.knative.sources.ping",
                                    subject=None, time=None, extensions=extensions)


def dispatcher(api: Api, clock: Clock, calls: Calls, function: FunctionName,
               delay: float | None) -> Dispatcher:
    def behaviour(ctx: Context, key: ObjectKey) -> Result | None:
        return Result(requeue_after=delay) if delay is not None else None

    kube = KubeClient(api, retries=0)
    wake = Wakes(function, lambda: kube, namespace="opendatahub", broker="odh-training",
                 clock=clock)
    return Dispatcher(function, [recording_controller(calls, behaviour)], lambda: kube,
                      no_recorder, wakes=wake, synced=lambda timeout: True)


@pytest.mark.parametrize(("function", "event", "passes"), [
    pytest.param("status", "status", 2, id="its-own-wake"),
    pytest.param("status", "gc", 0, id="another-functions-wake"),
    pytest.param("status", None, 2, id="a-resync-without-the-extension"),
    pytest.param("gc", "all", 2, id="the-periodic-resync"),
])
def test_a_wake_reaches_its_own_function_only(function: FunctionName, event: str | None,
                                              passes: int) -> None:
    api, clock, calls = Api(jobs=["a", "b"]), Clock(), Calls()
    outcome = dispatcher(api, clock, calls, function, None).handle(ping(event))
    assert len(calls.keys(function)) == passes
    assert outcome.kind == ("ok" if passes else "ignored")


def test_a_wake_passes_over_every_parent_makes_the_next_wake_and_deletes_itself() -> None:
    api, clock, calls = Api(jobs=["a", "b"]), Clock(), Calls()
    earlier = wakes.wake_source("status", datetime(2026, 12, 6, 12, 3, tzinfo=UTC),
                                "opendatahub", "odh-training")
    api.sources[earlier["metadata"]["name"]] = earlier
    status = dispatcher(api, clock, calls, "status", 300.0)
    assert status.handle(ping("status")).kind == "ok"
    assert len(calls.keys("status")) == 2
    # the fired wake is gone; the passes asked for 12:08:20, so 12:09 wakes next
    assert minutes(api) == ["2026-12-06T12:09:00Z"]
    assert status.timers.pending() == 2
    status.timers.cancel_all()
