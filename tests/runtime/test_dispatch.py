"""Dispatch rules that need no API server: verdicts, per-route coalescing, requeue timers."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from functions.core.errors import TemporaryError
from functions.core.events import ApiEvent, ObjectRef, Operation
from functions.core.keys import ObjectKey
from functions.kube import resources
from functions.kube.client import ApiError
from functions.kube.gaps import Change, Journal, reference, true_conditions
from functions.runtime.dispatch import Dispatcher
from functions.runtime.outcomes import Outcome, Route
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context, FunctionName, Obj, Result
from tests.runtime.controllers import JOB_LABEL, Calls, recording_controller
from tests.runtime.test_app import refusing_kube


def no_recorder() -> EventRecorder:
    return EventRecorder(refusing_kube(None), "test")


A = ObjectKey("kubeflow.org/v1", "PyTorchJob", "ns", "a")
B = ObjectKey("kubeflow.org/v1", "PyTorchJob", "ns", "b")
C = ObjectKey("kubeflow.org/v1", "PyTorchJob", "ns", "c")


def test_a_route_runs_one_pass_at_a_time_and_other_routes_run_in_parallel() -> None:
    calls = Calls()
    active: dict[str, int] = {"a": 0, "b": 0}
    peak: dict[str, int] = {"a": 0, "b": 0}
    overlap = threading.Event()
    guard = threading.Lock()

    def work(ctx: Context, key: ObjectKey) -> None:
        with guard:
            active[key.name] += 1
            peak[key.name] = max(peak[key.name], active[key.name])
            if active["a"] and active["b"]:
                overlap.set()
        time.sleep(0.05)
        with guard:
            active[key.name] -= 1

    dispatcher = Dispatcher("reconcile", [recording_controller(calls, work)],
                            lambda: refusing_kube(None), no_recorder)
    controller = dispatcher.controllers[0]
    # Another version of the same kind names the same object, hence the same route.
    a_other_version = ObjectKey("kubeflow.org/v2", "PyTorchJob", "ns", "a")
    outcomes: list[Outcome] = []
    threads = [threading.Thread(target=lambda k=key: outcomes.append(
                   dispatcher.run(Route(controller, k))))
               for key in (A, a_other_version, A, B, B)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak == {"a": 1, "b": 1}
    assert overlap.is_set()
    assert [o.kind for o in outcomes] == ["ok"] * 5
    assert len(dispatcher.runs) == 0


def test_deliveries_during_a_pass_share_the_next_one() -> None:
    """Five deliveries arriving while a pass runs cost one more pass, not five, and none is
    answered before a pass that started after it arrived has finished."""
    calls = Calls()
    first_started = threading.Event()
    release = threading.Event()
    finished: list[float] = []

    def slow_first(ctx: Context, key: ObjectKey) -> None:
        if not first_started.is_set():
            first_started.set()
            release.wait(5)
        finished.append(time.monotonic())

    dispatcher = Dispatcher("reconcile", [recording_controller(calls, slow_first)],
                            lambda: refusing_kube(None), no_recorder)
    route = Route(dispatcher.controllers[0], A)
    answered: list[float] = []

    def deliver() -> None:
        assert dispatcher.run(route).kind == "ok"
        answered.append(time.monotonic())

    first = threading.Thread(target=deliver)
    first.start()
    assert first_started.wait(5)
    late = [threading.Thread(target=deliver) for _ in range(5)]
    for thread in late:
        thread.start()
    time.sleep(0.1)
    assert answered == []              # everyone waits for a pass that covers them
    release.set()
    for thread in [first, *late]:
        thread.join()
    assert len(calls.keys()) == 2
    assert len(answered) == 6
    assert min(answered[1:]) >= finished[1]


def test_a_route_busy_too_long_answers_busy() -> None:
    calls = Calls()
    release = threading.Event()

    def stuck(ctx: Context, key: ObjectKey) -> None:
        release.wait(5)

    dispatcher = Dispatcher("reconcile", [recording_controller(calls, stuck)],
                            lambda: refusing_kube(None), no_recorder, lock_timeout=0.05)
    route = Route(dispatcher.controllers[0], A)
    holder = threading.Thread(target=dispatcher.run, args=(route,))
    holder.start()
    while not calls.keys():
        time.sleep(0.005)
    outcome = dispatcher.run(route)
    release.set()
    holder.join()
    assert (outcome.kind, outcome.retry_after) == ("busy", 5.0)
    assert calls.keys() == [A]
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


def pod(name: str, job: str, version: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(version),
                         "labels": {JOB_LABEL: job}}}


def changed(operation: str, obj: dict[str, Any]) -> Change:
    """A change the journal applied now."""
    return Change(operation, obj, time.monotonic())


def test_a_catch_up_runs_each_parent_of_what_was_missed_once_and_requeues_retries() -> None:
    calls = Calls()

    def busy_on_b(ctx: Context, key: ObjectKey) -> None:
        if key.name == "b":
            raise TemporaryError("the API server is busy", 30)

    dispatcher = Dispatcher("status", [recording_controller(calls, busy_on_b)],
                            lambda: refusing_kube(None), no_recorder,
                            not_sent=frozenset({("Pod", "add")}))

    # An event brought c-0 at version 7: a change at 7 or before needs no catch-up.
    seen = pod("c-0", "c", 7)
    event = ApiEvent(id="1", source="test", type="dev.knative.apiserver.resource.update",
                     operation="update", mode="resource", object=seen,
                     ref=ObjectRef(api_version="v1", kind="Pod", namespace="ns", name="c-0"))
    assert dispatcher.handle(event).kind == "ok"
    assert calls.keys("status") == [C]
    changes = [changed("update", pod(f"{job}-{index}", job, 5)) for job in ("a", "b")
               for index in (0, 1)]
    changes += [changed("update", pod("c-0", "c", 7)),                    # seen
                changed("add", pod("d-0", "d", 9)),                       # never sent to status
                changed("update", {"metadata": {"name": "stray", "namespace": "ns"}})]
    dispatcher.catch_up(resources.PODS, changes)
    assert sorted(calls.keys("status")[1:]) == [A, B]
    assert dispatcher.timers.pending() == 1     # b asked to be retried; nothing else will
    dispatcher.timers.cancel_all()
    # A later version of the seen pod is news again; a changed parent is a route of its own.
    dispatcher.catch_up(resources.PODS, [changed("delete", pod("c-0", "c", 8))])
    dispatcher.catch_up(resources.PYTORCHJOBS,
                        [changed("update", {"metadata": {"name": "a", "namespace": "ns"}})])
    assert calls.keys("status")[-2:] == [C, A]


def test_a_catch_up_leaves_out_what_a_later_pass_or_an_own_write_covered() -> None:
    """A change this replica's cache had before a pass of its parent started is covered by
    that pass (another replica may have had its event); so is the version a write left."""
    calls = Calls()
    dispatcher = Dispatcher("status", [recording_controller(
        calls, lambda ctx, key: Result(wrote=11) if key.name == "b" else None)],
        lambda: refusing_kube(None), no_recorder)
    before = changed("update", pod("a-0", "a", 5))
    assert dispatcher.run(Route(dispatcher.controllers[0], A)).kind == "ok"
    assert dispatcher.run(Route(dispatcher.controllers[0], B)).kind == "ok"
    after = changed("update", pod("a-1", "a", 6))
    job_b = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
             "metadata": {"name": "b", "namespace": "ns", "resourceVersion": "11"}}
    dispatcher.catch_up(resources.PODS, [before])
    dispatcher.catch_up(resources.PYTORCHJOBS, [changed("update", job_b)])
    assert calls.keys("status") == [A, B]
    dispatcher.catch_up(resources.PODS, [before, after])
    assert calls.keys("status") == [A, B, A]


@pytest.mark.parametrize(("inputs", "conditions", "passes"), [
    pytest.param({}, [], 1, id="no-rule-takes-every-status-change"),
    pytest.param({"status": lambda ref: False}, [], 0, id="a-status-change-it-does-not-read"),
    pytest.param({"status": lambda ref: "Succeeded" in true_conditions(ref)},
                 [{"type": "Succeeded", "status": "True"}], 1, id="a-status-change-it-reads"),
])
def test_a_catch_up_leaves_out_parent_status_changes_the_handler_does_not_read(
        inputs: dict[FunctionName, Callable[[Obj], bool]], conditions: list[dict[str, str]],
        passes: int) -> None:
    calls = Calls()
    controller = dataclasses.replace(recording_controller(calls), status_inputs=inputs)
    dispatcher = Dispatcher("status", [controller], lambda: refusing_kube(None), no_recorder)
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "3"},
           "status": {"conditions": conditions}}
    alone = Change("update", reference(job), time.monotonic(), status_only=True)
    dispatcher.catch_up(resources.PYTORCHJOBS, [alone])
    assert calls.keys("status") == [A] * passes
    # a change of more than the status is always an input; a child's status change too
    dispatcher.catch_up(resources.PYTORCHJOBS, [dataclasses.replace(
        alone, status_only=False, at=time.monotonic())])
    dispatcher.catch_up(resources.PODS, [Change("update", pod("a-0", "a", 4), time.monotonic(),
                                                status_only=True)])
    assert calls.keys("status") == [A] * (passes + 2)


@pytest.mark.parametrize(("inputs", "conditions", "status_alone", "passes"), [
    pytest.param({"reconcile": lambda ref: False}, [], True, 0,
                 id="a-status-change-it-does-not-read"),
    pytest.param({"reconcile": lambda ref: "Succeeded" in true_conditions(ref)},
                 [{"type": "Succeeded", "status": "True"}], True, 1,
                 id="a-status-change-it-reads"),
    pytest.param({"reconcile": lambda ref: "Succeeded" in true_conditions(ref)},
                 [{"type": "Succeeded", "status": "False"}], True, 0,
                 id="a-false-condition-is-not-read-as-true"),
    pytest.param({}, [], True, 1, id="no-rule-takes-every-status-change"),
    pytest.param({"reconcile": lambda ref: False}, [], False, 1,
                 id="a-change-of-more-than-the-status"),
])
def test_an_event_of_a_parent_status_change_runs_only_handlers_that_read_it(
        inputs: dict[FunctionName, Callable[[Obj], bool]], conditions: list[dict[str, str]],
        status_alone: bool, passes: int) -> None:
    calls = Calls()
    controller = dataclasses.replace(recording_controller(calls), status_inputs=inputs)
    dispatcher = Dispatcher("reconcile", [controller], lambda: refusing_kube(None),
                            no_recorder)
    event = _job_event("update", 7)
    assert event.object is not None
    event.object["status"] = {"conditions": conditions}
    outcome = dispatcher.handle(event, status_alone=status_alone)
    assert calls.keys("reconcile") == [A] * passes
    assert outcome.kind == ("ok" if passes else "ignored")
    if status_alone:
        assert dispatcher.reads_status(event) is bool(passes)
    # a version a pass ran on counts as seen (a sweep does not run it again); one left out
    # does not, as what changed before it may be news (next test)
    assert dispatcher.seen.has(A, 7) is bool(passes)


def test_a_status_change_left_out_does_not_hide_an_earlier_change_from_a_catch_up() -> None:
    """A job created while the event source's watch was down has no add event; the update
    of its status (another function's write) is left out here, and the catch-up of the
    watch reset, which the journal answers with the job's latest change alone, still runs
    the job's first pass."""
    calls = Calls()
    controller = dataclasses.replace(recording_controller(calls),
                                     status_inputs={"reconcile": lambda ref: False})
    dispatcher = Dispatcher("reconcile", [controller], lambda: refusing_kube(None),
                            no_recorder)
    assert dispatcher.handle(_job_event("update", 7), status_alone=True).kind == "ignored"
    created = _job_event("add", 5).object
    assert created is not None
    journal = Journal()
    journal.record([("ADDED", created)])
    journal.record([("MODIFIED", {**created, "metadata": {**created["metadata"],
                                                          "resourceVersion": "7"}})],
                   status_only=True)
    [latest] = journal.since(0.0)[0]
    assert latest.obj["metadata"]["resourceVersion"] == "7"
    dispatcher.catch_up(resources.PYTORCHJOBS, [latest])
    assert calls.keys("reconcile") == [A]


def _job_event(operation: Operation, version: int,
               api_version: str = "kubeflow.org/v1") -> ApiEvent:
    job = {"apiVersion": api_version, "kind": "PyTorchJob",
           "metadata": {"name": "a", "namespace": "ns", "resourceVersion": str(version)}}
    return ApiEvent(id=f"{operation}-{version}", source="test",
                    type=f"dev.knative.apiserver.resource.{operation}", operation=operation,
                    mode="resource", object=job,
                    ref=ObjectRef(api_version=api_version, kind="PyTorchJob", namespace="ns",
                                  name="a"))


@pytest.mark.parametrize(("events", "passes"), [
    pytest.param([("update", 11)], 0, id="the-echo-of-the-write-runs-no-pass"),
    pytest.param([("update", 11), ("update", 11)], 1, id="a-redelivered-echo-runs-a-pass"),
    pytest.param([("update", 12)], 1, id="a-later-version-runs-a-pass"),
    pytest.param([("update", 10)], 1, id="an-earlier-version-runs-a-pass"),
    pytest.param([("delete", 11)], 1, id="a-deletion-at-that-version-runs-a-pass"),
    pytest.param([("update", 11, "kubeflow.org/v2")], 0, id="any-api-version-of-the-kind"),
])
def test_the_event_of_a_pass_own_write_runs_no_pass(events: list[tuple[Any, ...]],
                                                      passes: int) -> None:
    """A pass that wrote the job at version 11 (conditionally on the version it read) has
    already taken in what the event of version 11 carries."""
    calls = Calls()
    wrote = [True]

    def write_once(ctx: Context, key: ObjectKey) -> Result | None:
        if wrote[0]:
            wrote[0] = False
            return Result(wrote=11)
        return None

    dispatcher = Dispatcher("status", [recording_controller(calls, write_once)],
                            lambda: refusing_kube(None), no_recorder)
    assert dispatcher.run(Route(dispatcher.controllers[0], A)).kind == "ok"
    outcomes = [dispatcher.handle(_job_event(*event)) for event in events]
    assert len(calls.keys("status")) == 1 + passes
    assert outcomes[0].kind == ("ignored" if passes < len(events) else "ok")


def test_another_function_still_runs_on_the_event_of_a_write_it_did_not_make() -> None:
    calls = Calls()
    status = Dispatcher("status", [recording_controller(
        calls, lambda ctx, key: Result(wrote=11))], lambda: refusing_kube(None), no_recorder)
    reconcile = Dispatcher("reconcile", [recording_controller(calls)],
                           lambda: refusing_kube(None), no_recorder)
    assert status.run(Route(status.controllers[0], A)).kind == "ok"
    assert reconcile.handle(_job_event("update", 11)).kind == "ok"
    assert calls.keys("reconcile") == [A]


class ParentReads:
    """A client whose reads of the parent find it (``present``), find nothing, or fail."""

    def __init__(self, present: bool | None) -> None:
        self.present = present

    def get(self, res: resources.Resource, name: str, namespace: str | None = None) -> Obj | None:
        if self.present is None:
            raise TemporaryError("the API server is unreachable")
        return {"metadata": {"name": name}} if self.present else None


TERMINATING_REFUSAL = ApiError(403, "Forbidden", 'pods "a-worker-0" is forbidden: unable to '
                               "create new content in namespace ns because it is being "
                               "terminated")


@pytest.mark.parametrize(("error", "present", "kind"), [
    pytest.param(ApiError(404, "NotFound", 'pytorchjobs "a" not found'), False, "ok",
                 id="status-write-of-a-deleted-job"),
    pytest.param(ApiError(404, "NotFound", 'pods "x" not found'), True, "retry",
                 id="not-found-while-the-job-is-there"),
    pytest.param(ApiError(404, "NotFound", 'pytorchjobs "a" not found'), None, "retry",
                 id="not-found-and-the-job-unreadable"),
    pytest.param(TERMINATING_REFUSAL, True, "ok", id="create-in-a-terminating-namespace"),
    pytest.param(ApiError(403, "Forbidden", "no RBAC rule"), False, "retry",
                 id="any-other-refusal"),
    pytest.param(ApiError(400, "BadRequest", "unable to parse requirement"), False, "retry",
                 id="a-bad-request"),
])
def test_a_parent_gone_during_its_pass_ends_the_pass(error: ApiError, present: bool | None,
                                                     kind: str) -> None:
    """A job (or its namespace) deleted while its pass ran makes the pass's writes fail: the
    pass is done (nothing is left to do), not a handler failure retried until dead-lettered;
    a refusal of a write for a job that is still there remains one."""
    def refused(ctx: Context, key: ObjectKey) -> None:
        raise error

    dispatcher = Dispatcher("status", [recording_controller(Calls(), refused)],
                            lambda: ParentReads(present),  # type: ignore[arg-type,return-value]
                            no_recorder)
    outcome = dispatcher.run(Route(dispatcher.controllers[0], A))
    assert outcome.kind == kind
    assert (outcome.cause == "bug") == (kind == "retry")
