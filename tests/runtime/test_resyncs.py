"""Passes over every parent: a resync and a wake read the function's caches once filled;
a kind not served is nothing to pass over; a list that fails asks for a retry; only one such
pass runs at a time; a wake whose pass fails keeps its PingSource for the Broker's retry."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from functions.core import wakes
from functions.core.errors import TemporaryError
from functions.core.keys import ObjectKey
from functions.kube.client import KubeClient
from functions.kube.transport import Request, Response
from functions.runtime import resyncs
from functions.runtime.dispatch import Dispatcher
from functions.runtime.outcomes import BUSY_RETRY_AFTER, Outcome
from functions.runtime.registry import Context, Obj, Result
from functions.runtime.wakes import Wakes
from tests.runtime.controllers import Calls, recording_controller
from tests.runtime.test_dispatch import no_recorder
from tests.runtime.test_wakes import JOBS, Api, Clock, _json, minutes


class Listing(Api):
    """:class:`~tests.runtime.test_wakes.Api` whose list of jobs answers ``status``."""

    def __init__(self, status: int, jobs: list[str]) -> None:
        super().__init__(jobs=jobs)
        self.status = status

    def send(self, request: Request, timeout: float) -> Response:
        if request.path == JOBS and self.status != 200:
            return _json(self.status, {"kind": "Status", "reason": "Refused", "message": "no"})
        return super().send(request, timeout)


class Reader:
    """A reader that is not the API client, to tell which one a pass was given."""

    def get(self, res: object, name: str, namespace: str | None = None) -> Obj | None:
        return None

    def list(self, res: object, namespace: str | None = None, *,
             label_selector: str | None = None) -> list[Obj]:
        return []


def made(api: Api, calls: Calls, readers: list[object] | None = None,
         fails: bool = False) -> tuple[Dispatcher, KubeClient]:
    def behaviour(ctx: Context, key: ObjectKey) -> Result | None:
        if readers is not None:
            readers.append(ctx.reader)
        if fails:
            raise TemporaryError("the API server is busy", retry_after=5.0)
        return None

    kube = KubeClient(api, retries=0)
    reader = Reader()
    wake = Wakes("status", lambda: kube, namespace="opendatahub", broker="odh-training",
                 clock=Clock())
    return Dispatcher("status", [recording_controller(calls, behaviour)], lambda: kube,
                      no_recorder, reader=lambda: reader, wakes=wake,
                      synced=lambda timeout: True), kube


@pytest.mark.parametrize(("status", "kind", "passes"), [
    pytest.param(200, "ok", 2, id="every-parent"),
    pytest.param(404, "ok", 0, id="kind-not-served"),
    pytest.param(503, "retry", 0, id="list-unavailable"),
    pytest.param(403, "retry", 0, id="list-refused"),
])
def test_a_resync_passes_over_what_the_list_gives(status: int, kind: str, passes: int) -> None:
    calls = Calls()
    dispatcher, _ = made(Listing(status, ["a", "b"]), calls)
    assert dispatcher.resync().kind == kind
    assert len(calls.keys("status")) == passes


@pytest.mark.parametrize("run", [
    pytest.param(Dispatcher.resync, id="resync"),
    pytest.param(Dispatcher.wake, id="wake"),
])
def test_a_pass_over_every_parent_reads_the_caches(run: Callable[[Dispatcher], Outcome]) -> None:
    readers: list[object] = []
    dispatcher, kube = made(Api(jobs=["a", "b"]), Calls(), readers)
    assert run(dispatcher).kind == "ok"
    assert len(readers) == 2 and not any(reader is kube for reader in readers)


@pytest.mark.parametrize(("filled", "logged"), [
    pytest.param(True, False, id="filled"),
    pytest.param(False, True, id="still-filling"),
])
def test_a_pass_over_every_parent_waits_for_the_caches_to_fill(
        filled: bool, logged: bool, caplog: pytest.LogCaptureFixture) -> None:
    waited: list[float] = []

    def synced(timeout: float) -> bool:
        waited.append(timeout)
        return filled

    calls = Calls()
    dispatcher, _ = made(Api(jobs=["a"]), calls)
    dispatcher.synced = synced
    with caplog.at_level(logging.INFO, logger="functions.runtime.resyncs"):
        assert dispatcher.resync().kind == "ok"
    assert waited == [resyncs.CACHE_SYNC_SECONDS] and len(calls.keys("status")) == 1
    assert ("have not filled" in caplog.text) is logged


def test_one_pass_over_every_parent_at_a_time() -> None:
    calls = Calls()
    dispatcher, _ = made(Api(jobs=["a"]), calls)
    with dispatcher.whole_pass:
        outcome = dispatcher.resync()
    assert (outcome.kind, outcome.retry_after) == ("busy", BUSY_RETRY_AFTER)
    assert calls.keys("status") == []
    assert dispatcher.resync().kind == "ok"


@pytest.mark.parametrize(("fails", "left"), [
    pytest.param(False, [], id="passed-deletes-the-fired-wake"),
    pytest.param(True, ["2026-12-06T12:03:00Z"], id="failed-keeps-it-for-the-retry"),
])
def test_a_wake_deletes_its_fired_pingsource_only_after_its_pass(fails: bool,
                                                                  left: list[str]) -> None:
    api = Api(jobs=["a"])
    fired = wakes.wake_source("status", datetime(2026, 12, 6, 12, 3, tzinfo=UTC),
                              "opendatahub", "odh-training")
    api.sources[fired["metadata"]["name"]] = fired
    dispatcher, _ = made(api, Calls(), fails=fails)
    assert dispatcher.wake().retriable is fails
    assert minutes(api) == left
    dispatcher.timers.cancel_all()
